"""The venv backend: a content-addressed virtual environment and a child env server on a unix socket.

For the common case where what needs isolating is the Python dependency stack
(pinned numpy, an old gymnasium, a simulator's wheels), a virtual environment is
enough and much cheaper than an image. The environment lives in
``$RLMESH_SANDBOX_CACHE`` (default ``~/.cache/rlmesh/sandbox``) under
``venv/<slug>-<hash12>``, the hash having the same inputs as the Docker image tag
(the interpreter stands in for the base image). It is created with ``uv`` when
available, else ``python -m venv`` + pip, built in a temporary directory and renamed
into place once complete (a lock serializes concurrent builders), so a directory
that exists is always usable.

The env server runs as a child process on a unix socket in a private directory,
so a session gets the same-host shared-memory fast path. Nothing but the Python
packages is isolated: same user, same filesystem, same network.

Beside it runs a small *log keeper* (a ``python -I -S`` process, no thread in the
owner): it reads the server's stdout/stderr from a pipe into ``server.log``, rotating
it to ``server.log.1`` past ``$RLMESH_SANDBOX_LOG_BYTES`` (1 MiB), so a chatty env
uses at most twice that on disk and a crash report reads only the tail. It is also
the server's watchdog: when the owner process dies, in any phase (``make()``
included, even one stuck in native code), it sends the server's process group
SIGTERM, then SIGKILL after a grace period, and removes the run directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .._token import TOKEN_ENV
from ._docker import wait_ready
from ._errors import SandboxBuildError, SandboxStartError
from ._plan import BuildPlan, host_ca_bundle
from ._proc import run_bounded

__all__ = ["ServerProcess", "cache_dir", "ensure_venv", "find_uv", "start_server"]

CREATE_TIMEOUT_SECONDS = 300.0
INSTALL_TIMEOUT_SECONDS = 1800.0
READY_MARKER = ".rlmesh-sandbox.json"


def cache_dir() -> Path:
    root = os.environ.get("RLMESH_SANDBOX_CACHE")
    if root:
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "rlmesh" / "sandbox"


def find_uv() -> str | None:
    """``uv`` from PATH or the ``uv`` PyPI package; ``RLMESH_SANDBOX_INSTALLER=pip`` forces pip."""
    choice = os.environ.get("RLMESH_SANDBOX_INSTALLER", "").strip().lower()
    if choice == "pip":
        return None
    found = shutil.which("uv")
    if found is None:
        try:
            from uv import find_uv_bin

            found = find_uv_bin()
        except Exception:
            found = None
    if found is None and choice == "uv":
        raise SandboxBuildError(
            "RLMESH_SANDBOX_INSTALLER=uv but uv is not installed (pip install uv)"
        )
    return found


LOG_BYTES = 1 << 20
TAIL_BYTES = 64 * 1024  # at most this much of a log is read for a report
OWNER_POLL_SECONDS = 0.2
WATCHDOG_GRACE_SECONDS = 5.0


def log_cap() -> int:
    """The size at which the server log rotates (``$RLMESH_SANDBOX_LOG_BYTES``, at least 64 KiB)."""
    raw = os.environ.get("RLMESH_SANDBOX_LOG_BYTES", "").strip()
    try:
        value = int(raw) if raw else LOG_BYTES
    except ValueError:
        raise ValueError(
            f"RLMESH_SANDBOX_LOG_BYTES must be a number of bytes, got {raw!r}"
        ) from None
    return max(value, 64 * 1024)


def _read_tail(path: Path, limit: int) -> bytes | None:
    """The last ``limit`` bytes of ``path`` (``None`` if unreadable): O(limit), whatever the file's size."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(size - limit, 0))
            return f.read(limit)
    except OSError:
        return None


def _tail_file(path: Path, lines: int, *, previous: Path | None = None) -> str:
    """The last ``lines`` lines of a log (and of its rotated ``previous`` part when needed)."""
    data = _read_tail(path, TAIL_BYTES)
    if previous is not None and (data is None or data.count(b"\n") <= lines):
        older = _read_tail(previous, TAIL_BYTES)
        if older is not None:
            data = older + (data or b"")
    if data is None:
        return "<no log>"
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "<no output>"


