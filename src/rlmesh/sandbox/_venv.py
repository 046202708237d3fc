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
from pathlib import Path
from typing import Any

from ._docker import wait_ready
from ._errors import SandboxBuildError, SandboxStartError
from ._plan import BuildPlan, host_ca_bundle

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
        raise SandboxBuildError("RLMESH_SANDBOX_INSTALLER=uv but uv is not installed (pip install uv)")
    return found


def _tail_file(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "<no log>"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "<no output>"


def _run_logged(argv: list[str], log: Path, timeout: float, what: str, env: Mapping[str, str] | None = None) -> None:
    with open(log, "a") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        try:
            proc = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                env=None if env is None else {**os.environ, **env},
            )
        except subprocess.TimeoutExpired:
            raise SandboxBuildError(f"{what} did not finish within {timeout:g}s; last output:\n{_tail_file(log, 20)}") from None
        except OSError as exc:
            raise SandboxBuildError(f"{what} could not run {argv[0]!r}: {exc}") from None
    if proc.returncode != 0:
        raise SandboxBuildError(f"{what} failed (exit {proc.returncode}); last output:\n{_tail_file(log, 20)}")


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
                _run_logged([uv, "venv", "--quiet", "--python", sys.executable, str(tmp)], log, CREATE_TIMEOUT_SECONDS, "creating the sandbox venv", _installer_env())
            else:
                _run_logged([sys.executable, "-m", "venv", str(tmp)], log, CREATE_TIMEOUT_SECONDS, "creating the sandbox venv")
            wheel = str(plan.wheel) if plan.wheel is not None else plan.package
            reqs = plan.requirements(wheel)
            if plan.source_dir is not None and (plan.source_dir / "requirements.txt").is_file():
                reqs += ["-r", str(plan.source_dir / "requirements.txt")]  # SBX-8: an hf repo's own pins
            progress.phase(f"installing {len(reqs)} packages")
            py = str(venv_python(tmp))
            if uv:
                argv = [uv, "pip", "install", "--quiet", "--compile-bytecode", "--python", py, *reqs]
                _run_logged(argv, log, INSTALL_TIMEOUT_SECONDS, "installing the sandbox packages", _installer_env())
            else:
                argv = [py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *reqs]
                _run_logged(argv, log, INSTALL_TIMEOUT_SECONDS, "installing the sandbox packages")
            if plan.source_dir is not None:
                shutil.copytree(plan.source_dir, tmp / "source")
            (tmp / READY_MARKER).write_text(json.dumps(plan.identity("venv"), indent=2, sort_keys=True))
            shutil.rmtree(root, ignore_errors=True)  # a half-built leftover without the marker
            tmp.rename(root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return root


class ServerProcess:
    """A child env server: its address, its log; :meth:`stop` terminates it by pid and cleans up."""

    backend = "venv"

    def __init__(self, proc: subprocess.Popen[bytes], rundir: Path, log: Path, address: str, label: str) -> None:
        self.proc = proc
        self.rundir = rundir
        self.log = log
        self.address = address
        self.label = label
        self.id: str | None = None
        self.stopped = False

    def describe(self) -> str:
        return f"venv env server (pid {self.proc.pid}, {self.label})"

    def logs_tail(self, lines: int = 50) -> str:
        return _tail_file(self.log, lines)

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
) -> ServerProcess:
    """Spawn the bootstrap in the venv on a fresh unix socket; return once it answers a ping."""
    deadline = time.monotonic() + connect_timeout_seconds
    rundir = Path(tempfile.mkdtemp(prefix="rlmsbx-"))
    sock, ready, log = rundir / "env.sock", rundir / "ready", rundir / "server.log"
    child_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    child_env.update(env)
    child_env.update(
        RLMESH_BOOTSTRAP_JSON=json.dumps(bootstrap),
        RLMESH_ADDRESS=f"unix://{sock}",
        RLMESH_READY_FILE=str(ready),
        RLMESH_SANDBOX_OWNER_PID=str(os.getpid()),
        PYTHONUNBUFFERED="1",
    )
    progress.phase("make() running")
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(
                [str(venv_python(root)), "-m", "rlmesh.sandbox._bootstrap"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=child_env,
                cwd=str(rundir),
                start_new_session=True,
            )
        except OSError as exc:
            shutil.rmtree(rundir, ignore_errors=True)
            raise SandboxStartError(f"could not start the sandbox interpreter {venv_python(root)}: {exc}") from None
    server = ServerProcess(proc, rundir, log, f"unix://{sock}", label)
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
