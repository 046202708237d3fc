"""``rlmesh.Workers`` and ``rlmesh.WorkerPool``: where the episodes of a distributed run go.

``workers=`` on ``rlmesh.run`` / ``Model.run`` / ``RemoteModel.run`` / ``SandboxModel.run``
takes ``None`` (one process, the single drive loop, unchanged), an int ``N``, a
:class:`Workers` (workers started for the run and stopped after it) or a warm
:class:`WorkerPool` from :meth:`Workers.start` (reused by many runs). The result of a
distributed run is an ordinary :class:`~rlmesh.RunResult` whose extra fields say which
worker ran what (``WorkerTiming``) and which episodes had to be run again
(``EpisodeRetry``).
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..._argcheck import positive_seconds
from ..._spawn.process import guard_at_exit, usable_cpus
from ..._spawn.ray import cluster_cpus
from .backend import WorkerBackend
from .processes import ProcessBackend
from .ray_actors import RayBackend

__all__ = [
    "BACKENDS",
    "ON_EPISODE_TIMEOUT",
    "check_episode_timeout",
    "STARTUP_TIMEOUT_SECONDS",
    "WorkerPool",
    "Workers",
    "default_workers",
    "make_backend",
    "normalize_workers",
]

#: The backends a distributed run can use.
BACKENDS = ("processes", "ray")
#: How long a worker may take to build its env and model (or to start) before the run gives up on it.
STARTUP_TIMEOUT_SECONDS = 600.0
#: ``Workers(on_episode_timeout=...)`` values.
ON_EPISODE_TIMEOUT = ("retry", "record")


def check_episode_timeout(value: Any, where: str) -> float | None:
    """``None``, or a positive finite number of seconds as a float.

    Raises:
        TypeError / ValueError: anything else (``where`` names the keyword).
    """
    return positive_seconds(
        where,
        value,
        kind="a number of seconds",
        positive="a positive number of seconds, got {value!r}",
    )


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
            died (killed, out of memory, node lost) or was stopped at its deadline. An
            episode whose *env raises* is not retried: it ends the run as it would in one
            process.
        progress: Show one live progress line on stderr (``None``: when stderr is a terminal).
        episode_timeout_seconds: A wall-clock deadline per episode, enforced by the driver:
            the worker of an episode still running after this many seconds is stopped
            (``None``: no deadline). ``rlmesh.run(episode_timeout_seconds=...)`` sets it too.
        on_episode_timeout: What becomes of an episode stopped at its deadline:
            ``"retry"`` (run again on a fresh worker, counted in ``max_retries`` and
            ``RunResult.retries``) or ``"record"`` (kept as a truncated, unsuccessful
            episode, listed in ``RunResult.timed_out``; not run again).

    Raises:
        ValueError: ``n < 1``, an unknown backend, ``max_retries < 0``, Ray-only options
            with ``backend="processes"``, a deadline that is not a positive number of
            seconds, or an ``on_episode_timeout`` other than ``"retry"``/``"record"``.
    """

    n: int | None = None
    backend: str | None = None
    address: str | None = None
    resources: Mapping[str, float] | None = None
    max_retries: int = 2
    progress: bool | None = None
    episode_timeout_seconds: float | None = None
    on_episode_timeout: str = "retry"

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
        check_episode_timeout(self.episode_timeout_seconds, "Workers(episode_timeout_seconds=...)")
        if self.on_episode_timeout not in ON_EPISODE_TIMEOUT:
            raise ValueError(
                f"Workers(on_episode_timeout={self.on_episode_timeout!r}): expected 'retry' (run the "
                "episode again on a fresh worker) or 'record' (keep it as timed out)"
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
        return WorkerPool(self)

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
    :class:`WorkerPool` as is.

    Raises:
        TypeError: anything else.
        ValueError: a pool that was closed.
    """
    if workers is None or isinstance(workers, Workers):
        return workers
    if isinstance(workers, WorkerPool):
        if workers.closed:
            raise ValueError(
                f"workers={workers!r}: this pool is closed; start a new one with rlmesh.Workers(...).start()"
            )
        return workers
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise TypeError(
            f"workers= takes None, an int or rlmesh.Workers(...) (or a pool from rlmesh.Workers(...).start()), "
            f"got {type(workers).__name__}"
        )
    return Workers(n=workers)


def default_workers(cfg: Workers) -> int:
    """``Workers.n``, or one worker per CPU of this machine (of the Ray cluster, on Ray)."""
    if cfg.n is not None:
        return cfg.n
    return cluster_cpus() if cfg.resolved_backend() == "ray" else usable_cpus()


def make_backend(cfg: Workers, expected: int = 1) -> WorkerBackend:
    """The backend ``cfg`` names (Ray is started or connected to here when it names Ray)."""
    if cfg.resolved_backend() == "ray":
        return RayBackend(cfg, expected=expected)
    return ProcessBackend()


def _close_backend(backend: WorkerBackend) -> None:
    """A pool's finalizer (``close()``, garbage collection, interpreter exit): stop every worker."""
    try:
        backend.close(force=False)
    except Exception:
        pass


class WorkerPool:
    """Warm workers reused by many runs: ``pool = rlmesh.Workers(n=8, backend="ray").start()``.

    Pass it as ``workers=pool`` to ``rlmesh.run`` / ``Model.run`` / ``RemoteModel.run`` /
    ``SandboxModel.run`` as often as you like: the worker processes (or Ray actors) are
    started once, here, and each run only ships its job to them. Between runs the
    workers hold no env and no model: each run's workers build the run's env and model
    when it starts and close them when it ends.

    - A worker lost during a run is replaced (as without a pool, within ``max_retries``);
      a worker that died between runs is replaced when the next run starts.
    - An episode that raises ends the run as without a pool; the workers still running
      episodes the run no longer needs are stopped (their state is unknown) and
      replaced at the next run, the others are reused.
    - Ctrl-C (or any error not reported by a worker) stops every worker of that run, as
      without a pool; the pool stays usable and starts fresh workers for the next run.
    - One run at a time: a second run on a pool that is running one is refused.

    Use it as a context manager, or call :meth:`close`; a pool still open when the
    interpreter exits (or that is garbage-collected) is closed then, so no worker
    outlives the driver. A pool on Ray shuts down the local Ray it started on close; a
    Ray this process had already initialized (or ``address=``) is left running.

    Attributes:
        workers: The :class:`Workers` configuration it was started with.
        n: Its number of workers (``Workers.n``, or the resolved default).
        backend: ``"processes"`` or ``"ray"``.
        startup_seconds: Wall time :meth:`Workers.start` took: starting Ray if needed,
            then every worker process or actor until it answered.
    """

    def __init__(self, workers: Workers) -> None:
        if not isinstance(workers, Workers):
            raise TypeError(f"WorkerPool takes a rlmesh.Workers(...), got {type(workers).__name__}")
        self.workers = workers
        self.backend = workers.resolved_backend()
        self._lock = threading.Lock()
        t0 = time.perf_counter()
        self._backend: WorkerBackend
        if self.backend == "ray":
            ray_backend = RayBackend(
                workers
            )  # starts (and then owns) a local Ray if none is running
            n = default_workers(workers)
            ray_backend.expected = n
            self._backend = ray_backend
        else:
            self._backend = ProcessBackend()
            n = default_workers(workers)
        self.n: int = n
        self._finalizer = weakref.finalize(self, _close_backend, self._backend)
        guard_at_exit(self, WorkerPool.close)  # no worker outlives the interpreter
        try:
            for slot in range(n):
                self._backend.spawn(slot, f"w{slot}")
            self._backend.wait_started(list(range(n)), STARTUP_TIMEOUT_SECONDS)
        except BaseException:
            self.close()
            raise
        self.startup_seconds: float = time.perf_counter() - t0

    @property
    def closed(self) -> bool:
        """``True`` once :meth:`close` ran."""
        return not self._finalizer.alive

    def close(self) -> None:
        """Stop every worker (and a local Ray the pool started). Idempotent."""
        self._finalizer()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<WorkerPool {self.backend} n={self.n} {state}>"

    def lease(self) -> WorkerBackend:
        """The backend, for one run (the driver gives it back with :meth:`unlease`)."""
        if self.closed:
            raise ValueError(
                f"workers={self!r}: this pool is closed; start a new one with rlmesh.Workers(...).start()"
            )
        if not self._lock.acquire(blocking=False):
            raise RuntimeError(
                f"workers={self!r} is running another run: a pool runs one run at a time"
            )
        return self._backend

    def unlease(self) -> None:
        self._lock.release()