# The log keeper and watchdog (see the module docstring). Self-contained: it runs with
# ``-I -S`` on the host interpreter, so it starts in milliseconds and imports nothing of ours.
_KEEPER = r"""
import os, select, shutil, signal, sys, time
log, cap, owner, server, rundir, grace, poll = sys.argv[1:8]
cap, owner, server, grace, poll = int(cap), int(owner), int(server), float(grace), float(poll)
signal.signal(signal.SIGINT, signal.SIG_IGN)
flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
fd, size = os.open(log, flags, 0o600), 0
def write(chunk):
    global fd, size
    if size and size + len(chunk) > cap:  # rotate; ``log`` exists at every instant
        os.close(fd)
        fd = os.open(log + ".new", flags, 0o600)
        try:
            os.unlink(log + ".old")
        except OSError:
            pass
        try:
            os.link(log, log + ".old")
            os.replace(log + ".old", log + ".1")
        except OSError:  # no hard links here: a moment without ``log``
            os.replace(log, log + ".1")
        os.replace(log + ".new", log)
        size = 0
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view):]
    size += len(chunk)
def kill(sig):
    try:
        os.killpg(server, sig)
    except (ProcessLookupError, PermissionError):
        pass
gone_at = killed_at = None
while True:
    ready = select.select([0], [], [], poll)[0]
    if ready:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        try:
            write(chunk)
        except OSError:
            pass
    now = time.monotonic()
    if gone_at is None and os.getppid() != owner:
        gone_at = now
        kill(signal.SIGTERM)
    elif gone_at is not None and killed_at is None and now - gone_at > grace:
        killed_at = now
        kill(signal.SIGKILL)
    elif killed_at is not None and now - killed_at > grace:
        break
os.close(fd)
if gone_at is not None or os.getppid() != owner:
    shutil.rmtree(rundir, ignore_errors=True)
"""


def _run_logged(
    argv: list[str], log: Path, timeout: float, what: str, env: Mapping[str, str] | None = None
) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        proc = run_bounded(
            argv,
            timeout=timeout,
            env=env,
            error=SandboxBuildError,
            timed_out=lambda: (
                f"{what} did not finish within {timeout:g}s; last output:\n{_tail_file(log, 20)}"
            ),
            not_started=lambda exc: f"{what} could not run {argv[0]!r}: {exc}",
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if proc.returncode != 0:
        raise SandboxBuildError(
            f"{what} failed (exit {proc.returncode}); last output:\n{_tail_file(log, 20)}"
        )


def _installer_env() -> dict[str, str]:
    """uv does not read pip's config: hand it the CA bundle pip trusts on this host."""
    env: dict[str, str] = {}
    ca = host_ca_bundle()
    if ca is not None and "SSL_CERT_FILE" not in os.environ:
        env["SSL_CERT_FILE"] = str(ca)
    return env


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def venv_python(root: Path) -> Path:
    return root / "bin" / "python"


def ensure_venv(plan: BuildPlan, progress: Any) -> Path:
    """The plan's virtual environment, created and filled if it is not cached yet."""
    root = cache_dir() / "venv" / plan.venv_name
    if (root / READY_MARKER).is_file():
        return root
    with _lock(root.parent / f".{root.name}.lock"):
        if (root / READY_MARKER).is_file():  # another process built it while we waited
            return root
        tmp = root.parent / f".{root.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log = root.parent / f"{root.name}.build.log"
        log.write_text("")
        uv = find_uv()
        try:
            progress.phase("creating venv" + (" (uv)" if uv else ""))
            if uv:
                _run_logged(
                    [uv, "venv", "--quiet", "--python", sys.executable, str(tmp)],
                    log,
                    CREATE_TIMEOUT_SECONDS,
                    "creating the sandbox venv",
                    _installer_env(),
                )
            else:
                _run_logged(
                    [sys.executable, "-m", "venv", str(tmp)],
                    log,
                    CREATE_TIMEOUT_SECONDS,
                    "creating the sandbox venv",
                )
            wheel = str(plan.wheel) if plan.wheel is not None else plan.package
            reqs = plan.requirements(wheel)
            if plan.source_dir is not None and (plan.source_dir / "requirements.txt").is_file():
                reqs += [
                    "-r",
                    str(plan.source_dir / "requirements.txt"),
                ]  # SBX-8: an hf repo's own pins
            progress.phase(f"installing {len(reqs)} packages")
            py = str(venv_python(tmp))
            if uv:
                argv = [
                    uv,
                    "pip",
                    "install",
                    "--quiet",
                    "--compile-bytecode",
                    "--python",
                    py,
                    *reqs,
                ]
                _run_logged(
                    argv,
                    log,
                    INSTALL_TIMEOUT_SECONDS,
                    "installing the sandbox packages",
                    _installer_env(),
                )
            else:
                argv = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *reqs]
                _run_logged(argv, log, INSTALL_TIMEOUT_SECONDS, "installing the sandbox packages")
            if plan.source_dir is not None:
                shutil.copytree(plan.source_dir, tmp / "source")
            (tmp / READY_MARKER).write_text(
                json.dumps(plan.identity("venv"), indent=2, sort_keys=True)
            )
            shutil.rmtree(root, ignore_errors=True)  # a half-built leftover without the marker
            tmp.rename(root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return root


@dataclass(eq=False)
class ServerProcess:
    """A child env server: its address, its log; :meth:`stop` terminates it by pid and cleans up."""

    backend: ClassVar[str] = "venv"

    proc: subprocess.Popen[bytes]
    rundir: Path
    log: Path
    address: str
    label: str
    keeper: subprocess.Popen[bytes] | None = None
    id: str | None = field(default=None, init=False)
    token: str | None = field(
        default=None, init=False
    )  # the endpoint's token (start_server sets it)
    stopped: bool = field(default=False, init=False)

    def describe(self) -> str:
        return f"venv env server (pid {self.proc.pid}, {self.label})"

    def logs_tail(self, lines: int = 50) -> str:
        """The last ``lines`` lines the server printed (reads at most a few tens of KiB)."""
        return _tail_file(self.log, lines, previous=self.log.with_name(self.log.name + ".1"))

    def alive(self) -> bool | None:
        return self.proc.poll() is None

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def stop(self) -> None:
        """SIGTERM (graceful), then SIGKILL after 5 s; the child's own process group goes with it."""
        if self.stopped:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5.0)
        keeper = self.keeper
        if keeper is not None and keeper.poll() is None:
            try:
                keeper.wait(timeout=5.0)  # it ends at the pipe's end of file
            except subprocess.TimeoutExpired:  # a grandchild outside the group holds the pipe
                keeper.kill()
                keeper.wait(timeout=5.0)
        shutil.rmtree(self.rundir, ignore_errors=True)
        self.stopped = True


