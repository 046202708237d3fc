"""The ``processes`` backend: one local process per worker, standard library only.

Why not ``concurrent.futures.ProcessPoolExecutor``: a pool whose worker is killed turns
*every* pending future into ``BrokenProcessPool`` and must be rebuilt, so it cannot say
which episode was lost, and its workers cannot keep a built env between tasks. Here each
worker is a process with its own duplex pipe, holding one episode at a time: the driver
waits on all pipes and process sentinels at once (``multiprocessing.connection.wait``),
so a death is seen at once and blamed on exactly the episode that worker held.

Workers start the rlmesh way (:class:`rlmesh._spawn.process.Spawner`): forked from a clean
fork server that has rlmesh (and numpy, Gymnasium, torch or jax when the driver has them)
imported, never re-running the driver's ``__main__`` -- a script needs no
``if __name__ == "__main__":`` guard. The job travels by pipe as ``cloudpickle`` bytes, so
what the script defines (its policy, its env class) travels by value.

A worker starts without a job: the driver sends each run's job, the worker builds that
run's env and model (closing the previous run's), runs episodes, and on ``release``
closes them again and waits for the next job (a pool's worker lives across runs).

Worker life: it ignores SIGINT (Ctrl-C in a terminal reaches the whole process group;
the driver decides), turns SIGTERM into ``SystemExit`` so its env and model are closed,
and exits when the driver's end of its pipe closes. A thread watches that end
(:func:`watch_driver`): after ``kill -9`` of the driver the worker may finish (and
journal) the episode it is running, but only until that episode's deadline
(``episode_timeout_seconds``) or :data:`ORPHAN_GRACE_SECONDS`, whichever comes first;
then the process ends, however stuck its env is, and with it its hold on the journal's
lock, so a re-run of the run never waits longer than that.

The driver stops a worker whose episode is past its deadline with :meth:`ProcessBackend.stop`:
SIGTERM (a worker in Python code closes its env and exits), SIGKILL if it is still there
after :data:`STOP_SECONDS` (a step stuck in native code), then the pipe is read to its end,
so an episode the worker finished before it was stopped is kept.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..._spawn.process import Spawner, WorkerProcess, describe_exit, stop_processes
from .backend import Event, Task
from .host import WorkerHost, worker_info
from .journal import JournalSpec

__all__ = ["ProcessBackend", "Watch", "process_main", "watch_driver"]

#: Seconds a finishing worker gets to close its env and exit before SIGTERM, then SIGKILL.
STOP_GRACE_SECONDS = 5.0
#: Seconds a worker stopped by SIGTERM (its episode past its deadline, or no longer needed)
#: gets before SIGKILL: a step stuck in native code never sees SIGTERM.
STOP_SECONDS = 2.0
#: Seconds a worker whose driver is gone may take to finish the episode it runs (and close
#: its env) before it exits anyway; the episode's own deadline ends it sooner when set.
ORPHAN_GRACE_SECONDS = 30.0
#: The exit status of a worker that gave up its episode because its driver was gone.
EXIT_ORPHANED = 3
#: ``poll`` events saying the driver's end of the pipe is closed.
_HANGUP = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)
#: Poll period while waiting for workers to release their run.
POLL = 0.2
#: The worker body, started by name in each worker process.
ENTRY = "rlmesh.eval.distributed.processes:process_main"


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _send(conn: Any, message: Any) -> bool:
    try:
        conn.send(message)
    except (OSError, EOFError):
        return False
    return True


@dataclass
class Watch:
    """What the driver-watching thread knows of the worker's main thread."""

    #: ``time.monotonic()`` when the running episode started (``None``: none is running).
    started: float | None = None
    #: The run's ``episode_timeout_seconds``.
    timeout: float | None = None
    #: Set once the main thread is done (its env and model closed).
    done: threading.Event = field(default_factory=threading.Event)


def watch_driver(
    fd: int,
    watch: Watch,
    *,
    grace: float = ORPHAN_GRACE_SECONDS,
    end: Callable[[int], Any] = os._exit,
) -> None:
    """Wait until the driver's end of the pipe ``fd`` closes (a thread; no CPU while waiting),
    then give the main thread until the running episode's deadline, at most ``grace``
    seconds, to finish and exit; past that, ``end(EXIT_ORPHANED)`` ends the process, even with
    a step stuck in native code (the kernel then releases the journal's lock)."""
    poller = select.poll()
    poller.register(fd, _HANGUP)
    while not any(mask & _HANGUP for _, mask in poller.poll()):
        pass
    deadline = time.monotonic() + grace
    started, timeout = watch.started, watch.timeout
    if started is not None and timeout is not None:
        deadline = min(deadline, started + timeout)
    if not watch.done.wait(max(0.0, deadline - time.monotonic())):
        end(EXIT_ORPHANED)


