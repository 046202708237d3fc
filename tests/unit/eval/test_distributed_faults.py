"""The distributed driver and a processes worker under faults, without starting a worker.

- A worker whose driver is gone ends within a bounded time: :func:`watch_driver` (the
  thread every processes worker runs) gives the main thread until the running episode's
  deadline, at most ``grace`` seconds, then ends the process.
- An episode past ``episode_timeout_seconds``: the driver stops its worker (what the worker
  reported before it stopped is kept) and retries the episode or records it as timed out.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from scripted_driver import ScriptedBackend, result, scripted_driver

from rlmesh.eval.distributed.driver import _Driver
from rlmesh.eval.distributed.job import Outcome
from rlmesh.eval.distributed.journal import Journal
from rlmesh.eval.distributed.processes import EXIT_ORPHANED, Watch, watch_driver

# -- a worker whose driver is gone ---------------------------------------------------------------


def watched(watch: Watch, grace: float) -> tuple[socket.socket, threading.Thread, list[int]]:
    driver_end, worker_end = socket.socketpair()
    ended: list[int] = []
    thread = threading.Thread(
        target=watch_driver,
        args=(worker_end.fileno(), watch),
        kwargs={"grace": grace, "end": ended.append},
    )
    thread.start()
    thread.worker_end = worker_end  # type: ignore[attr-defined]  # kept open until the test ends
    return driver_end, thread, ended


def test_a_worker_stuck_in_an_episode_ends_at_its_deadline_once_the_driver_is_gone() -> None:
    watch = Watch(started=time.monotonic(), timeout=0.2)  # an episode running, due now
    driver_end, thread, ended = watched(watch, grace=3600.0)
    driver_end.close()  # the driver was killed
    thread.join(30)
    assert not thread.is_alive() and ended == [EXIT_ORPHANED]


def test_without_a_deadline_the_orphan_gets_the_grace_then_ends() -> None:
    watch = Watch(started=time.monotonic(), timeout=None)
    driver_end, thread, ended = watched(watch, grace=0.2)
    driver_end.close()
    thread.join(30)
    assert not thread.is_alive() and ended == [EXIT_ORPHANED]


def test_a_worker_that_finishes_in_time_is_left_to_exit_by_itself() -> None:
    watch = Watch(started=time.monotonic(), timeout=3600.0)
    driver_end, thread, ended = watched(watch, grace=3600.0)
    driver_end.close()
    watch.done.set()  # the main thread finished its episode and exited
    thread.join(30)
    assert not thread.is_alive() and ended == []


def test_the_watch_waits_while_the_driver_lives(tmp_path: Path) -> None:
    watch = Watch()
    driver_end, thread, ended = watched(watch, grace=0.0)
    driver_end.sendall(b"an episode")  # traffic is not a hang-up
    thread.join(0.3)
    assert thread.is_alive() and ended == []
    driver_end.close()
    thread.join(30)
    assert ended == [EXIT_ORPHANED]


# -- the driver ---------------------------------------------------------------------------------


def driver(episodes: int, workers: int, **cfg: Any) -> tuple[_Driver, ScriptedBackend]:
    return scripted_driver(episodes, workers, **cfg)


def test_an_episode_past_its_deadline_is_stopped_and_retried() -> None:
    d, backend = driver(6, 2, episode_timeout_seconds=5.0)
    d._dispatch()
    assert backend.submitted == {0: [0, 2], 1: [1, 3]}
    d.running_since[0] -= 10.0  # episode 0 has run for 10 s
    d._check_deadlines()
    assert backend.stopped == [0] and backend.spawned == [0]
    assert [(r.index, r.worker) for r in d.retries] == [(0, "w0")]
    assert (
        "episode 0 (seed 100) ran past episode_timeout_seconds=5 on worker w0 (pid 40): stopped"
        in (d.retries[0].reason)
    )
    assert [t[0] for t in d.pending][:2] == [0, 2]  # the retry first, then what was queued
    assert 1 in d.running_since and 0 not in d.running_since  # worker 1 runs on, untouched


def test_an_episode_past_its_deadline_can_be_recorded_as_timed_out() -> None:
    d, backend = driver(4, 1, episode_timeout_seconds=5.0, on_episode_timeout="record")
    d._dispatch()
    d.running_since[0] -= 10.0
    d._check_deadlines()
    assert d.retries == [] and d.timed_out == {0}
    kept = d.results[0]
    assert (kept.index, kept.seed, kept.steps, kept.truncated, kept.success) == (
        0,
        100,
        0,
        True,
        False,
    )
    assert kept.duration_s >= 10.0
    assert [t[0] for t in d.pending][:1] == [1]


def test_what_a_stopped_worker_finished_before_it_stopped_is_kept() -> None:
    # the deadline passed just as the worker finished: its report comes back from stop()
    d, backend = driver(4, 1, episode_timeout_seconds=5.0)
    d._dispatch()
    d.running_since[0] -= 10.0
    backend.on_stop = [("done", 0, Outcome(result(0), ()))]
    d._check_deadlines()
    assert d.results[0] == result(0)
    assert d.retries == []  # episode 1, cut short by the stop, was not its fault
    assert [t[0] for t in d.pending][:1] == [1]
    assert d.inflight.get(0, deque()) == deque()


def test_an_episode_a_stopped_worker_journaled_but_never_reported_is_kept(tmp_path: Path) -> None:
    # stopped (SIGTERM) between journaling episode 0 and sending its report: as for a lost
    # worker, the journal's row is the episode's result; no retry, not timed out
    for on_timeout in ("retry", "record"):
        journal = Journal(tmp_path / f"{on_timeout}.journal")
        d, backend = driver(
            4, 1, journal=journal, episode_timeout_seconds=5.0, on_episode_timeout=on_timeout
        )
        d._dispatch()
        d.running_since[0] -= 10.0
        journal.record(result(0), "w0")
        d._check_deadlines()
        assert backend.stopped == [0]
        assert d.results[0] == result(0)
        assert d.retries == [] and d.timed_out == set()
        assert [t[0] for t in d.pending][:1] == [1]  # episode 1 never started: queued again
        journal.close()


def test_a_worker_process_gets_the_orphan_grace_its_watch_thread_keeps() -> None:
    # the fork server ends an orphan after the grace it was started with: the processes
    # backend must start its workers with its own ORPHAN_GRACE_SECONDS (docs/distributed.md
    # promises it), not the spawner's shorter default, or the watch thread's grace never applies
    from rlmesh.eval.distributed import processes

    asked: list[float] = []

    class Spawner:
        def launch(self, *args: Any, orphan_grace: float = -1.0, **kw: Any) -> Any:
            asked.append(orphan_grace)
            raise OSError("not started in this test")

    backend = processes.ProcessBackend.__new__(processes.ProcessBackend)
    backend.spawner = Spawner()  # type: ignore[assignment]
    backend.procs = {}
    backend._reap = lambda: None  # type: ignore[method-assign]
    try:
        backend.spawn(0, "w0")
    except OSError:
        pass
    assert asked == [processes.ORPHAN_GRACE_SECONDS]
