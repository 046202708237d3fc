"""The Docker backend, through the ``docker`` CLI (SBX-13..19).

Why the CLI and not the ``docker`` SDK: the CLI is what every Docker install ships
(and what ``DOCKER_HOST`` / contexts configure), each call runs in its own process
so a hung daemon is bounded by a plain subprocess timeout (SBX-16), the argv is the
unit under test (a fake ``docker`` on ``PATH`` covers every error path), and no extra
dependency is needed.

Every container gets the same hardened ``docker run`` (one argv builder for the build
and prebuilt paths): ``--init``, ``--cap-drop ALL``, ``no-new-privileges``, an
ephemeral port on 127.0.0.1 only, and owner labels so a later start can reap the
containers of a dead owner.

Orphan reaping is deliberately conservative: a Docker daemon can be shared by several
hosts (``DOCKER_HOST`` over TCP, a mounted socket in CI), and a pid (or even a pid
namespace id: the initial one is the same on every Linux host) proves nothing on
another kernel. A container is removed only when its labels prove its owner ran on
this very kernel boot (``/proc/sys/kernel/random/boot_id``) in this pid namespace and
that pid is gone; anything else (no labels, another host, another namespace, an
owner still alive) is left alone. ``rlmesh sandbox prune`` removes stopped leftovers
on request.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._spawn.host import pid_alive
from .._token import TOKEN_ENV
from ..errors import ConnectFailed, RequestTimeout
from ..serve import ping
from ._errors import DockerUnavailable, SandboxBuildError, SandboxError, SandboxStartError
from ._options import SandboxRuntime
from ._plan import CONTAINER_PORT, BuildPlan
from ._proc import run_bounded

__all__ = [
    "CALL_TIMEOUT_SECONDS",
    "Container",
    "DockerCLI",
    "build_image",
    "parse_build_memory",
    "parse_port",
    "orphan_verdict",
    "reap_orphans",
    "run_argv",
    "start_container",
]

CALL_TIMEOUT_SECONDS = 60.0
PULL_TIMEOUT_SECONDS = 1800.0
BUILD_TIMEOUT_SECONDS = 1800.0
LABEL = "rlmesh.sandbox"
_DAEMON_DOWN = (
    "cannot connect to the docker daemon",
    "is the docker daemon running",
    "error during connect",
    "connection refused",
    "no such file or directory",
)
_NOT_FOUND = ("no such container", "no such object", "no such image")


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


class DockerCLI:
    """Runs ``docker`` with a hang guard on every call; maps a down daemon to :class:`DockerUnavailable`."""

    def __init__(self, executable: str | None = None) -> None:
        self._exe = executable

    @property
    def exe(self) -> str:
        if self._exe is None:
            name = os.environ.get("RLMESH_DOCKER", "docker")
            found = shutil.which(name)
            if found is None:
                raise DockerUnavailable(
                    f"the Docker CLI ({name!r}) is not on PATH: install Docker, or use backend='venv' "
                    "for a gym:// source"
                )
            self._exe = found
        return self._exe

    def cli_available(self) -> bool:
        try:
            _ = self.exe
        except DockerUnavailable:
            return False
        return True

    def run(
        self,
        args: Sequence[str],
        *,
        timeout: float = CALL_TIMEOUT_SECONDS,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``docker ARGS`` (stdin closed, output captured). SBX-16: at most ``timeout`` seconds."""
        proc: subprocess.CompletedProcess[str] = run_bounded(
            [self.exe, *args],
            timeout=timeout,
            env=env,
            error=DockerUnavailable,
            timed_out=lambda: (
                f"Docker daemon not responding: 'docker {args[0]}' did not finish within {timeout:g}s"
            ),
            not_started=lambda exc: f"could not run the Docker CLI {self.exe!r}: {exc}",
            capture_output=True,
            text=True,
        )
        if check and proc.returncode != 0:
            raise self.error(args, proc)
        return proc

    def error(self, args: Sequence[str], proc: subprocess.CompletedProcess[str]) -> SandboxError:
        err = (proc.stderr or proc.stdout or "").strip()
        low = err.lower()
        if any(s in low for s in _DAEMON_DOWN) and "daemon" in low:
            host = os.environ.get("DOCKER_HOST", "the default socket")
            return DockerUnavailable(
                f"the Docker daemon is not reachable ({host}): {_tail(err, 3)}. Start it (or set DOCKER_HOST), "
                "or use backend='venv' for a gym:// source"
            )
        return SandboxError(
            f"'docker {' '.join(args[:2])}' failed (exit {proc.returncode}): {_tail(err, 10)}"
        )

    def daemon_running(self, timeout: float = 5.0) -> bool:
        """Whether a daemon answers within ``timeout`` (never raises)."""
        try:
            proc = self.run(
                ["version", "--format", "{{.Server.Version}}"], timeout=timeout, check=False
            )
        except SandboxError:
            return False
        return proc.returncode == 0 and bool(proc.stdout.strip())

    def ensure_daemon(self) -> None:
        proc = self.run(["version", "--format", "{{.Server.Version}}"], check=False, timeout=15.0)
        if proc.returncode != 0:
            raise self.error(["version"], proc)

    # -- images -------------------------------------------------------------------------------

    def image_exists(self, ref: str) -> bool:
        proc = self.run(["image", "inspect", "--format", "{{.Id}}", ref], check=False)
        if proc.returncode == 0:
            return True
        if any(s in (proc.stderr or "").lower() for s in _NOT_FOUND):
            return False
        raise self.error(["image", "inspect"], proc)

    def pull(self, ref: str) -> None:
        self.run(["pull", ref], timeout=PULL_TIMEOUT_SECONDS)