def process_main(fds: list[int], slot: int, label: str) -> None:
    """A worker process: say hello, then serve messages until told to stop.

    ``fds`` holds its end of the pipe. Messages: ``("job", job_bytes, slot, label,
    journal)`` (set up for a run: the previous run's env and model are closed first),
    ``(index, seed, trial)`` (run one episode), ``("release",)`` (close the run's env
    and model, stay alive), ``None`` (exit).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    conn = multiprocessing.connection.Connection(fds[0])
    host = WorkerHost()
    watch = Watch()
    threading.Thread(
        target=watch_driver, args=(conn.fileno(), watch), name="rlmesh-driver-watch", daemon=True
    ).start()
    try:
        if not _send(conn, ("hello", worker_info())):
            return
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return  # the driver is gone
            if message is None:
                return
            if message[0] == "job":
                _, job_bytes, slot, label, journal = message
                reply = host.setup(
                    job_bytes, slot, label, journal.open if journal is not None else None
                )
                watch.timeout = host.episode_timeout_seconds
            elif message[0] == "release":
                reply = host.release()
            else:
                watch.started = time.monotonic()
                reply = host.run(*message)
                watch.started = None
            if not _send(conn, reply):
                return
    finally:
        host.release()
        try:
            conn.close()
        except Exception:
            pass
        watch.done.set()


@dataclass
class _Proc:
    process: WorkerProcess
    conn: Any
    label: str
    dead: bool = False
    info: dict[str, Any] | None = None  # its hello: host, pid
    stopped_at: float = 0.0  # when kill() sent SIGTERM


class ProcessBackend:
    """Driver side of the processes backend (a :class:`~.backend.WorkerBackend`).

    ``spawn`` starts a worker process (it holds no job yet); ``set_job`` names the run's
    job and ``assign`` sends it to a slot's worker, which answers ``ready`` or
    ``setup_failed``; ``release`` makes workers drop their run; ``close`` stops them all
    (and the fork server, when no one else uses it).
    """

    name = "processes"

    def __init__(self) -> None:
        self.job_bytes: bytes | None = None
        self.journal: Any = None
        self.spawner = Spawner(preload=("rlmesh.eval.distributed.processes",))
        self.procs: dict[int, _Proc] = {}
        self._dying: list[_Proc] = []

    def set_job(self, job_bytes: bytes, journal_path: str | None) -> None:
        self.job_bytes = job_bytes
        self.journal = JournalSpec(journal_path) if journal_path is not None else None

    def spawn(self, slot: int, label: str) -> None:
        """Start a worker process in ``slot`` (replacing a dead one)."""
        self._reap()
        parent, child = socket.socketpair()
        try:
            process = self.spawner.launch(  # the fork server's grace is the watch thread's
                ENTRY,
                (slot, label),
                pass_fds=[child.fileno()],
                name=f"rlmesh-worker-{label}",
                orphan_grace=ORPHAN_GRACE_SECONDS,
            ).wait()
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        conn = multiprocessing.connection.Connection(parent.detach())
        self.procs[slot] = _Proc(process, conn, label)

    def has_worker(self, slot: int) -> bool:
        """A live worker process sits in ``slot`` (a dead one found here is marked so)."""
        p = self.procs.get(slot)
        if p is None or p.dead:
            return False
        if not p.process.is_alive():
            self.kill(slot)
            return False
        return True

    def assign(self, slot: int, label: str) -> bool:
        """Send the run's job to the worker in ``slot`` (it answers ``ready`` or ``setup_failed``)."""
        proc = self.procs.get(slot)
        if proc is None or proc.dead:
            return False
        proc.label = label
        return _send(proc.conn, ("job", self.job_bytes, slot, label, self.journal))

    def submit(self, slot: int, task: Task) -> bool:
        return self._message(slot, task)

    def _message(self, slot: int, message: Any) -> bool:
        proc = self.procs.get(slot)
        return proc is not None and not proc.dead and _send(proc.conn, message)

    def alive(self, slots: Iterable[int] | None = None) -> int:
        """Live workers (of ``slots`` only, when given)."""
        wanted = set(self.procs) if slots is None else set(slots)
        return sum(1 for slot, p in self.procs.items() if not p.dead and slot in wanted)

    def poll(self, timeout: float) -> list[Event]:
        """Wait up to ``timeout`` seconds; return ``(kind, slot, ...)`` events."""
        live = {slot: p for slot, p in self.procs.items() if not p.dead}
        if not live:
            time.sleep(min(timeout, 0.05))
            return []
        handles: dict[Any, tuple[int, str]] = {}
        exited: set[int] = set()
        for slot, p in live.items():
            handles[p.conn] = (slot, "conn")
            if p.process.sentinel >= 0:
                handles[p.process.sentinel] = (slot, "exit")
            else:  # its end was already seen (and its sentinel closed)
                exited.add(slot)
        ready = multiprocessing.connection.wait(list(handles), 0.0 if exited else timeout)
        events: list[Event] = []
        for handle in ready:
            slot, what = handles[handle]
            if what == "exit" or not self._read(slot, live[slot], events):
                exited.add(slot)
        self._reap()
        for slot in sorted(exited):
            p = live[slot]
            p.process.join(1.0)
            p.dead = True
            try:
                p.conn.close()
            except Exception:
                pass
            how = describe_exit(p.process.exitcode)
            events.append(("lost", slot, f"worker {p.label} (pid {p.process.pid}) {how}"))
        return events

    @staticmethod
    def _read(slot: int, p: _Proc, events: list[Event]) -> bool:
        """Append what ``p`` sent and is waiting in its pipe; ``False`` once the pipe ended."""
        try:
            while p.conn.poll(0):
                kind, *rest = p.conn.recv()
                if kind == "hello":
                    p.info = rest[0]
                    continue
                events.append((kind, slot, *rest))
        except (EOFError, OSError):
            return False
        return True

    def wait_started(self, slots: list[int], timeout: float) -> None:
        """Block until every worker in ``slots`` said hello.

        Raises:
            TimeoutError: one did not within ``timeout`` seconds.
            RuntimeError: one died while starting.
        """
        deadline = time.monotonic() + timeout
        waiting = set(slots)
        while True:
            waiting = {s for s in waiting if self.procs[s].info is None}
            if not waiting:
                return
            for event in self.poll(min(0.2, max(0.0, deadline - time.monotonic()))):
                if event[0] == "lost":
                    raise RuntimeError(f"a pool worker could not start: {event[2]}")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(waiting)} pool worker(s) did not start within {timeout:.0f}s"
                )

    def release(self, slots: list[int], grace: float) -> None:
        """Have the workers in ``slots`` close their run's env and model; one that does not
        answer within ``grace`` seconds is stopped (a pool replaces it at its next run)."""
        waiting = {s for s in slots if self._message(s, ("release",))}
        deadline = time.monotonic() + grace
        try:
            while waiting and time.monotonic() < deadline:
                for event in self.poll(min(POLL, max(0.0, deadline - time.monotonic()))):
                    if event[0] in ("released", "lost"):
                        waiting.discard(event[1])
        finally:
            for slot in waiting:
                self.kill(slot)

    def kill(self, slot: int) -> None:
        """Stop one worker now (it is lost or no longer needed)."""
        p = self.procs.get(slot)
        if p is None or p.dead:
            return
        p.dead = True
        p.process.terminate()  # SIGTERM: it closes what it built and exits (SIGKILL in _reap)
        p.stopped_at = time.monotonic()
        try:
            p.conn.close()
        except Exception:
            pass
        self._dying.append(p)

    def stop(self, slot: int) -> list[Event]:
        """Stop ``slot``'s worker now (SIGTERM; SIGKILL after :data:`STOP_SECONDS` if it is stuck)
        and return what it had sent before it stopped: the episodes it finished are kept."""
        p = self.procs.get(slot)
        if p is None or p.dead:
            return []
        p.dead = True
        stop_processes([p.process], grace=0.0, term_grace=STOP_SECONDS)
        events: list[Event] = []
        self._read(slot, p, events)
        try:
            p.conn.close()
        except Exception:
            pass
        if p.process.is_alive():  # pragma: no cover - SIGKILL not delivered yet
            p.stopped_at = time.monotonic()
            self._dying.append(p)
        return events

    def _reap(self) -> None:
        """Forget the stopped workers that ended; SIGKILL those SIGTERM did not end in time."""
        now = time.monotonic()
        for p in self._dying:
            if now - p.stopped_at > STOP_SECONDS and p.process.is_alive():
                p.process.kill()
        self._dying = [p for p in self._dying if p.process.is_alive()]

    def close(self, *, force: bool) -> None:
        """Stop every worker: politely (finish, close envs) unless ``force``; none is left running."""
        procs = [p for p in self.procs.values() if not p.dead]
        for p in procs:
            p.dead = True
            if not force:
                _send(p.conn, None)
        grace = STOP_GRACE_SECONDS if not force else 0.0
        stop_processes([p.process for p in procs + self._dying], grace=grace)
        self._dying = []
        for p in self.procs.values():
            try:
                p.conn.close()
            except Exception:
                pass
        self.spawner.close()
