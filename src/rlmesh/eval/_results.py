"""Result types of an eval: ``EpisodeResult``, ``RunResult``, ``TelemetryRow`` (EVAL-24, EVAL-40..42, DELTA-42..44)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ._stats import Timings

__all__ = [
    "SUCCESS_KEYS",
    "EpisodeOutcome",
    "EpisodeResult",
    "EpisodeRetry",
    "RunResult",
    "TelemetryRow",
    "WorkerStats",
    "WorkerTiming",
    "aggregate_telemetry",
    "success_from_info",
]

#: Info keys read for the env-reported task outcome, in order (EVAL-40, DELTA-44).
SUCCESS_KEYS = ("is_success", "success", "task_success")


def success_from_info(info: Mapping[str, Any] | None) -> bool | None:
    """The env-reported task outcome of an info mapping, or ``None`` (EVAL-40).

    The first of ``"is_success"``, ``"success"``, ``"task_success"`` whose value is
    a bool/int/float (numpy scalars and 0-d arrays included) gives ``bool(value)``;
    other value types are skipped (DECISION-5: the native rule).

    >>> success_from_info({"success": 1.0}), success_from_info({"is_success": "yes"}), success_from_info({})
    (True, None, None)
    """
    if not info:
        return None
    for key in SUCCESS_KEYS:
        if key not in info:
            continue
        value = info[key]
        if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
            return bool(value)
        if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf":
            return bool(value)
    return None


@dataclass(frozen=True)
class EpisodeOutcome:
    """What every episode row starts with: the fields :class:`EpisodeResult` (a run's
    episode) and ``rlmesh.recorder.EpisodeRecord`` (a recorded one) share, in this order."""

    index: int
    seed: int | None
    steps: int
    reward: float
    terminated: bool
    truncated: bool
    success: bool | None = None
    duration_s: float = 0.0


@dataclass(frozen=True)
class EpisodeResult(EpisodeOutcome):
    """The outcome of one evaluation episode (seed 000, EVAL-41, DELTA-42).

    Attributes:
        index: 0-based episode index within the run.
        seed: The seed the episode was reset with, or ``None``.
        steps: Number of env steps taken.
        reward: Total reward accumulated over the episode.
        terminated: Whether the env reported a terminal state.
        truncated: Whether the episode was cut short (env truncation, a
            ``max_episode_steps`` / ``max_episode_seconds`` cap, or the built-in bound).
        success: The env-reported task outcome from the final step's info, or ``None``.
        duration_s: Wall time from reset-return to episode end, in seconds.
        predict_ms: Mean per-step wall time of ``predict``, in milliseconds.
        step_ms: Mean per-step wall time of the env step round trip, in milliseconds.
        trial: The trial ordinal (``trial_index_base + index`` on ``run``), or ``None``.
    """

    predict_ms: float | None = 0.0
    step_ms: float | None = 0.0
    trial: int | None = None

    @property
    def succeeded(self) -> bool:
        """``success`` when the env reported it, else ``terminated`` (EVAL-41)."""
        return self.success if self.success is not None else self.terminated

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready fields."""
        return asdict(self)


@dataclass(frozen=True)
class TelemetryRow:
    """One aggregated metric series of a run (DELTA-43).

    Attributes:
        op: What was measured (``"env.step"``, ``"model.predict"`` ...).
        component: ``"env"``, ``"model"`` or ``"runner"``.
        metric: The series name (``"rpc.total"`` ...).
        unit: ``"ms"``, ``"bytes"`` or ``"count"``.
        count: Number of samples.
        avg, p50, p95, p99: Mean and percentiles of the samples.
    """

    op: str
    component: str
    metric: str
    unit: str
    count: int
    avg: float
    p50: float
    p95: float
    p99: float