# -- docker run ------------------------------------------------------------------------------


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    """This kernel boot's id: unique per host and per boot (``None`` where there is none, e.g. macOS)."""
    try:
        with open(BOOT_ID_FILE) as f:
            text = f.read().strip()
    except OSError:
        return None
    return text or None


def run_argv(
    image: str,
    *,
    name: str,
    env: Mapping[str, str],
    runtime: SandboxRuntime | None = None,
    owner_pid: int | None = None,
    pass_env: Sequence[str] = (),
) -> list[str]:
    """SBX-13: the one hardened ``docker run -d`` argv (image last).

    ``pass_env``: variables the container takes from the ``docker`` command's own
    environment (``-e NAME``, no value on the command line: a secret never shows in ``ps``).
    """
    pid = os.getpid() if owner_pid is None else owner_pid
    argv = [
        "run",
        "-d",
        "--init",
        "--name",
        name,
        "-p",
        f"127.0.0.1::{CONTAINER_PORT}",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--label",
        f"{LABEL}=1",
        "--label",
        f"{LABEL}.owner-pid={pid}",
    ]
    ns = _pid_namespace()
    if ns:
        argv += ["--label", f"{LABEL}.owner-pid-ns={ns}"]
    boot = boot_id()
    if boot:
        argv += ["--label", f"{LABEL}.owner-boot-id={boot}"]
    if runtime is not None:
        if runtime.gpus is not None:
            argv += ["--gpus", str(runtime.gpus)]
        if runtime.user is not None:
            argv += ["--user", str(runtime.user)]
        for device in runtime.devices or ():
            argv += ["--device", device]
        for volume in runtime.volumes or ():
            argv += ["-v", volume]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    for key in pass_env:
        argv += ["-e", key]
    argv.append(image)
    return argv


def parse_port(text: str) -> int:
    """SBX-13: the host port from ``docker port`` output (last ``:``-field of a line; ``[::]:P`` ok)."""
    for line in text.splitlines():
        line = line.strip()
        if ":" in line:
            tail = line.rsplit(":", 1)[1].strip()
            if tail.isdigit():
                return int(tail)
    raise SandboxError(
        f"could not read the container's host port from 'docker port' output {text!r}"
    )


class Container:
    """A started sandbox container: its id, its address, its logs; :meth:`stop` never leaks it."""

    backend = "docker"

    def __init__(self, cli: DockerCLI, container_id: str, name: str, image: str) -> None:
        self.cli = cli
        self.id = container_id
        self.name = name
        self.image = image
        self.address = ""
        self.stopped = False
        self.token: str | None = None  # the endpoint's token (start_container sets it)

    def describe(self) -> str:
        return f"container {self.id[:12]} ({self.image})"

    def logs_tail(self, lines: int = 50) -> str:
        try:
            proc = self.cli.run(["logs", "--tail", str(lines), self.id], check=False, timeout=15.0)
        except SandboxError as exc:
            return f"<logs unavailable: {exc}>"
        return _tail((proc.stdout or "") + (proc.stderr or ""), lines) or "<no output>"

    def state(self) -> tuple[str, int]:
        """``(status, exit_code)`` from ``docker inspect``; a failure raises a distinct error (SBX-17)."""
        proc = self.cli.run(
            ["inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", self.id], check=False
        )
        if proc.returncode != 0:
            if any(s in proc.stderr.lower() for s in _NOT_FOUND):
                return "removed", -1
            raise SandboxStartError(
                f"could not inspect {self.describe()} (docker daemon busy?): {_tail(proc.stderr, 3)}"
            )
        status, _, code = proc.stdout.strip().partition(" ")
        return status, int(code) if code.lstrip("-").isdigit() else -1

    def exited(self) -> bool:
        """Whether the container has stopped (``SandboxStartError`` when inspect fails)."""
        status, _ = self.state()
        return status in ("exited", "dead", "removed")

    def alive(self) -> bool | None:
        try:
            status, _ = self.state()
        except SandboxError:
            return None
        return status in ("running", "created", "restarting")

    def stop(self) -> None:
        """SBX-19: stop if running, then remove; "no such container" counts as done. Retryable."""
        if self.stopped:
            return
        try:
            status, _ = self.state()
        except SandboxStartError:
            status = "unknown"
        if status == "removed":
            self.stopped = True
            return
        if status in ("running", "restarting", "unknown"):
            proc = self.cli.run(
                ["stop", "-t", "5", self.id], check=False, timeout=CALL_TIMEOUT_SECONDS
            )
            if proc.returncode != 0 and not any(s in proc.stderr.lower() for s in _NOT_FOUND):
                raise self.cli.error(["stop", self.id], proc)
        proc = self.cli.run(["rm", "-f", self.id], check=False)
        if proc.returncode != 0 and not any(s in proc.stderr.lower() for s in _NOT_FOUND):
            raise self.cli.error(["rm", self.id], proc)
        self.stopped = True


