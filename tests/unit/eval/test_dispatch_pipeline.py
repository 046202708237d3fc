"""The distributed driver keeps each worker busy: one episode running, one queued (issue 27).

A scripted backend stands in for the worker processes / Ray actors, so the dispatch rules
are checked exactly: how many episodes each worker holds, what a lost worker gives back
and what counts as retried.
"""

from __future__ import annotations

from scripted_driver import ScriptedBackend, result, scripted_driver

from rlmesh.eval.distributed.driver import PIPELINE_DEPTH, _Driver
from rlmesh.eval.distributed.job import Outcome


def driver(episodes: int, workers: int) -> tuple[_Driver, ScriptedBackend]:
    return scripted_driver(episodes, workers)


def done(d: _Driver, slot: int, index: int) -> None:
    d._handle(("done", slot, Outcome(result(index), ())))


def test_each_worker_gets_one_episode_running_and_one_queued() -> None:
    assert PIPELINE_DEPTH == 2
    d, backend = driver(10, 2)
    d._dispatch()
    assert backend.submitted == {0: [0, 2], 1: [1, 3]}
    done(d, 0, 0)
    d._dispatch()
    assert backend.submitted[0] == [0, 2, 4]  # refilled to two at once


def test_the_tail_is_not_queued_behind_a_busy_worker() -> None:
    d, backend = driver(3, 2)
    d._dispatch()
    assert backend.submitted == {0: [0], 1: [1]}  # 1 left for 2 workers: it waits for an idle one
    done(d, 1, 1)
    d._dispatch()
    assert backend.submitted == {0: [0], 1: [1, 2]}


def test_a_lost_worker_gives_back_its_queue_and_only_the_running_episode_is_a_retry() -> None:
    d, backend = driver(8, 2)
    d._dispatch()
    assert backend.submitted == {0: [0, 2], 1: [1, 3]}
    d.spawns_left = 0
    d._handle(("lost", 0, "worker w0 lost: killed"))
    assert [r.index for r in d.retries] == [0]  # episode 2 never started: not a retry
    assert [t[0] for t in d.pending][:2] == [0, 2]  # both come back first, in order
    d._dispatch()
    assert backend.submitted[1] == [1, 3]  # worker 1 is full; the rest wait
    done(d, 1, 1)
    done(d, 1, 3)
    d._dispatch()
    assert backend.submitted[1] == [1, 3, 0, 2]


def test_reports_of_a_worker_may_arrive_in_any_order_within_a_poll() -> None:
    d, backend = driver(6, 1)
    d._dispatch()
    assert backend.submitted == {0: [0, 1]}
    done(d, 0, 1)
    done(d, 0, 0)
    assert sorted(d.results) == [0, 1]
    assert not any(d.inflight.values())
