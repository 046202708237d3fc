"""A worker that finished an episode and died before it could report it loses nothing (issue 38).

A processes worker (and a Ray actor on the driver's host) journals each episode itself, the
moment it finishes, then reports it. A worker killed between the two had finished the
episode: the driver takes it from the journal instead of running it again, and the episode
queued behind it (which never started) goes back to the queue without counting as a retry.
A scripted backend stands in for the workers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlmesh.eval._results import EpisodeResult
from rlmesh.eval.distributed.driver import _Driver
from rlmesh.eval.distributed.journal import Journal
from rlmesh.eval.distributed.workers import Workers


class ScriptedBackend:
    def __init__(self) -> None:
        self.submitted: dict[int, list[int]] = {}
        self.spawned: list[int] = []

    def submit(self, slot: int, task: tuple[int, int | None, int]) -> bool:
        self.submitted.setdefault(slot, []).append(task[0])
        return True

    def alive(self, slots: Any = None) -> int:
        return len(self.submitted)

    def has_worker(self, slot: int) -> bool:
        return False

    def spawn(self, slot: int, label: str) -> None:
        self.spawned.append(slot)

    def assign(self, slot: int, label: str) -> bool:
        return True


def result(index: int) -> EpisodeResult:
    return EpisodeResult(index, 100 + index, 5, 5.0, True, False, None, 0.01, 0.1, 0.1, index)


def test_an_episode_a_lost_worker_journaled_is_kept_not_run_again(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "run.journal")
    plan = [(i, 100 + i, i) for i in range(6)]
    d = _Driver(
        cfg=Workers(n=1, backend="processes", progress=False),
        plan=plan,
        done={},
        n=1,
        job=None,  # type: ignore[arg-type]
        hooks=None,
        journal=journal,
        journal_path=None,
    )
    backend = ScriptedBackend()
    d.backend = backend
    d.labels[0] = "w0"
    d._on_ready(0, {"host": "h", "pid": 40})
    d._dispatch()
    assert backend.submitted == {0: [0, 1]}
    journal.record(result(0), "w0")  # the worker finished episode 0 and journaled it ...
    d._handle(("lost", 0, "worker w0 (pid 40) killed by signal 9 (SIGKILL)"))  # ... then died
    assert d.results[0] == result(0)
    assert d.retries == []  # episode 1 never started: no retry either
    assert [t[0] for t in d.pending][:1] == [1] and backend.spawned == [0]
    journal.close()