_OWNER_LABELS = ("owner-pid", "owner-pid-ns", "owner-boot-id")


def orphan_verdict(
    labels: Mapping[str, str],
    *,
    me: int,
    my_boot_id: str | None,
    my_pid_ns: str | None,
    alive: Callable[[int], bool],
) -> str | None:
    """Why a sandbox container must be kept, or ``None`` when it is provably an orphan of this host.

    ``labels`` maps ``owner-pid`` / ``owner-pid-ns`` / ``owner-boot-id`` (the suffixes of
    the ``rlmesh.sandbox.*`` labels) to their values; missing ones are ``""``. Only a
    container whose owner ran on this kernel boot, in this pid namespace, and is dead is
    an orphan: unknown provenance is never removed.
    """
    pid_text = labels.get("owner-pid", "").strip()
    ns = labels.get("owner-pid-ns", "").strip()
    boot = labels.get("owner-boot-id", "").strip()
    if not pid_text.isdigit():
        return "no owner pid label (unknown provenance)"
    if not boot or not ns:
        return "no host id label (unknown provenance: its owner may run on another host)"
    if my_boot_id is None or boot != my_boot_id:
        return "owned by another host (or an earlier boot)"
    if my_pid_ns is None or ns != my_pid_ns:
        return "owned by another pid namespace on this host (liveness unknown)"
    pid = int(pid_text)
    if pid == me:
        return "owned by this process"
    if alive(pid):
        return "its owner is alive"
    return None


def reap_orphans(cli: DockerCLI) -> list[str]:
    """SBX-15: remove sandbox containers whose owner provably ran on this host and is dead.

    Best effort, never raises; see :func:`orphan_verdict` for the rule.
    """
    reaped: list[str] = []
    fmt = "\t".join(
        [
            "{{.ID}}",
            "{{.State}}",
            *('{{.Label "' + f"{LABEL}.{key}" + '"}}' for key in _OWNER_LABELS),
        ]
    )
    try:
        proc = cli.run(["ps", "-a", "--filter", f"label={LABEL}=1", "--format", fmt], check=False)
    except SandboxError:
        return reaped
    if proc.returncode != 0:
        return reaped
    me, my_ns, my_boot = os.getpid(), _pid_namespace(), boot_id()
    for line in proc.stdout.splitlines():
        fields = [*line.split("\t"), *([""] * (2 + len(_OWNER_LABELS)))]
        cid = fields[0].strip()
        if not cid:
            continue
        labels = {key: fields[2 + i].strip() for i, key in enumerate(_OWNER_LABELS)}
        if (
            orphan_verdict(labels, me=me, my_boot_id=my_boot, my_pid_ns=my_ns, alive=pid_alive)
            is not None
        ):
            continue
        with contextlib.suppress(SandboxError):
            if cli.run(["rm", "-f", cid], check=False).returncode == 0:
                reaped.append(cid)
    return reaped