def start_server(
    root: Path,
    bootstrap: dict[str, Any],
    *,
    env: Mapping[str, str],
    connect_timeout_seconds: float,
    progress: Any,
    label: str,
    token: str | None = None,
) -> ServerProcess:
    """Spawn the bootstrap in the venv on a fresh unix socket; return once it answers a ping.

    ``token``: the endpoint's token, handed to the child as ``$RLMESH_TOKEN`` (its
    environment, never its command line); the sandbox's clients send it.
    """
    deadline = time.monotonic() + connect_timeout_seconds
    rundir = Path(tempfile.mkdtemp(prefix="rlmsbx-"))
    sock, ready, log = rundir / "env.sock", rundir / "ready", rundir / "server.log"
    child_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")
    }
    child_env.update(env)
    child_env.update(
        RLMESH_BOOTSTRAP_JSON=json.dumps(bootstrap),
        RLMESH_ADDRESS=f"unix://{sock}",
        RLMESH_READY_FILE=str(ready),
        RLMESH_SANDBOX_OWNER_PID=str(os.getpid()),
        PYTHONUNBUFFERED="1",
    )
    child_env.pop(TOKEN_ENV, None)  # the parent's own token is not the sandbox's
    if token:
        child_env[TOKEN_ENV] = token
    cap = log_cap()
    progress.phase("make() running")
    read_end, write_end = os.pipe()
    try:
        try:
            proc = subprocess.Popen(
                [str(venv_python(root)), "-m", "rlmesh.sandbox._bootstrap"],
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=subprocess.STDOUT,
                env=child_env,
                cwd=str(rundir),
                start_new_session=True,
            )
        except OSError as exc:
            shutil.rmtree(rundir, ignore_errors=True)
            raise SandboxStartError(
                f"could not start the sandbox interpreter {venv_python(root)}: {exc}"
            ) from None
        os.close(write_end)
        write_end = -1
        try:
            keeper = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    _KEEPER,
                    str(log),
                    str(cap),
                    str(os.getpid()),
                    str(proc.pid),
                    str(rundir),
                    str(WATCHDOG_GRACE_SECONDS),
                    str(OWNER_POLL_SECONDS),
                ],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            ServerProcess(proc, rundir, log, f"unix://{sock}", label).stop()
            raise SandboxStartError(
                f"could not start the sandbox log keeper ({sys.executable}): {exc}"
            ) from None
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    server = ServerProcess(proc, rundir, log, f"unix://{sock}", label, keeper)
    server.token = token
    try:
        while not ready.exists():  # the server binds only after make() returns
            if proc.poll() is not None:
                raise SandboxStartError(
                    f"{server.describe()} exited (code {proc.returncode}) before becoming ready; "
                    f"recent logs:\n{server.logs_tail()}"
                )
            if time.monotonic() >= deadline:
                raise SandboxStartError(
                    f"{server.describe()} did not become ready within {connect_timeout_seconds:g}s; "
                    f"recent logs:\n{server.logs_tail()}"
                )
            time.sleep(0.02)
        wait_ready(server, deadline, connect_timeout_seconds)
    except BaseException:
        server.stop()
        raise
    return server