def aggregate_telemetry(
    series: Iterable[tuple[tuple[str, str, str, str], Sequence[float] | Timings]],
    scale: float = 1.0,
) -> tuple[TelemetryRow, ...]:
    """Fold samples into rows (``Timings`` times ``scale``); series with no samples produce no row."""
    rows = []
    for (op, component, metric, unit), samples in series:
        if isinstance(samples, Timings):
            if samples.count:
                rows.append(TelemetryRow(op, component, metric, unit, *samples.summary(scale)))
            continue
        if not samples:
            continue
        arr = np.asarray(samples, dtype=np.float64)
        p50, p95, p99 = np.percentile(arr, [50, 95, 99])
        rows.append(
            TelemetryRow(
                op,
                component,
                metric,
                unit,
                int(arr.size),
                float(arr.mean()),
                float(p50),
                float(p95),
                float(p99),
            )
        )
    return tuple(rows)


@dataclass(frozen=True, repr=False)
class RunResult:
    """The result of an eval: its episodes, plus telemetry and adapter advisories (EVAL-42, DELTA-43).

    >>> r = RunResult((EpisodeResult(0, 7, 10, 10.0, True, False, success=True),))
    >>> r
    RunResult(episodes=1, mean_reward=10.000, total_steps=10)
    >>> r.success_rate
    1.0
    """

    episodes: tuple[EpisodeResult, ...] = ()
    telemetry: tuple[TelemetryRow, ...] = ()
    advisories: tuple[Any, ...] = ()
    _warned: list[bool] = field(
        default_factory=lambda: [False], init=False, compare=False, repr=False
    )
    #: Distributed runs (``workers=``): what each worker did (``rlmesh.eval.WorkerTiming``), empty otherwise.
    workers: tuple[WorkerTiming, ...] = field(default=(), compare=False)
    #: Distributed runs: episodes re-run after their worker was lost (``rlmesh.eval.EpisodeRetry``).
    retries: tuple[EpisodeRetry, ...] = field(default=(), compare=False)
    #: Distributed runs: indices of episodes stopped at ``episode_timeout_seconds`` and kept as
    #: timed out (``Workers(on_episode_timeout="record")``), in episode order.
    timed_out: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "episodes", tuple(self.episodes))
        object.__setattr__(self, "telemetry", tuple(self.telemetry))
        object.__setattr__(self, "advisories", tuple(self.advisories))
        object.__setattr__(self, "workers", tuple(self.workers))
        object.__setattr__(self, "retries", tuple(self.retries))
        object.__setattr__(self, "timed_out", tuple(self.timed_out))

    @property
    def num_episodes(self) -> int:
        """Number of episodes in this result."""
        return len(self.episodes)

    @property
    def total_steps(self) -> int:
        """Total env steps across all episodes."""
        return sum(e.steps for e in self.episodes)

    @property
    def mean_reward(self) -> float:
        """Mean total reward per episode (0.0 when empty)."""
        if not self.episodes:
            return 0.0
        return math.fsum(e.reward for e in self.episodes) / len(self.episodes)

    @property
    def success_rate(self) -> float:
        """Fraction of episodes that succeeded (0.0 when empty).

        Prefers the env-reported outcome (``EpisodeResult.success``); an episode
        without one counts ``terminated`` instead. When no episode reported an
        outcome at all a ``UserWarning`` says so, once per result (seed 000, EVAL-42).
        """
        if not self.episodes:
            return 0.0
        if all(e.success is None for e in self.episodes) and not self._warned[0]:
            self._warned[0] = True
            warnings.warn(
                "no episode reported a task-outcome (info['is_success'] / ['success'] / "
                "['task_success']); success_rate falls back to `terminated`, which miscounts "
                "envs whose success is the time limit -- report success via info",
                UserWarning,
                stacklevel=2,
            )
        return sum(1 for e in self.episodes if e.succeeded) / len(self.episodes)

    @property
    def reported_success_rate(self) -> float | None:
        """The release's strict rate: ``None`` when empty or any episode reported no outcome (DELTA-44)."""
        if not self.episodes or any(e.success is None for e in self.episodes):
            return None
        return sum(1 for e in self.episodes if e.success) / len(self.episodes)

    def format_telemetry(self) -> str:
        """An aligned text table of the telemetry rows (DELTA-43)."""
        if not self.telemetry:
            return "(no telemetry: populated by Model.run's native loop)"
        header = ["op", "metric", "unit", "count", "avg", "p50", "p95", "p99"]
        body = [
            [
                r.op,
                r.metric,
                r.unit,
                str(r.count),
                f"{r.avg:.2f}",
                f"{r.p50:.2f}",
                f"{r.p95:.2f}",
                f"{r.p99:.2f}",
            ]
            for r in self.telemetry
        ]
        widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

        def line(cells: list[str]) -> str:
            return "  ".join(
                c.ljust(w) if i < 3 else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()

        return "\n".join(line(r) for r in [header, *body])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: aggregates, every episode, telemetry rows and advisories."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rate = self.success_rate
        return {
            "num_episodes": self.num_episodes,
            "total_steps": self.total_steps,
            "mean_reward": self.mean_reward,
            "success_rate": rate,
            "reported_success_rate": self.reported_success_rate,
            "episodes": [e.to_dict() for e in self.episodes],
            "telemetry": [asdict(r) for r in self.telemetry],
            "advisories": [str(a) for a in self.advisories],
            **self._distributed_dict(),
        }

    def _distributed_dict(self) -> dict[str, Any]:
        """``workers``, ``retries`` (and ``timed_out``, when any) of a distributed run (no keys
        for a single-process one)."""
        if not self.workers and not self.retries and not self.timed_out:
            return {}
        out: dict[str, Any] = {
            "workers": [asdict(w) for w in self.workers],
            "retries": [asdict(r) for r in self.retries],
        }
        if self.timed_out:
            out["timed_out"] = list(self.timed_out)
        return out

    def __repr__(self) -> str:
        return (
            f"RunResult(episodes={self.num_episodes}, mean_reward={self.mean_reward:.3f}, "
            f"total_steps={self.total_steps})"
        )


# -- what a distributed run adds (``workers=``) -------------------------------------------------


@dataclass(frozen=True)
class WorkerTiming:
    """What one worker did in a distributed run (``RunResult.workers``).

    Attributes:
        worker: The worker's label (``"w0"``, ``"w1"`` ...; a replacement keeps its slot's
            label with ``.1``, ``.2`` ... appended).
        host: The host name it ran on.
        pid: Its process id on that host.
        node: The Ray node id (``""`` for the processes backend).
        episodes: Episodes it finished.
        env_ms: Total wall time in env steps, in milliseconds.
        model_ms: Total wall time in model predictions, in milliseconds.
        busy_s: Total wall time of its episodes, in seconds.
    """

    worker: str
    host: str
    pid: int
    node: str = ""
    episodes: int = 0
    env_ms: float = 0.0
    model_ms: float = 0.0
    busy_s: float = 0.0


@dataclass(frozen=True)
class EpisodeRetry:
    """One episode that was run again because its worker was lost (``RunResult.retries``).

    Attributes:
        index: The episode index.
        seed: Its seed.
        worker: The worker that was lost while running it.
        reason: Why (e.g. ``"worker w1 (pid 4242) died: killed by signal 9 (SIGKILL)"``).
    """

    index: int
    seed: int | None
    worker: str
    reason: str


@dataclass
class WorkerStats:
    """Running totals of one worker on the driver (frozen into a :class:`WorkerTiming`)."""

    worker: str
    host: str = ""
    pid: int = 0
    node: str = ""
    episodes: int = 0
    env_ms: float = 0.0
    model_ms: float = 0.0
    busy_s: float = 0.0

    def freeze(self) -> WorkerTiming:
        return WorkerTiming(
            self.worker,
            self.host,
            self.pid,
            self.node,
            self.episodes,
            self.env_ms,
            self.model_ms,
            self.busy_s,
        )