def start_container(
    cli: DockerCLI,
    image: str,
    *,
    slug: str,
    env: Mapping[str, str],
    runtime: SandboxRuntime | None,
    connect_timeout_seconds: float,
    progress: Any,
    hint: str = "",
    token: str | None = None,
) -> Container:
    """Reap orphans, ``docker run``, read the port, wait until the server answers a ping (SBX-13..18).

    ``token``: the endpoint's token, handed to the server as ``$RLMESH_TOKEN`` through the
    ``docker`` command's environment (never its command line); the container's clients
    send it. Any failure after ``docker run`` removes the container before re-raising.
    """
    deadline = time.monotonic() + connect_timeout_seconds
    reap_orphans(cli)
    name = f"rlmesh-sandbox-{slug}-{uuid.uuid4().hex[:12]}"
    progress.phase("starting container")
    try:
        # SBX-25: a BYO command serves on $RLMESH_ADDRESS; inside the container that must be every
        # interface (the host side is published on 127.0.0.1 only).
        full_env = {"RLMESH_ADDRESS": f"0.0.0.0:{CONTAINER_PORT}", **env}
        secrets = {TOKEN_ENV: token} if token else {}
        argv = run_argv(image, name=name, env=full_env, runtime=runtime, pass_env=tuple(secrets))
        proc = cli.run(argv, env=secrets or None)
    except BaseException:
        with contextlib.suppress(Exception):  # SBX-13: a created-but-failed container, by name
            cli.run(["rm", "-f", name], check=False)
        raise
    container = Container(cli, proc.stdout.strip().splitlines()[-1].strip(), name, image)
    container.token = token
    try:
        try:
            port_text = cli.run(["port", container.id, f"{CONTAINER_PORT}/tcp"]).stdout
            container.address = f"tcp://127.0.0.1:{parse_port(port_text)}"
        except SandboxError as exc:
            raise SandboxStartError(
                f"{container.describe()} did not publish its port ({exc}); recent logs:\n{container.logs_tail()}{hint}"
            ) from None
        progress.phase("make() running")
        wait_ready(container, deadline, connect_timeout_seconds, hint=hint)
    except BaseException:
        with contextlib.suppress(Exception):
            container.stop()
        raise
    return container


def wait_ready(handle: Any, deadline: float, timeout: float, *, hint: str = "") -> None:
    """SBX-17: ping until the server answers; fail fast when it exited; name the timeout otherwise."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SandboxStartError(
                f"{handle.describe()} did not become ready within {timeout:g}s; recent logs:\n{handle.logs_tail()}{hint}"
            )
        try:
            ping(handle.address, timeout_seconds=min(remaining, 2.0))
            return
        except (ConnectFailed, RequestTimeout, OSError):
            pass
        if handle.exited():
            raise SandboxStartError(
                f"{handle.describe()} exited before becoming ready; recent logs:\n{handle.logs_tail()}{hint}"
            )
        time.sleep(min(0.1, max(deadline - time.monotonic(), 0)))


# -- image builds ----------------------------------------------------------------------------

_SIZE = re.compile(r"^\d+(\.\d+)?[bkmg]?$", re.IGNORECASE)


def parse_build_memory(value: str | None) -> str | None:
    """SBX-11: ``None``/""/off/none/unbounded -> no cap; ``auto`` -> max(RAM - 8 GiB, 4 GiB); a size as is."""
    text = (
        (value if value is not None else os.environ.get("RLMESH_SANDBOX_BUILD_MEMORY", ""))
        .strip()
        .lower()
    )
    if text in ("", "off", "none", "unbounded"):
        return None
    if text == "auto":
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            total = 0
        gib = max(total // (1 << 30) - 8, 4)
        return f"{gib}g"
    if not _SIZE.match(text):
        raise ValueError(
            f"build_memory must be a size like '8g' or '512m', 'auto' or 'off', got {value!r}"
        )
    return text


def build_image(cli: DockerCLI, plan: BuildPlan, progress: Any) -> str:
    """SBX-7/8: reuse ``plan.image_tag`` if it exists, else build it (no leftovers on failure)."""
    tag = plan.image_tag
    if cli.image_exists(tag):
        return tag
    memory = parse_build_memory(plan.build_memory)
    n = len(plan.requirements(""))
    progress.phase(f"building image {tag} (installing {n} packages)")
    with tempfile.TemporaryDirectory(prefix="rlmesh-build-") as tmp:
        ctx = Path(tmp)
        plan.write_context(ctx)
        argv = ["build", "--rm", "--force-rm", "-t", tag, "--label", f"{LABEL}.image=1"]
        if memory:
            argv += ["--memory", memory, "--memory-swap", memory]
        argv.append(str(ctx))
        proc = cli.run(
            argv, timeout=BUILD_TIMEOUT_SECONDS, check=False, env={"DOCKER_BUILDKIT": "0"}
        )
    if proc.returncode != 0:
        err = cli.error(argv, proc)
        if isinstance(err, DockerUnavailable):
            raise err
        out = (proc.stdout or "") + (proc.stderr or "")
        raise SandboxBuildError(
            f"building sandbox image {tag} from {plan.base_image!r} failed (exit {proc.returncode}); last build output:\n"
            f"{_tail(out, 30)}"
        )
    print(f"rlmesh: built sandbox image {tag}", file=sys.stderr, flush=True)
    return tag
