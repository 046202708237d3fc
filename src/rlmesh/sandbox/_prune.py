"""Remove the sandbox caches this tool made, and nothing else (``rlmesh sandbox prune``, :mod:`rlmesh._cli.sandbox`).

What counts as ours:

- venvs under ``$RLMESH_SANDBOX_CACHE/venv/`` that carry the ready marker
  (``.rlmesh-sandbox.json``) written when a sandbox venv is complete, with their
  ``<name>.build.log`` and ``.<name>.lock``; half-built ``.<name>.tmp-<pid>`` directories
  whose builder process is gone. A venv that a running process uses is kept.
- Docker images carrying the ``rlmesh.sandbox.image=1`` label (set on every image a
  sandbox build makes) and *stopped* containers carrying ``rlmesh.sandbox=1``. Running
  containers are never touched; an image a container still uses is reported, not forced.

Anything else in the cache directory (a file or directory without the marker) is listed
as "not created by rlmesh" and left alone.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .._spawn.host import pid_alive, tree_size
from ._docker import LABEL, DockerCLI
from ._errors import SandboxError
from ._venv import READY_MARKER, cache_dir

__all__ = ["PruneReport", "prune"]

_TMP = re.compile(r"^\.(?P<name>.+)\.tmp-(?P<pid>\d+)$")
_LOCK = re.compile(r"^\.(?P<name>.+)\.lock$")
_LOG = re.compile(r"^(?P<name>.+)\.build\.log$")


@dataclass
class PruneReport:
    """What :func:`prune` removed (or would remove), kept, and refused to touch."""

    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    freed_bytes: int = 0


def _venvs_in_use(root: Path) -> set[str]:
    """Names of the venvs under ``root`` whose interpreter a running process was started from."""
    used: set[str] = set()
    prefix = str(root) + os.sep
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return used
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        if argv0.startswith(prefix):
            used.add(argv0[len(prefix) :].split(os.sep, 1)[0])
    return used


def _prune_venvs(report: PruneReport, dry_run: bool) -> None:
    root = cache_dir() / "venv"
    if not root.is_dir():
        return
    in_use = _venvs_in_use(root)
    entries = sorted(root.iterdir())
    ours = {
        p.name
        for p in entries
        if p.is_dir() and not p.is_symlink() and (p / READY_MARKER).is_file()
    }
    removed: set[str] = set()

    def remove(path: Path, what: str) -> None:
        size = tree_size(path) if path.is_dir() else path.lstat().st_size
        if not dry_run:
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except OSError as exc:
                report.errors.append(f"{what} {path}: {exc}")
                return
        report.removed.append(f"{what} {path}")
        report.freed_bytes += size

    for path in entries:
        name = path.name
        tmp = _TMP.match(name)
        if name in ours:
            if name in in_use:
                report.kept.append(f"venv {path} (in use by a running sandbox)")
                continue
            remove(path, "venv")
            removed.add(name)
        elif tmp and path.is_dir() and not path.is_symlink():
            if pid_alive(int(tmp["pid"])):
                report.kept.append(f"partial venv {path} (being built)")
            else:
                remove(path, "partial venv")
    for path in entries:  # a venv's build log and lock go with it
        log, lock = _LOG.match(path.name), _LOCK.match(path.name)
        if path.is_file() and (
            (log and log["name"] in removed) or (lock and lock["name"] in removed)
        ):
            remove(path, "file")
        elif path.name in ours or _TMP.match(path.name) or (path.is_file() and (log or lock)):
            continue
        else:
            report.foreign.append(str(path))


def _prune_docker(report: PruneReport, dry_run: bool, cli: DockerCLI) -> None:
    if not cli.cli_available() or not cli.daemon_running():
        report.kept.append("docker: no daemon answers; images and containers not examined")
        return
    try:
        ps = cli.run(
            [
                "ps",
                "-a",
                "--filter",
                f"label={LABEL}=1",
                "--format",
                "{{.ID}}\t{{.State}}\t{{.Names}}",
            ]
        )
        for line in ps.stdout.splitlines():
            cid, state, name = ([*line.split("\t"), "", ""])[:3]
            if not cid.strip():
                continue
            if state.strip() in ("running", "restarting", "paused"):
                report.kept.append(f"container {name or cid} ({state.strip()})")
                continue
            if not dry_run and cli.run(["rm", cid.strip()], check=False).returncode != 0:
                report.errors.append(f"container {name or cid}: docker rm failed")
                continue
            report.removed.append(f"container {name or cid}")
        images = cli.run(
            [
                "image",
                "ls",
                "--filter",
                f"label={LABEL}.image=1",
                "--format",
                "{{.ID}}\t{{.Repository}}:{{.Tag}}",
            ]
        )
        for line in images.stdout.splitlines():
            iid, ref = ([*line.split("\t"), ""])[:2]
            if not iid.strip():
                continue
            if not dry_run:
                proc = cli.run(
                    ["rmi", ref.strip() if ref.strip() and "<none>" not in ref else iid.strip()],
                    check=False,
                )
                if proc.returncode != 0:
                    why = ((proc.stderr or "").strip().splitlines() or ["in use"])[-1]
                    report.kept.append(f"image {ref or iid} ({why})")
                    continue
            report.removed.append(f"image {ref or iid}")
    except SandboxError as exc:
        report.errors.append(f"docker: {exc}")


def prune(
    *, dry_run: bool = False, venvs: bool = True, docker: bool = True, cli: DockerCLI | None = None
) -> PruneReport:
    """Remove cached sandbox venvs / images / stopped containers this tool made (see the module doc)."""
    report = PruneReport()
    if venvs:
        _prune_venvs(report, dry_run)
    if docker:
        _prune_docker(report, dry_run, cli or DockerCLI())
    return report
