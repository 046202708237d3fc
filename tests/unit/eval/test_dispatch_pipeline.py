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


# -- a grouped run (a suite's tasks): task affinity ------------------------------------------------


def test_a_grouped_run_keeps_each_worker_on_its_group_then_gives_it_an_untouched_one() -> None:
    # three groups of four episodes: 0-3, 4-7, 8-11
    d, backend = scripted_driver(12, 2, group_of=[0] * 4 + [1] * 4 + [2] * 4)
    d._dispatch()
    assert backend.submitted == {0: [0, 1], 1: [4, 5]}  # each on its own group's env
    for index in (0, 1):
        done(d, 0, index)
        d._dispatch()
    assert backend.submitted[0] == [0, 1, 2, 3]  # still group 0 while it lasts
    for index in (2, 3):
        done(d, 0, index)
        d._dispatch()
    assert backend.submitted[0][4:] == [8, 9]  # then group 2, which no worker holds
    assert backend.submitted[1] == [4, 5]


def test_a_grouped_run_shares_the_last_group_once_every_other_is_done() -> None:
    d, backend = scripted_driver(10, 2, group_of=[0] * 2 + [1] * 8)
    d._dispatch()
    assert backend.submitted == {0: [0, 1], 1: [2, 3]}
    done(d, 0, 0)
    done(d, 0, 1)
    d._dispatch()
    # group 0 is done and no group is free: worker 0 joins group 1's tail
    assert backend.submitted[0][2:] == [4, 5]
    done(d, 1, 2)
    d._dispatch()
    assert backend.submitted[1] == [2, 3, 6]
