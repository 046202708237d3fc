"""The ``processes`` backend: one local process per worker, standard library only.

Why not ``concurrent.futures.ProcessPoolExecutor``: a pool whose worker is killed turns
*every* pending future into ``BrokenProcessPool`` and must be rebuilt, so it cannot say
which episode was lost, and its workers cannot keep a built env between tasks. Here each
worker is a ``multiprocessing.Process`` with its own duplex pipe, holding one episode at
a time: the driver waits on all pipes and process sentinels at once
(``multiprocessing.connection.wait``), so a death is seen at once and blamed on exactly the
episode that worker held.

Start method: ``forkserver`` where available (Linux, macOS), preloading rlmesh, so a
worker starts in milliseconds without inheriting the driver's threads or sockets;
``spawn`` elsewhere. The fork server (and multiprocessing's resource tracker) this run (or
:class:`~rlmesh.eval.WorkerPool`) started are stopped when the run ends (the pool is closed).

A worker starts without a job: the driver sends each run's job, the worker builds that
run's env and model (closing the previous run's), runs episodes, and on ``release``
closes them again and waits for the next job (a pool's worker lives across runs).

Worker life: it ignores SIGINT (Ctrl-C in a terminal reaches the whole process group;
the driver decides), turns SIGTERM into ``SystemExit`` so its env and model are closed,
and exits when the driver's end of its pipe closes: after ``kill -9`` of the driver it
finishes (and journals) the episode it is running, then exits.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ._job import WorkerHost, worker_info
from ._journal import JournalSpec

__all__ = ["ProcessBackend", "describe_exit"]

#: Seconds a finishing worker gets to close its env and exit before SIGTERM, then SIGKILL.
STOP_GRACE_SECONDS = 5.0
#: Poll period while waiting for workers to release their run.
POLL = 0.2


def describe_exit(code: int | None) -> str:
    """``-9`` -> ``"killed by signal 9 (SIGKILL)"``; ``3`` -> ``"exited with code 3"``."""
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "?"
        return f"killed by signal {-code} ({name})"
    return f"exited with code {code}"


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _send(conn: Any, message: Any) -> bool:
    try:
        conn.send(message)
    except (OSError, EOFError):
        return False
    return True


def process_main(conn: Any, slot: int, label: str) -> None:
    """A worker process: say hello, then serve messages until told to stop.

    Messages: ``("job", job_bytes, slot, label, journal)`` (set up for a run: the previous
    run's env and model are closed first), ``(index, seed, trial)`` (run one episode),
    ``("release",)`` (close the run's env and model, stay alive), ``None`` (exit).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    host = WorkerHost()
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
            elif message[0] == "release":
                reply = host.release()
            else:
                reply = host.run(*message)
            if not _send(conn, reply):
                return
    finally:
        host.release()
        try:
            conn.close()
        except Exception:
            pass


#: Heavy modules the fork server imports once when the driver has them (workers fork from it).
PRELOAD_IF_LOADED = ("numpy", "gymnasium", "torch", "jax")


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        # "__main__": the driver's script is imported once, in the fork server, rather than
        # in every worker (multiprocessing's own convention for forkserver preloads).
        preload = ["__main__", "rlmesh", "rlmesh.eval._procpool"]
        preload += [m for m in PRELOAD_IF_LOADED if m in sys.modules]
        ctx.set_forkserver_preload(preload)
        return ctx
    return multiprocessing.get_context("spawn")  # pragma: no cover - Windows


def _helpers() -> list[Any]:
    """The fork server and the resource tracker it starts (multiprocessing's helper processes)."""
    out: list[Any] = []
    try:
        from multiprocessing import forkserver, resource_tracker
    except ImportError:  # pragma: no cover - Windows
        return out
    out.append(forkserver._forkserver)
    out.append(resource_tracker._resource_tracker)
    return out


def _running(helper: Any) -> bool:
    return (
        getattr(helper, "_forkserver_pid", None) is not None
        or getattr(helper, "_pid", None) is not None
    )


def _stop_helpers(helpers: list[Any]) -> None:
    """Stop the helper processes this run started (private API, guarded: best effort)."""
    for helper in helpers:
        stop = getattr(helper, "_stop", None)
        if callable(stop):
            try:
                stop()
            except Exception:
                pass


@dataclass
class _Proc:
    process: Any
    conn: Any
    label: str
    dead: bool = False
    info: dict[str, Any] | None = None  # its hello: host, pid


class ProcessBackend:
    """Driver side of the processes backend (events are tuples; see ``_distributed``).

    ``spawn`` starts a worker process (it holds no job yet); ``set_job`` names the run's
    job and ``assign`` sends it to a slot's worker, which answers ``ready`` or
    ``setup_failed``; ``release`` makes workers drop their run; ``close`` stops them all.
    A one-off run does spawn, assign, run, close; a :class:`~rlmesh.eval.WorkerPool` keeps
    one backend and does set_job, assign, run, release per run.
    """

    name = "processes"

    def __init__(self) -> None:
        self.job_bytes: bytes | None = None
        self.journal: Any = None
        self.ctx = _context()
        self.procs: dict[int, _Proc] = {}
        self._dying: list[_Proc] = []
        # multiprocessing keeps its fork server and resource tracker for the life of the
        # interpreter; the ones this backend started are stopped with it (nothing left running).
        self._owned_helpers = [h for h in _helpers() if not _running(h)]

    def set_job(self, job_bytes: bytes, journal_path: str | None) -> None:
        self.job_bytes = job_bytes
        self.journal = JournalSpec(journal_path) if journal_path is not None else None

    def spawn(self, slot: int, label: str) -> None:
        """Start a worker process in ``slot`` (replacing a dead one)."""
        self._reap()
        parent, child = self.ctx.Pipe(duplex=True)
        process = self.ctx.Process(
            target=process_main,
            args=(child, slot, label),
            name=f"rlmesh-worker-{label}",
            daemon=False,  # a worker may start processes of its own (sandboxes, a video encoder)
        )
        process.start()
        child.close()
        self.procs[slot] = _Proc(process, parent, label)

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

    def submit(self, slot: int, task: tuple[int, int | None, int]) -> bool:
        proc = self.procs.get(slot)
        return proc is not None and not proc.dead and _send(proc.conn, task)

    def alive(self, slots: Iterable[int] | None = None) -> int:
        """Live workers (of ``slots`` only, when given)."""
        wanted = set(self.procs) if slots is None else set(slots)
        return sum(1 for slot, p in self.procs.items() if not p.dead and slot in wanted)

    def poll(self, timeout: float) -> list[tuple[Any, ...]]:
        """Wait up to ``timeout`` seconds; return ``(kind, slot, ...)`` events."""
        live = {slot: p for slot, p in self.procs.items() if not p.dead}
        if not live:
            time.sleep(min(timeout, 0.05))
            return []
        handles: dict[Any, tuple[int, str]] = {}
        for slot, p in live.items():
            handles[p.conn] = (slot, "conn")
            handles[p.process.sentinel] = (slot, "exit")
        ready = multiprocessing.connection.wait(list(handles), timeout)
        events: list[tuple[Any, ...]] = []
        exited: set[int] = set()
        for handle in ready:
            slot, what = handles[handle]
            if what == "exit":
                exited.add(slot)
                continue
            p = live[slot]
            try:
                while p.conn.poll(0):
                    kind, *rest = p.conn.recv()
                    if kind == "hello":
                        p.info = rest[0]
                        continue
                    events.append((kind, slot, *rest))
            except (EOFError, OSError):
                exited.add(slot)
        return self._finish(events, exited, live)

    def _finish(
        self, events: list[tuple[Any, ...]], exited: set[int], live: dict[int, _Proc]
    ) -> list[tuple[Any, ...]]:
        for slot in sorted(exited):
            p = live[slot]
            p.process.join(1.0)
            p.dead = True
            try:
                p.conn.close()
            except Exception:
                pass
            events.append(
                (
                    "lost",
                    slot,
                    f"worker {p.label} (pid {p.process.pid}) {describe_exit(p.process.exitcode)}",
                )
            )
        return events

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
        waiting = {s for s in slots if self.submit_message(s, ("release",))}
        deadline = time.monotonic() + grace
        try:
            while waiting and time.monotonic() < deadline:
                for event in self.poll(min(POLL, max(0.0, deadline - time.monotonic()))):
                    if event[0] in ("released", "lost"):
                        waiting.discard(event[1])
        finally:
            for slot in waiting:
                self.kill(slot)

    def submit_message(self, slot: int, message: Any) -> bool:
        proc = self.procs.get(slot)
        return proc is not None and not proc.dead and _send(proc.conn, message)

    def kill(self, slot: int) -> None:
        """Stop one worker now (it is lost or no longer needed)."""
        p = self.procs.get(slot)
        if p is None or p.dead:
            return
        p.dead = True
        if p.process.is_alive():
            p.process.terminate()  # SIGTERM: it closes what it built and exits; close() reaps it
        try:
            p.conn.close()
        except Exception:
            pass
        self._dying.append(p)

    def _reap(self) -> None:
        self._dying = [p for p in self._dying if p.process.is_alive()]

    def close(self, *, force: bool) -> None:
        """Stop every worker: politely (finish, close envs) unless ``force``; none is left running."""
        procs = [p for p in self.procs.values() if not p.dead]
        for p in procs:
            p.dead = True
            if not force:
                _send(p.conn, None)
        _stop_processes(procs + self._dying, grace=STOP_GRACE_SECONDS if not force else 0.0)
        self._dying = []
        for p in self.procs.values():
            try:
                p.conn.close()
            except Exception:
                pass
        _stop_helpers(self._owned_helpers)


def _stop_processes(procs: list[_Proc], *, grace: float) -> None:
    """Join within ``grace``; then SIGTERM (the worker closes its env) and, after 3 s, SIGKILL."""
    deadline = time.monotonic() + grace
    for p in procs:
        p.process.join(max(0.0, deadline - time.monotonic()))
    rest = [p for p in procs if p.process.is_alive()]
    for p in rest:
        p.process.terminate()
    deadline = time.monotonic() + 3.0
    for p in rest:
        p.process.join(max(0.0, deadline - time.monotonic()))
    for p in rest:
        if p.process.is_alive():
            p.process.kill()
            p.process.join(5.0)
