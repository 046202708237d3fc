"""``rlmesh.Workers``: how a distributed run spreads its episodes, and what it reports back.

``workers=`` on ``rlmesh.run`` / ``Model.run`` / ``RemoteModel.run`` / ``SandboxModel.run``
takes ``None`` (one process, the single drive loop, unchanged), an int ``N``, a
:class:`Workers` (workers started for the run and stopped after it) or a warm
:class:`~rlmesh.eval.WorkerPool` from :meth:`Workers.start` (reused by many runs). The result of a distributed run is an ordinary
:class:`~rlmesh.RunResult` whose extra fields say which worker ran what
(:class:`WorkerTiming`) and which episodes had to be run again (:class:`EpisodeRetry`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import RLMeshException

if TYPE_CHECKING:
    from ._distributed import WorkerPool

__all__ = ["BACKENDS", "EpisodeRetry", "WorkerLost", "WorkerTiming", "Workers", "normalize_workers"]

#: The backends a distributed run can use.
BACKENDS = ("processes", "ray")

#: :class:`~rlmesh.eval.WorkerPool`, registered by the driver module (which imports this one).
_POOL_TYPE: Any = None


def register_pool_type(pool_type: type) -> None:
    """Called once by ``rlmesh.eval._distributed``: the class :meth:`Workers.start` returns."""
    global _POOL_TYPE
    _POOL_TYPE = pool_type


class WorkerLost(RLMeshException, ConnectionError):
    """Workers died and an episode could not be finished within ``max_retries`` re-runs.

    Attributes:
        index: The episode index that ran out of retries (``None``: every worker was lost).
        reasons: Why each attempt was lost (one line per attempt).
    """

    def __init__(
        self, message: str, *, index: int | None = None, reasons: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.index = index
        self.reasons = reasons

    def __reduce__(self) -> Any:
        return (_worker_lost, (str(self), self.index, self.reasons))


def _worker_lost(message: str, index: int | None, reasons: tuple[str, ...]) -> WorkerLost:
    return WorkerLost(message, index=index, reasons=reasons)


@dataclass(frozen=True)
class Workers:
    """Where the episodes of one run go: ``n`` workers on a backend.

    Args:
        n: Number of workers (``None``: one per CPU of the machine, or of the Ray
            cluster; with a list of env addresses, one per address).
        backend: ``"processes"`` (a pool of local processes, standard library only) or
            ``"ray"`` (Ray actors: an existing cluster, or a local Ray started for the
            run and stopped after it). ``None`` picks ``"ray"`` when ``address`` is given
            or Ray is already initialized in this process, else ``"processes"``.
        address: Ray only: ``"auto"`` or a cluster address to connect to; ``None``
            uses the Ray this process already initialized, or starts a local one.
        resources: Ray only: what each worker asks the scheduler for, e.g.
            ``{"CPU": 1, "GPU": 0.25}`` (other keys are custom resources). ``None``
            asks for an equal share of the cluster's CPUs, at most one each.
        max_retries: How many times an episode is re-run after the worker running it
            died (killed, out of memory, node lost). An episode whose *env raises* is
            not retried: it ends the run as it would in one process.
        progress: Show one live progress line on stderr (``None``: when stderr is a terminal).

    Raises:
        ValueError: ``n < 1``, an unknown backend, ``max_retries < 0``, or Ray-only
            options with ``backend="processes"``.
    """

    n: int | None = None
    backend: str | None = None
    address: str | None = None
    resources: Mapping[str, float] | None = None
    max_retries: int = 2
    progress: bool | None = None

    def __post_init__(self) -> None:
        n = self.n
        if n is not None and (isinstance(n, bool) or not isinstance(n, int)):
            raise TypeError(f"Workers(n=...) must be an int, got {type(n).__name__}")
        if n is not None and n < 1:
            raise ValueError(
                f"Workers(n={n}): need at least one worker (workers=None runs in this process)"
            )
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(
                f"Workers(backend={self.backend!r}): expected one of {', '.join(map(repr, BACKENDS))}"
            )
        if (
            isinstance(self.max_retries, bool)
            or not isinstance(self.max_retries, int)
            or self.max_retries < 0
        ):
            raise ValueError(f"Workers(max_retries={self.max_retries!r}) must be an int >= 0")
        if self.address is not None and not isinstance(self.address, str):
            raise TypeError(
                f"Workers(address=...) must be a str such as 'auto', got {type(self.address).__name__}"
            )
        if self.resources is not None:
            if not isinstance(self.resources, Mapping):
                raise TypeError(
                    f"Workers(resources=...) must be a mapping like {{'CPU': 1}}, got {type(self.resources).__name__}"
                )
            for key, value in self.resources.items():
                if (
                    not isinstance(key, str)
                    or isinstance(value, bool)
                    or not isinstance(value, (int, float))
                    or value < 0
                ):
                    raise ValueError(
                        f"Workers(resources=...): {key!r}: {value!r} must map a resource name to a number >= 0"
                    )
        if self.backend == "processes" and (self.address is not None or self.resources is not None):
            raise ValueError(
                "Workers(backend='processes') runs local processes: address= and resources= are Ray options "
                "(use backend='ray')"
            )

    def start(self) -> WorkerPool:
        """Start the workers now and keep them warm for many runs: a :class:`~rlmesh.eval.WorkerPool`.

        ``workers=pool`` then reuses them on every run instead of starting ``n`` new
        processes or actors each time (see docs/distributed.md, "A warm pool")::

            with rlmesh.Workers(n=8, backend="ray").start() as pool:
                for task in tasks:
                    results[task] = rlmesh.run(policy, task, seeds=range(50), workers=pool)

        Blocks until every worker is up (``pool.startup_seconds`` says how long that took).

        Raises:
            TimeoutError: a worker did not start in time (Ray: resources unavailable).
            RuntimeError: a worker died while starting.
        """
        if _POOL_TYPE is None:  # pragma: no cover - rlmesh.eval always imports the driver
            raise RuntimeError("rlmesh.eval._distributed is not loaded: import rlmesh first")
        pool: WorkerPool = _POOL_TYPE(self)
        return pool

    def resolved_backend(self) -> str:
        """The backend this run uses (``backend=None`` resolved as documented)."""
        if self.backend is not None:
            return self.backend
        if self.address is not None or self.resources is not None:
            return "ray"
        ray = sys.modules.get("ray")
        if ray is not None and getattr(ray, "is_initialized", lambda: False)():
            return "ray"
        return "processes"


def normalize_workers(workers: Any) -> Workers | WorkerPool | None:
    """``None`` -> ``None``; an int -> ``Workers(n=int)``; a :class:`Workers` or a started
    :class:`~rlmesh.eval.WorkerPool` as is.

    Raises:
        TypeError: anything else.
        ValueError: a pool that was closed.
    """
    if workers is None:
        return None
    if isinstance(workers, Workers):
        return workers
    if _POOL_TYPE is not None and isinstance(workers, _POOL_TYPE):
        if workers.closed:
            raise ValueError(
                f"workers={workers!r}: this pool is closed; start a new one with rlmesh.Workers(...).start()"
            )
        pool: WorkerPool = workers
        return pool
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise TypeError(
            f"workers= takes None, an int or rlmesh.Workers(...) (or a pool from rlmesh.Workers(...).start()), "
            f"got {type(workers).__name__}"
        )
    return Workers(n=workers)


def default_processes() -> int:
    """One worker per CPU this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


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
