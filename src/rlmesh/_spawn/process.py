"""Worker processes: one start policy, one exit description, one stop routine, one exit guard.

Theory of operation
-------------------
Every rlmesh worker process (a session worker of ``EnvServer(..., sessions=N)``, a
``processes`` worker of ``rlmesh.run(..., workers=N)``) is started by a :class:`Spawner`
and described by a :class:`WorkerProcess`. The start policy:

- **Never the user's** ``__main__``. ``multiprocessing``'s ``spawn`` and ``forkserver``
  re-import the parent's main module in each child, so a script that calls
  ``rlmesh.run(..., workers=2)`` at top level, without an ``if __name__ == "__main__":``
  guard, would run itself again in every worker. A worker here starts from a clean
  interpreter and is fed its job by pipe: the target is named as ``"module:function"``
  and its arguments travel as ``cloudpickle`` bytes (:mod:`rlmesh._spawn.pickling`),
  which carry what the script defines by value.
- **Forked from a fork server** (``RLMESH_WORKER_START=forkserver``, the default where
  ``os.fork`` exists): one clean interpreter per parent process
  (:mod:`rlmesh._spawn._forkserver`) that has imported rlmesh, numpy, Gymnasium and the
  heavy modules the parent asked for, and forks each worker on request, so a worker costs a
  ``fork()`` (milliseconds), not an interpreter start (about 350 ms, seconds with torch).
  The fork server has no threads, so forking it is safe where forking the parent is not.
  It is shared by every :class:`Spawner` of the process and stopped with the last one.
- **A fresh interpreter per worker** (``RLMESH_WORKER_START=fresh``): the same payload,
  read by a new ``python`` process; slower to start, shares nothing.

Each worker gets a *boot socket*; the parent sends the payload on it, and it is also the
worker's sentinel: it turns readable when the worker exits (with the exit status, from the
fork server). File descriptors the worker needs (its control channel, a shared-memory
board) are passed explicitly; the target is called as ``target(fds, *args)``.

Starting never has to block the owner: :meth:`Spawner.launch` sends the job's request and
returns a :class:`Launch` whose :meth:`~Launch.fileno` turns readable once the worker exists
(the fork server may still be starting, or importing torch); :meth:`Launch.finish` then
hands the worker its payload. :meth:`Launch.wait` is both in one blocking call.

Stopping (:func:`stop_processes`): the owner asks its workers to stop over their own
channel (each drains and closes its env), waits for a grace period, sends SIGTERM (each
closes what it built and exits), waits again, then SIGKILLs what is left. At interpreter
exit the owners registered with :func:`guard_at_exit` stop their workers first.

No worker outlives its owner by more than its *orphan grace* (``orphan_grace=``), even
when the owner is SIGKILLed and the worker is stuck in an env call: the fork server sees its
owner's end of the control socket close, gives each worker its grace to end by itself, then
SIGTERMs it and, :data:`ORPHAN_TERM_SECONDS` later, SIGKILLs it. A fresh-interpreter worker
watches its boot socket the same way (the owner holds the other end).
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .child import ORPHAN_TERM_SECONDS, read_exactly
from .host import usable_cpus as usable_cpus
from .pickling import dumps

__all__ = [
    "ORPHAN_GRACE_SECONDS",
    "START_ENV",
    "Launch",
    "Spawner",
    "WorkerProcess",
    "describe_exit",
    "guard_at_exit",
    "start_method",
    "stop_processes",
    "usable_cpus",
]

#: Environment variable choosing how workers start: ``forkserver`` or ``fresh``.
START_ENV = "RLMESH_WORKER_START"
START_METHODS = ("forkserver", "fresh")
#: Seconds a new worker (or the fork server) may take to report its pid.
START_TIMEOUT_SECONDS = 60.0
#: Seconds a stopping fork server may take to exit once its last worker ended.
SERVER_EXIT_SECONDS = 10.0
#: Modules worth importing once in the fork server, when installed.
PRELOAD = ("rlmesh", "numpy", "gymnasium")
#: Heavy modules the fork server imports when the parent has them loaded.
PRELOAD_IF_LOADED = ("torch", "jax")
#: Seconds a worker may run on after its owner is gone (it should notice and exit by itself).
ORPHAN_GRACE_SECONDS = 10.0

_BOOT_SERVER = (
    "import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
    "from rlmesh._spawn._forkserver import main; main(int(sys.argv[2]), json.loads(sys.argv[3]))"
)
_BOOT_FRESH = (
    "import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
    "from rlmesh._spawn.child import run_fresh; run_fresh(int(sys.argv[2]), *json.loads(sys.argv[3]))"
)


def describe_exit(code: int | None) -> str:
    """How a worker ended, for logs and retry reasons.

    Example:
        >>> describe_exit(-9), describe_exit(3), describe_exit(None)
        ('killed by signal 9 (SIGKILL)', 'exited with code 3', 'ended (its exit status is unknown)')
    """
    if code is None:
        return "ended (its exit status is unknown)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "?"
        return f"killed by signal {-code} ({name})"
    return f"exited with code {code}"


def start_method() -> str:
    """The start method in force: ``$RLMESH_WORKER_START``, else ``forkserver`` where it exists.

    Raises:
        ValueError: the variable names no method available here.
    """
    default = "forkserver" if hasattr(os, "fork") else "fresh"
    chosen = os.environ.get(START_ENV, "").strip() or default
    if chosen not in START_METHODS or (chosen == "forkserver" and not hasattr(os, "fork")):
        available = [m for m in START_METHODS if m != "forkserver" or hasattr(os, "fork")]
        raise ValueError(
            f"{START_ENV}={chosen!r} is not a start method here; use one of {available}"
        )
    return chosen


class WorkerProcess:
    """A started worker: its pid, a sentinel to wait on, its exit code once it ended.

    Not a child of this process when forked by the fork server (its exit status comes from
    there): use :meth:`poll` / :meth:`join` / :attr:`exitcode`, never ``os.waitpid``.
    """

    def __init__(
        self, pid: int, boot: socket.socket, name: str, popen: Any = None, pidfd: int = -1
    ) -> None:
        self.pid = pid
        self.name = name
        self._boot = boot
        self._popen = popen
        self._pidfd = pidfd  # signals go to this process, never to a later one with its pid
        self._code: int | None = None
        self._ended = False

    @property
    def sentinel(self) -> int:
        """A file descriptor that turns readable when the worker ends (``-1`` once it did)."""
        if self._popen is not None and self._pidfd >= 0:  # its children may hold the boot socket
            return self._pidfd
        return self._boot.fileno()

    def poll(self) -> int | None:
        """The exit code if the worker ended (see :func:`describe_exit`), else ``None``."""
        if not self._ended:
            self._check(0.0)
        return self._code

    @property
    def exitcode(self) -> int | None:
        return self.poll()

    def is_alive(self) -> bool:
        return not self._ended and self._check(0.0) is False

    def join(self, timeout: float | None = None) -> None:
        """Wait until the worker ended (at most ``timeout`` seconds)."""
        if not self._ended:
            self._check(timeout)

    def _check(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` for the end; ``True`` once the worker ended."""
        if self._ended:
            return True
        try:
            ready = select.select([self.sentinel], [], [], timeout)[0]
        except (OSError, ValueError):
            ready = [self.sentinel]
        if not ready:
            return False
        if self._popen is not None:  # a fresh interpreter: our child, its status is ours
            try:
                self._code = self._popen.wait(timeout=5.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - it closed its sentinel early
                return False
        else:
            data = b""
            try:
                self._boot.setblocking(True)
                self._boot.settimeout(1.0)
                while len(data) < 8:
                    chunk = self._boot.recv(8 - len(data))
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
            self._code = int.from_bytes(data, "little", signed=True) if len(data) == 8 else None
        self._ended = True
        self._boot.close()
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
        return True

    def _signal(self, signum: int) -> None:
        if self._check(0.0):
            return  # it ended: its pid may already name another process
        try:
            if self._popen is not None:
                self._popen.send_signal(signum)
            elif self._pidfd >= 0:
                signal.pidfd_send_signal(self._pidfd, signum)
            else:  # pragma: no cover - no pidfd here (not Linux)
                os.kill(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def terminate(self) -> None:
        """SIGTERM: a worker closes what it built and exits."""
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self._signal(signal.SIGKILL)

    def close(self) -> None:
        """Forget the sentinel (the worker is not stopped)."""
        if not self._ended:
            self._ended = True
            self._boot.close()
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1

    def __repr__(self) -> str:
        state = "alive" if not self._ended else describe_exit(self._code)
        return f"<WorkerProcess {self.name} pid={self.pid} {state}>"


def stop_processes(
    procs: Iterable[WorkerProcess], *, grace: float, term_grace: float = 3.0
) -> list[WorkerProcess]:
    """Wait ``grace`` seconds for workers already asked to stop; SIGTERM the rest, wait
    ``term_grace`` more, SIGKILL what is still running. Returns the workers that had to be
    signalled (``term_grace=0``: straight to SIGKILL after the grace)."""
    procs = list(procs)
    deadline = time.monotonic() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    rest = [p for p in procs if p.is_alive()]
    if term_grace > 0:
        for p in rest:
            p.terminate()
        deadline = time.monotonic() + term_grace
        for p in rest:
            p.join(max(0.0, deadline - time.monotonic()))
    for p in rest:
        if p.is_alive():
            p.kill()
            p.join(5.0)
    return rest


# -- the exit guard ------------------------------------------------------------------------------

_GUARDS: list[tuple[weakref.ref[Any], Callable[[Any], None]]] = []
_GUARDS_LOCK = threading.Lock()


def guard_at_exit(owner: object, stop: Callable[[Any], None]) -> None:
    """At interpreter exit, call ``stop(owner)`` if ``owner`` is still alive (once).

    Owners of workers (a sessions supervisor, a worker pool) register here, so no worker
    outlives the interpreter. Guards run newest first, before exit hooks registered
    earlier (Ray's ``shutdown`` among them).
    """
    with _GUARDS_LOCK:
        if any(ref() is owner for ref, _ in _GUARDS):
            return
        _GUARDS.append((weakref.ref(owner), stop))
        atexit.unregister(_run_guards)
        atexit.register(_run_guards)  # last registered, first run


def _run_guards() -> None:
    with _GUARDS_LOCK:
        guards = list(reversed(_GUARDS))
        _GUARDS.clear()
    for ref, stop in guards:
        owner = ref()
        if owner is not None:
            try:
                stop(owner)
            except Exception:
                pass


# -- starting ------------------------------------------------------------------------------------


class _ForkServer:
    """The shared fork server: a clean interpreter forking workers (see the module docstring)."""

    def __init__(self, preload: Sequence[str]) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.owner = os.getpid()
        self.users = 0
        self.lock = threading.Lock()
        self.preloaded = set(preload)
        self.max_grace = 0.0  # the longest orphan grace asked for (stop() waits past it)
        try:
            self.popen = _python(_BOOT_SERVER, child.fileno(), list(preload), pass_fds=[])
        finally:
            child.close()
        self.ctrl = parent

    def alive(self) -> bool:
        return os.getpid() == self.owner and self.popen.poll() is None

    def launch(
        self,
        payload: bytes,
        pass_fds: Sequence[int],
        preload: Sequence[str],
        name: str,
        orphan_grace: float,
    ) -> Launch:
        """Ask for a fork (never waits for it): the :class:`Launch` turns readable with the pid."""
        boot, boot_child = socket.socketpair()
        try:
            more = [m for m in preload if m not in self.preloaded]
            request = pickle.dumps(("fork", more, float(orphan_grace)))
            with self.lock:
                socket.send_fds(self.ctrl, [request], [boot_child.fileno(), *pass_fds])
                self.preloaded.update(more)
                self.max_grace = max(self.max_grace, float(orphan_grace))
        except OSError as exc:
            boot.close()
            raise OSError(
                f"the worker fork server is gone ({exc}); start the workers again"
            ) from exc
        finally:
            boot_child.close()
        boot.setblocking(False)
        return Launch(boot, payload, name)

    def stop(self) -> None:
        """Close the control socket; the server exits once its workers did (wait for it)."""
        try:
            self.ctrl.close()
        except OSError:
            pass
        if os.getpid() != self.owner:
            return
        try:  # its workers may take their orphan grace and the SIGTERM's before it can exit
            self.popen.wait(SERVER_EXIT_SECONDS + self.max_grace + ORPHAN_TERM_SECONDS)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5.0)


class Launch:
    """A worker being started (:meth:`Spawner.launch`): wait until :meth:`fileno` is readable
    (or :meth:`done`), then :meth:`finish`. Never blocks before that."""

    def __init__(self, boot: socket.socket | None, payload: bytes, name: str) -> None:
        self._boot = boot
        self._payload = payload
        self._name = name
        self._worker: WorkerProcess | None = None

    @classmethod
    def started(cls, worker: WorkerProcess) -> Launch:
        launch = cls(None, b"", worker.name)  # already done: finish() returns the worker
        launch._worker = worker
        return launch

    def fileno(self) -> int:
        """Readable once the fork server has forked the worker (or failed to)."""
        return -1 if self._boot is None else self._boot.fileno()

    def done(self) -> bool:
        """Whether :meth:`finish` would return (or raise) at once."""
        if self._boot is None:
            return True
        try:
            return bool(select.select([self._boot], [], [], 0.0)[0])
        except (OSError, ValueError):
            return True

    def wait(self) -> WorkerProcess:
        """Wait (at most ``START_TIMEOUT_SECONDS``) until the worker runs, then :meth:`finish`.

        Raises:
            OSError: the worker could not be started, or did not start in time.
        """
        if not self.done():
            try:
                select.select([self], [], [], START_TIMEOUT_SECONDS)
            except (OSError, ValueError):
                pass
        if not self.done():
            self.cancel()
            raise OSError(f"no worker started within {START_TIMEOUT_SECONDS:.0f}s")
        return self.finish()

    def finish(self) -> WorkerProcess:
        """The started worker (its payload sent); ``OSError`` if it could not be forked."""
        if self._worker is not None:
            return self._worker
        boot, self._boot = self._boot, None
        if boot is None:
            raise OSError("this launch was cancelled")
        try:
            boot.settimeout(START_TIMEOUT_SECONDS)  # readable: the pid is there (or EOF)
            try:
                raw = read_exactly(boot, 8)
            except EOFError:
                raise OSError(
                    "the worker fork server could not fork a worker (fork() failed, or it is gone)"
                ) from None
            pid = int.from_bytes(raw, "little", signed=True)
            pidfd = _pidfd(pid)  # race-free: the worker waits for its payload, it cannot have ended
            payload = self._payload
            boot.sendall(len(payload).to_bytes(8, "little") + payload)
        except BaseException:
            boot.close()
            raise
        boot.setblocking(False)
        self._worker = WorkerProcess(pid, boot, self._name, pidfd=pidfd)
        return self._worker

    def cancel(self) -> None:
        """Give up on a launch not finished: the forked worker reads no job and exits."""
        boot, self._boot = self._boot, None
        if boot is not None:
            boot.close()


def _pidfd(pid: int) -> int:
    """A file descriptor naming process ``pid`` (Linux >= 5.3), or ``-1``."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # pragma: no cover - not Linux, or an old kernel
        return -1


_SERVER: _ForkServer | None = None
_SERVER_LOCK = threading.Lock()


def _python(boot: str, fd: int, extra: list[Any], *, pass_fds: Sequence[int]) -> Any:
    """A clean interpreter (this one's ``-W``/``-X`` flags and ``sys.path``) running ``boot``
    with ``fd`` and ``extra`` as its arguments; ``fd`` and ``pass_fds`` are inherited."""
    flags: list[str] = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
    argv = [sys.executable, *flags, "-c", boot, json.dumps(sys.path), str(fd), json.dumps(extra)]
    return subprocess.Popen(argv, pass_fds=[fd, *pass_fds], stdin=subprocess.DEVNULL)


class Spawner:
    """Starts worker processes for one owner (a sessions supervisor, a worker backend).

    Args:
        preload: Modules worth importing once in the fork server (beyond :data:`PRELOAD`);
            ignored with ``fresh`` starts.
    """

    def __init__(self, preload: Sequence[str] = ()) -> None:
        self.method = start_method()
        self.preload = [*PRELOAD, *preload, *(m for m in PRELOAD_IF_LOADED if m in sys.modules)]
        self._server: _ForkServer | None = None
        self._closed = False

    def launch(
        self,
        target: str | Callable[..., Any],
        args: tuple[Any, ...] = (),
        *,
        pass_fds: Sequence[int] = (),
        name: str = "rlmesh-worker",
        what: str = "worker's arguments",
        orphan_grace: float = ORPHAN_GRACE_SECONDS,
    ) -> Launch:
        """Start a worker running ``target(fds, *args)``; :meth:`Launch.wait` waits until it runs.

        ``target`` is ``"module:function"`` (imported in the worker) or a callable (shipped
        with the arguments, by value when the caller's script defines it).
        ``orphan_grace``: seconds the worker may run on once this process is gone (then
        it is terminated, see the module docstring). Never blocks: wait for the
        :class:`Launch` to turn readable, then :meth:`Launch.finish`, or call
        :meth:`Launch.wait`. ``pass_fds`` may be closed once this returns.

        Raises:
            TypeError: ``args`` cannot be pickled (the message names what and the fix).
            OSError: the worker could not be started.
        """
        if self._closed:
            raise RuntimeError("this Spawner is closed")
        named = target if isinstance(target, str) else None
        shipped = args if named is not None else (target, *args)
        args_bytes = dumps(
            shipped, what, who="starting a worker", remedy="Pass something picklable instead."
        )
        here = (list(sys.path), os.getcwd(), dict(os.environ))
        payload = pickle.dumps((named, *here, args_bytes))
        if self.method == "fresh":
            return Launch.started(_start_fresh(payload, pass_fds, name, orphan_grace))
        return self._fork_server().launch(payload, pass_fds, self.preload, name, orphan_grace)

    def _fork_server(self) -> _ForkServer:
        global _SERVER
        if self._server is not None and self._server.alive():
            return self._server
        with _SERVER_LOCK:
            if _SERVER is None or not _SERVER.alive():
                _SERVER = _ForkServer(self.preload)
            server = _SERVER
            if self._server is not server:
                server.users += 1
                self._server = server
        return server

    def close(self) -> None:
        """Release the fork server (stopped when its last user closes). Idempotent."""
        global _SERVER
        if self._closed:
            return
        self._closed = True
        server, self._server = self._server, None
        if server is None:
            return
        with _SERVER_LOCK:
            server.users -= 1
            last = server.users <= 0
            if last and _SERVER is server:
                _SERVER = None
        if last:
            server.stop()


def _start_fresh(
    payload: bytes, pass_fds: Sequence[int], name: str, orphan_grace: float
) -> WorkerProcess:
    boot, boot_child = socket.socketpair()
    try:
        extra = [list(pass_fds), float(orphan_grace)]
        popen = _python(_BOOT_FRESH, boot_child.fileno(), extra, pass_fds=pass_fds)
    except BaseException:
        boot.close()
        raise
    finally:
        boot_child.close()
    try:
        boot.settimeout(START_TIMEOUT_SECONDS)
        boot.sendall(len(payload).to_bytes(8, "little") + payload)
    except OSError:
        pass  # it died before reading: its sentinel says so
    boot.setblocking(False)
    return WorkerProcess(popen.pid, boot, name, popen, pidfd=_pidfd(popen.pid))
