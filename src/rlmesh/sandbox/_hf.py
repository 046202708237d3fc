"""Materialize an ``hf://org/repo[@rev][:suite[/task]]`` source tree (SBX-10).

The repository is cloned with git from ``$RLMESH_SANDBOX_HF_ENDPOINT`` (default
``https://huggingface.co``; a local directory of ``org/repo`` git repositories works
too), LFS smudging skipped, checked out at the resolved commit, and its ``.git``
removed. A revision resolves as: a full 40-hex SHA as is; else the exact tag, then
the exact branch; no revision -> the remote HEAD. Unless ``allow_unpinned_hf``, only
a full SHA is accepted, so a build is reproducible.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ._errors import SandboxBuildError
from ._source import parse_hf

__all__ = ["hf_url", "materialize", "resolve_revision"]

GIT_TIMEOUT_SECONDS = 600.0
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


def hf_url(org: str, repo: str) -> str:
    base = os.environ.get("RLMESH_SANDBOX_HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    return f"{base}/{org}/{repo}"


def _git(args: list[str], what: str) -> str:
    git = shutil.which("git")
    if git is None:
        raise SandboxBuildError("hf:// sources need git on PATH (apt-get install git)")
    env = {**os.environ, "GIT_LFS_SKIP_SMUDGE": "1", "GIT_TERMINAL_PROMPT": "0"}
    try:
        proc = subprocess.run(
            [git, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_SECONDS,
            env=env,
        )
    except subprocess.TimeoutExpired:
        raise SandboxBuildError(
            f"{what}: git did not finish within {GIT_TIMEOUT_SECONDS:g}s"
        ) from None
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise SandboxBuildError(f"{what} failed (git exit {proc.returncode}):\n{tail}")
    return proc.stdout


def resolve_revision(url: str, revision: str | None) -> str:
    """The commit SHA a revision names on ``url`` (see the module docstring)."""
    if revision and _HEX40.match(revision):
        return revision
    refs: dict[str, str] = {}
    for line in _git(["ls-remote", "--", url], f"listing the refs of {url}").splitlines():
        sha, _, name = line.partition("\t")
        refs[name.strip()] = sha.strip()
    if revision is None:
        if "HEAD" not in refs:
            raise ValueError(f"{url} has no HEAD; name a revision (hf://org/repo@<commit>)")
        return refs["HEAD"]
    for name in (f"refs/tags/{revision}^{{}}", f"refs/tags/{revision}", f"refs/heads/{revision}"):
        if name in refs:
            return refs[name]
    raise ValueError(f"revision {revision!r} is neither a tag nor a branch of {url}")


def materialize(value: str, dest: Path, *, allow_unpinned: bool) -> tuple[str, Path]:
    """Clone the source into ``dest`` (no ``.git``); returns ``(commit, dest)``."""
    ref = parse_hf(value)
    if not (ref.revision and _HEX40.match(ref.revision)) and not allow_unpinned:
        raise ValueError(
            f"hf://{value} is not pinned to a full 40-hex commit SHA; pin one (hf://{ref.org}/{ref.repo}@<sha>) "
            "or pass SandboxBuild(allow_unpinned_hf=True)"
        )
    url = hf_url(ref.org, ref.repo)
    commit = resolve_revision(url, ref.revision)
    _git(["clone", "--quiet", "--no-checkout", "--", url, str(dest)], f"cloning {url}")
    _git(["-C", str(dest), "checkout", "--quiet", commit], f"checking out {commit} of {url}")
    shutil.rmtree(dest / ".git", ignore_errors=True)
    if not (dest / "env.py").is_file():
        raise ValueError(
            f"hf://{value} has no env.py at the repository root (it must define make_env(**kwargs))"
        )
    return commit, dest
