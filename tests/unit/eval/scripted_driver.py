"""A distributed driver over a scripted backend, for the driver's unit tests (no worker starts).

The backend records what the driver asks of it; ``stop`` returns the events queued in
``on_stop`` (what a worker reported before it was stopped).
"""

from __future__ import annotations

from typing import Any

from rlmesh.eval._options import SessionOptions
from rlmesh.eval._results import EpisodeResult
from rlmesh.eval.distributed.driver import _Driver
from rlmesh.eval.distributed.job import Group, Job, ModelRecipe
from rlmesh.eval.distributed.journal import Journal
from rlmesh.eval.distributed.workers import Workers


class ScriptedBackend:
    def __init__(self) -> None:
        self.submitted: dict[int, list[int]] = {}
        self.stopped: list[int] = []
        self.spawned: list[int] = []
        self.on_stop: list[tuple[Any, ...]] = []

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

    def kill(self, slot: int) -> None:
        pass

    def stop(self, slot: int) -> list[tuple[Any, ...]]:
        self.stopped.append(slot)
        events, self.on_stop = self.on_stop, []
        return events


def result(index: int) -> EpisodeResult:
    """Episode ``index`` as its worker reports it (seed ``100 + index``, trial ``index``)."""
    return EpisodeResult(index, 100 + index, 5, 5.0, True, False, None, 0.01, 0.1, 0.1, index)


def job(group_of: list[int] | None = None) -> Job:
    """A job the scripted backend never unpickles; ``group_of``: a grouped run's episode groups."""
    plain = Job(
        envs=("unused",),
        model=ModelRecipe("random", None, "RANDOM_SAMPLE"),
        open_session=lambda *args: None,
        session=SessionOptions(),
        caps={},
    )
    if group_of is None:
        return plain
    groups = tuple(Group(("unused",), 0) for _ in range(max(group_of) + 1))
    return Job(
        **{**vars(plain), "groups": groups, "models": (plain.model,), "group_of": tuple(group_of)}
    )


def scripted_driver(
    episodes: int,
    workers: int,
    *,
    journal: Journal | None = None,
    group_of: list[int] | None = None,
    **cfg: Any,
) -> tuple[_Driver, ScriptedBackend]:
    """A driver of ``episodes`` (seed ``100 + i``) whose ``workers`` are ready (pid ``40 + slot``);
    ``group_of``: each episode's group (a grouped run)."""
    plan = [(i, 100 + i, i) for i in range(episodes)]
    d = _Driver(
        cfg=Workers(n=workers, backend="processes", progress=False, **cfg),
        plan=plan,
        done={},
        n=workers,
        job=job(group_of),
        hooks=None,
        journal=journal,
        journal_path=None,
    )
    backend = ScriptedBackend()
    d.backend = backend
    for slot in range(workers):
        d.labels[slot] = f"w{slot}"
        d._on_ready(slot, {"host": "h", "pid": 40 + slot})
    return d, backend
