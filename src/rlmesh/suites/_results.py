"""A suite run's results: one :class:`TaskResult` per task, gathered in a :class:`SuiteResult`."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..eval import RunResult

__all__ = ["SuiteResult", "TaskResult", "wilson_interval"]

_Z95 = 1.959963984540054


def wilson_interval(successes: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95 % by default); ``(0, 1)`` for ``n == 0``.

    >>> [round(x, 3) for x in wilson_interval(9, 10)]
    [0.596, 0.982]
    """
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class TaskResult:
    """One task's run: the :class:`rlmesh.RunResult` and what a suite table shows of it.

    Attributes:
        task: The task name (``"push-v3"``).
        result: The task's ``RunResult`` (every episode, timings, workers).
        seconds: Wall time of the task's run.
    """

    task: str
    result: RunResult
    seconds: float

    @property
    def episodes(self) -> int:
        return self.result.num_episodes

    @property
    def successes(self) -> int:
        """Episodes whose env reported success (``info["success"]`` at the last step)."""
        return sum(1 for e in self.result.episodes if e.success)

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def success_interval(self) -> tuple[float, float]:
        """The 95 % Wilson interval of :attr:`success_rate`."""
        return wilson_interval(self.successes, self.episodes)

    @property
    def mean_return(self) -> float:
        return self.result.mean_reward

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.success_interval
        return {
            "task": self.task,
            "episodes": self.episodes,
            "successes": self.successes,
            "success_rate": self.success_rate,
            "success_ci95": [lo, hi],
            "mean_return": self.mean_return,
            "seconds": self.seconds,
            "result": self.result.to_dict(),
        }


@dataclass(frozen=True)
class SuiteResult(Mapping[str, TaskResult]):
    """Per-task results of :func:`rlmesh.suites.run`, a read-only mapping ``task -> TaskResult``.

    Attributes:
        suite: What ran (``"metaworld:MT10"``).
        model: A label of the model.
        tasks: The :class:`TaskResult` s in run order.
        seconds: Wall time of the whole suite.
        workers: Worker processes used (``None``: this process).
        sandboxed: Whether the envs ran in a sandbox.
    """

    suite: str
    model: str
    tasks: tuple[TaskResult, ...]
    seconds: float
    workers: int | None = None
    sandboxed: bool = False

    def __getitem__(self, task: str) -> TaskResult:
        for t in self.tasks:
            if t.task == task:
                return t
        raise KeyError(task)

    def __iter__(self) -> Iterator[str]:
        return (t.task for t in self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    @property
    def episodes(self) -> int:
        return sum(t.episodes for t in self.tasks)

    @property
    def success_rate(self) -> float:
        """The mean of the per-task success rates (each task counts the same)."""
        return sum(t.success_rate for t in self.tasks) / len(self.tasks) if self.tasks else 0.0

    @property
    def mean_return(self) -> float:
        return sum(t.mean_return for t in self.tasks) / len(self.tasks) if self.tasks else 0.0

    @property
    def episodes_per_hour(self) -> float:
        return self.episodes / self.seconds * 3600.0 if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields: the overall figures and each task's (episodes included)."""
        return {
            "suite": self.suite,
            "model": self.model,
            "episodes": self.episodes,
            "success_rate": self.success_rate,
            "mean_return": self.mean_return,
            "seconds": self.seconds,
            "episodes_per_hour": self.episodes_per_hour,
            "workers": self.workers,
            "sandboxed": self.sandboxed,
            "tasks": {t.task: t.to_dict() for t in self.tasks},
        }

    def __repr__(self) -> str:
        return (
            f"SuiteResult({self.suite!r}, {len(self.tasks)} tasks, {self.episodes} episodes, "
            f"success {self.success_rate:.1%})"
        )
