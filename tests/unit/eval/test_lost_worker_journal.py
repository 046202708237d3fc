"""A worker that finished an episode and died before it could report it loses nothing (issue 38).

A processes worker (and a Ray actor on the driver's host) journals each episode itself, the
moment it finishes, then reports it. A worker killed between the two had finished the
episode: the driver takes it from the journal instead of running it again, and the episode
queued behind it (which never started) goes back to the queue without counting as a retry.
A scripted backend stands in for the workers.
"""

from __future__ import annotations

from pathlib import Path

from scripted_driver import result, scripted_driver

from rlmesh.eval.distributed.journal import Journal


def test_an_episode_a_lost_worker_journaled_is_kept_not_run_again(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "run.journal")
    d, backend = scripted_driver(6, 1, journal=journal)
    d._dispatch()
    assert backend.submitted == {0: [0, 1]}
    journal.record(result(0), "w0")  # the worker finished episode 0 and journaled it ...
    d._handle(("lost", 0, "worker w0 (pid 40) killed by signal 9 (SIGKILL)"))  # ... then died
    assert d.results[0] == result(0)
    assert d.retries == []  # episode 1 never started: no retry either
    assert [t[0] for t in d.pending][:1] == [1] and backend.spawned == [0]
    journal.close()
