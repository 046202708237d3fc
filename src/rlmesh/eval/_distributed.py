"""The driver of a distributed run (``workers=``): shard, dispatch, retry, journal, merge.

Sharding is by episode: episode ``i`` is ``(i, seeds[i], trial_index_base + i)`` whichever
worker runs it, and every worker runs the single drive loop on it, so the episodes come
back exactly as one process would produce them; the driver sorts them by index. Workers
pull one episode at a time (the slow ones take fewer), which also keeps a lost worker's
damage to the one episode it held.

Outcomes, and what the driver does:

- *done*: recorded (journal, per-worker timing), hooks told (``on_episode_start`` and
  ``on_episode_end`` back to back, in completion order), the progress line updated;
- *the episode raised* (env or model error): not retried; as in one process, the run
  ends with that exception once every lower-numbered episode has finished, and the
  result passed to ``on_run_end`` holds exactly the episodes before it;
- *the worker was lost* (killed, crashed, node removed): its episode is queued again
  (at most ``max_retries`` times, each noted in ``RunResult.retries``) and the slot
  gets a fresh worker;
- *a worker could not set up* (env or model failed to build): the run fails with that error;
- ``KeyboardInterrupt`` (Ctrl-C): every worker is stopped, ``on_run_end`` fires, it propagates.

With ``workers=Workers(...)`` the run starts its workers and stops them at the end. With a
:class:`WorkerPool` (``Workers(...).start()``) the workers outlive the run: the run hands
them its job, and at the end they release the run's env and model (workers still
running an episode the run no longer needs, or all of the run's after Ctrl-C, are stopped
instead and replaced when the next run starts).
"""

from __future__ import annotations

import atexit
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .. import adapters
from ._budget import episode_budget, validate_caps
from ._busy import for_workers
from ._dhooks import driver_side_for
from ._hooks import RunHooks
from ._job import EnvRecipe, Job, Outcome, describe_target, dumps, env_recipe, model_recipe
from ._journal import Journal
from ._procpool import ProcessBackend
from ._progress import RunProgress
from ._raypool import RayBackend, import_ray
from ._results import EpisodeResult, RunResult, TelemetryRow
from ._workers import (
    EpisodeRetry,
    WorkerLost,
    Workers,
    WorkerStats,
    default_processes,
    register_pool_type,
)

__all__ = ["WorkerPool", "run_distributed"]

#: How long a worker may take to build its env and model before the run gives up on it.
STARTUP_TIMEOUT_SECONDS = 600.0
#: Poll period of the driver loop (it also bounds how late Ctrl-C is noticed).
POLL_SECONDS = 0.2
#: Episodes handed to one worker at a time: the one it runs and the next, queued.
PIPELINE_DEPTH = 2
#: Seconds a pool's workers get to close a finished run's env and model before they are stopped.
STOP_GRACE_SECONDS = 5.0


def _refuse_step_hooks(hooks: Any) -> None:
    on_step = getattr(type(hooks), "on_step", None)
    if on_step is None or on_step is RunHooks.on_step:
        return
    raise ValueError(
        f"{type(hooks).__name__} overrides on_step, which workers= does not call: steps run inside the "
        "workers and shipping every observation back to the driver would cost more than the run. "
        "On the driver, workers= calls on_run_start, on_episode_start / on_episode_end (as each episode "
        "finishes) and on_run_end; move per-step work into the env or the model, record frames with "
        "rlmesh.Recorder().capture(...) (it runs in the workers), or run with workers=None"
    )


class DriverContext:
    """The :class:`~rlmesh.RunContext` ``on_run_start`` receives on the driver of a distributed run."""

    def __init__(self, contract: Any) -> None:
        self._contract = contract
        self._readers: dict[Any, Any] = {}

    @property
    def contract(self) -> Any:
        """The contract of the first worker's env."""
        return self._contract

    @property
    def num_envs(self) -> int:
        return 1

    def read(self, observation: object, item: object) -> Any:
        reader = self._readers.get(id(item))
        if reader is None:
            reader = self._readers[id(item)] = adapters.build_reader(self._contract, item)
        out = reader(observation)
        return next(iter(out.values())) if isinstance(out, dict) and len(out) == 1 else out

    def frame_sources(self) -> tuple[str, ...]:
        return ()  # frames live in the workers


def merge_telemetry(rows: Sequence[TelemetryRow]) -> tuple[TelemetryRow, ...]:
    """Fold per-episode rows into one row per series: counts add, means are count-weighted.

    Percentiles cannot be merged exactly from per-episode summaries: ``p50``/``p95``/``p99``
    are the count-weighted means of the episodes' percentiles (``p99`` the maximum).
    """
    groups: dict[tuple[str, str, str, str], list[TelemetryRow]] = {}
    for r in rows:
        groups.setdefault((r.op, r.component, r.metric, r.unit), []).append(r)
    out = []
    for (op, component, metric, unit), rs in groups.items():
        n = sum(r.count for r in rs)
        if n <= 0:
            continue

        def mean(attr: str, rs: list[TelemetryRow] = rs, n: int = n) -> float:
            return float(sum(getattr(r, attr) * r.count for r in rs) / n)

        out.append(
            TelemetryRow(
                op,
                component,
                metric,
                unit,
                n,
                mean("avg"),
                mean("p50"),
                mean("p95"),
                max(r.p99 for r in rs),
            )
        )
    return tuple(out)


def _make_backend(cfg: Workers, n: int) -> Any:
    if cfg.resolved_backend() == "ray":
        return RayBackend(cfg, expected=n)
    return ProcessBackend()


def _close_backend(backend: Any) -> None:
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
        n = workers.n
        if self.backend == "ray":
            self._backend: Any = RayBackend(
                workers
            )  # starts (and then owns) a local Ray if none is running
            n = n if n is not None else _ray_cpus()
            self._backend.expected = n
        else:
            self._backend = ProcessBackend()
            n = n if n is not None else default_processes()
        self.n: int = n
        self._finalizer = weakref.finalize(self, _close_backend, self._backend)
        # before multiprocessing's own exit hook, which would wait for our workers forever
        atexit.register(self._finalizer)
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
        atexit.unregister(self._finalizer)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<WorkerPool {self.backend} n={self.n} {state}>"

    def _lease(self) -> Any:
        """The backend, for one run (released by :meth:`_unlease`)."""
        if self.closed:
            raise ValueError(
                f"workers={self!r}: this pool is closed; start a new one with rlmesh.Workers(...).start()"
            )
        if not self._lock.acquire(blocking=False):
            raise RuntimeError(
                f"workers={self!r} is running another run: a pool runs one run at a time"
            )
        return self._backend

    def _unlease(self) -> None:
        self._lock.release()


class _Driver:
    def __init__(
        self,
        *,
        cfg: Workers,
        plan: list[tuple[int, int | None, int]],
        done: dict[int, EpisodeResult],
        n: int,
        job: Job,
        hooks: Any,
        journal: Journal | None,
        journal_path: str | None,
        pool: WorkerPool | None = None,
    ) -> None:
        self.pool = pool
        self.cfg = cfg
        self.plan = plan
        self.results: dict[int, EpisodeResult] = dict(done)
        self.resumed = set(done)
        self.n = n
        self.job = job
        self.hooks = hooks
        self.side = driver_side_for(hooks) if hooks is not None else None
        self.plain_hooks = hooks if hooks is not None and self.side is None else None
        self.journal = journal
        self.journal_path = journal_path
        self.pending: deque[tuple[int, int | None, int]] = deque(
            t for t in plan if t[0] not in done
        )
        self.inflight: dict[int, deque[tuple[int, int | None, int]]] = {}  # per worker, in order
        self.ready: set[int] = set()
        self.started_at: dict[int, float] = {}
        self.labels: dict[int, str] = {}
        self.generation: dict[int, int] = {}
        self.stats: dict[str, WorkerStats] = {}
        self.attempts: dict[int, list[str]] = {}
        self.retries: list[EpisodeRetry] = []
        self.telemetry: list[TelemetryRow] = []
        self.failure: tuple[int, BaseException] | None = None
        self.payloads: dict[int, Any] = {}
        self.absorbed = 0
        self.spawns_left = n * max(1, cfg.max_retries)
        self.run_started = False
        self.backend: Any = None
        self.inherited: set[int] = set()  # pool slots whose worker was alive before this run
        self.tainted = False  # the driver was interrupted mid-call: the workers' state is unknown
        self.progress = RunProgress(len(plan), n, enabled=cfg.progress)
        for index in sorted(done):
            self.progress.update(resumed=done[index])

    # -- workers ------------------------------------------------------------------------------

    def _spawn(self, slot: int) -> None:
        gen = self.generation.get(slot, -1) + 1
        self.generation[slot] = gen
        label = f"w{slot}" if gen == 0 else f"w{slot}.{gen}"
        self.labels[slot] = label
        self.started_at[slot] = time.monotonic()
        if not self.backend.has_worker(slot):
            self.backend.spawn(slot, label)
        self.backend.assign(slot, label)

    def _alive(self) -> int:
        """Live workers of this run (a pool may hold more than the run uses)."""
        if self.pool is None:
            return int(self.backend.alive())
        return int(self.backend.alive(range(self.n)))

    def _work_left(self) -> bool:
        return bool(self.pending) or any(self.inflight.values())

    def _dispatch(self) -> None:
        """Keep every ready worker busy: one episode running and, while the queue is longer
        than the crowd, one more queued behind it, so a worker never waits for the
        driver's round trip between two episodes (the tail is not queued: an idle worker
        takes it)."""
        ready = sorted(self.ready)
        for depth in range(PIPELINE_DEPTH):
            for slot in ready:
                if not self.pending or (depth and len(self.pending) <= len(ready)):
                    return
                queue = self.inflight.setdefault(slot, deque())
                if len(queue) > depth:
                    continue
                task = self.pending.popleft()
                if self.backend.submit(slot, task):
                    queue.append(task)
                else:
                    self.pending.appendleft(task)

    def _take(self, slot: int, index: int) -> tuple[int, int | None, int] | None:
        """Remove and return the episode ``index`` handed to worker ``slot`` (None: stale)."""
        queue = self.inflight.get(slot)
        for task in queue or ():
            if task[0] == index:
                assert queue is not None
                queue.remove(task)
                return task
        return None

    def _inflight(self) -> Iterator[tuple[int, int | None, int]]:
        for queue in self.inflight.values():
            yield from queue

    # -- events ---------------------------------------------------------------------------------

    def _on_ready(self, slot: int, info: dict[str, Any]) -> None:
        self.ready.add(slot)
        self.inherited.discard(slot)
        self.started_at.pop(slot, None)
        label = self.labels[slot]
        self.stats[label] = WorkerStats(
            label, str(info.get("host", "")), int(info.get("pid", 0)), str(info.get("node", ""))
        )
        if not self.run_started:
            self.run_started = True
            if self.plain_hooks is not None:
                self.plain_hooks.on_run_start(DriverContext(info.get("contract")))

    def _on_done(self, slot: int, outcome: Outcome) -> None:
        result = outcome.result
        index = result.index
        task = self._take(slot, index)
        if task is None or index in self.results:
            return  # a stale report (an episode already finished elsewhere)
        self.results[index] = result
        if self.journal is not None and not outcome.journaled:
            self.journal.record(result, self.labels[slot])
        st = self.stats.get(self.labels[slot])
        if st is not None:
            st.episodes += 1
            st.env_ms += (result.step_ms or 0.0) * result.steps
            st.model_ms += (result.predict_ms or 0.0) * result.steps
            st.busy_s += result.duration_s
        self.telemetry.extend(outcome.telemetry)
        if self.side is not None:
            self.payloads[index] = outcome.payload
            self._absorb()
        if self.plain_hooks is not None and (self.failure is None or index < self.failure[0]):
            self.plain_hooks.on_episode_start(episode=index, seed=result.seed)
            self.plain_hooks.on_episode_end(result)
        self.progress.update(episode=result, alive=self._alive())

    def _absorb(self) -> None:
        """Feed the worker-hooks products to the driver side in episode order."""
        assert self.side is not None
        limit = self.failure[0] if self.failure is not None else len(self.plan)
        while self.absorbed < limit:
            index = self.plan[self.absorbed][0]
            if index not in self.results:
                return
            self.side.absorb(self.results[index], self.payloads.pop(index, None))
            self.absorbed += 1

    def _on_failed(self, slot: int, index: int, error: BaseException) -> None:
        self._take(slot, index)
        if self.failure is None or index < self.failure[0]:
            self.failure = (index, error)
            self.pending = deque(t for t in self.pending if t[0] < index)

    def _on_lost(self, slot: int, reason: str) -> None:
        self.ready.discard(slot)
        self.started_at.pop(slot, None)
        queue = self.inflight.pop(slot, None) or deque()
        task = (
            queue.popleft() if queue else None
        )  # the episode it was running; the rest never started
        self.pending.extendleft(reversed(queue))
        label = self.labels.get(slot, f"w{slot}")
        if slot in self.inherited:  # a pool worker that died between runs: replaced, not a retry
            self.inherited.discard(slot)
            self.started_at[slot] = time.monotonic()
            self.backend.spawn(slot, label)
            self.backend.assign(slot, label)
            return
        if task is not None and self.failure is not None and task[0] > self.failure[0]:
            task = None  # the run ends before this episode (an earlier one raised): not needed
        if task is not None:
            index, seed, _ = task
            reasons = self.attempts.setdefault(index, [])
            reasons.append(reason)
            if len(reasons) > self.cfg.max_retries:
                raise WorkerLost(
                    f"episode {index} (seed {seed}) was lost {len(reasons)} times, more than max_retries="
                    f"{self.cfg.max_retries}: " + "; ".join(reasons),
                    index=index,
                    reasons=tuple(reasons),
                )
            self.retries.append(EpisodeRetry(index, seed, label, reason))
            self.pending.appendleft(task)
        if self._work_left() and self.spawns_left > 0:
            self.spawns_left -= 1
            self._spawn(slot)
        elif self._work_left() and not self.ready and self._alive() == 0:
            raise WorkerLost(f"every worker was lost and no replacement is left ({reason})")

    def _handle(self, event: tuple[Any, ...]) -> None:
        kind, slot = event[0], event[1]
        if kind == "ready":
            self._on_ready(slot, event[2])
        elif kind == "done":
            self._on_done(slot, event[2])
        elif kind == "failed":
            self._on_failed(slot, event[2], event[3])
        elif kind == "lost":
            self._on_lost(slot, event[2])
        elif kind == "setup_failed":
            raise for_workers(event[2], self.n)  # EndpointBusy: "at most K workers"
        else:  # pragma: no cover - a backend bug
            raise AssertionError(f"unknown worker event {kind!r}")

    def _check_startup(self) -> None:
        """A worker that never gets ready is given up on; the run fails only if none is ready."""
        now = time.monotonic()
        for slot, t0 in list(self.started_at.items()):
            if slot in self.ready or now - t0 <= STARTUP_TIMEOUT_SECONDS:
                continue
            if not self.ready:
                raise TimeoutError(
                    f"no worker became ready within {STARTUP_TIMEOUT_SECONDS:.0f}s (worker {self.labels[slot]} "
                    "is still building its env and model, or waiting for a session; with Ray: are the "
                    "requested resources available?)"
                )
            del self.started_at[slot]
            self.backend.kill(slot)
            warnings.warn(
                f"worker {self.labels[slot]} did not become ready within {STARTUP_TIMEOUT_SECONDS:.0f}s; "
                "the run goes on without it",
                UserWarning,
                stacklevel=2,
            )

    def _finished(self) -> bool:
        if self.failure is not None:
            k = self.failure[0]
            return not self.pending and all(t[0] > k for t in self._inflight())
        return not self._work_left()

    # -- the run --------------------------------------------------------------------------------

    def run(self) -> RunResult:
        error: BaseException | None = None
        try:
            if self._work_left():
                job_bytes = dumps(self.job, "run")
                if self.pool is None:
                    self.backend = _make_backend(self.cfg, self.n)
                else:
                    self.backend = self.pool._lease()
                    self.inherited = {
                        slot for slot in range(self.n) if self.backend.has_worker(slot)
                    }
                self.backend.set_job(job_bytes, self.journal_path)
                for slot in range(
                    self.n
                ):  # start every missing worker first, then hand out the job
                    if not self.backend.has_worker(slot):
                        self.backend.spawn(slot, f"w{slot}")
                for slot in range(self.n):
                    self._spawn(slot)
                self.progress.update(alive=0)
                while not self._finished():
                    self.tainted = True  # until the backend call returns
                    events = self.backend.poll(POLL_SECONDS)
                    self.tainted = False
                    for event in events:
                        self._handle(event)
                    self.tainted = True
                    self._dispatch()
                    self.tainted = False
                    self._check_startup()
                    self.progress.update(alive=self._alive())
        except BaseException as exc:
            error = exc
            if not isinstance(exc, Exception):
                self.tainted = True  # Ctrl-C (or an exit) may have cut a call short anywhere
        self._stop(force=error is not None or self.failure is not None)
        return self._finish(error)

    def _stop(self, *, force: bool) -> None:
        backend, self.backend = self.backend, None
        try:
            if backend is None:
                return
            if self.pool is None:
                for slot in list(
                    self.started_at
                ):  # still starting: nothing to finish, stop them now
                    backend.kill(slot)
                backend.close(force=force)
                return
            # a pool's worker still setting up is released like the others (once set up), so
            # the pool keeps its n workers warm
            try:
                slots = range(self.n)
                if self.tainted:  # the workers' state is unknown: stop them; the pool replaces them
                    for slot in slots:
                        backend.kill(slot)
                    return
                for slot in slots:  # still running an episode the run no longer needs
                    if self.inflight.get(slot):
                        backend.kill(slot)
                backend.release(
                    [slot for slot in slots if backend.has_worker(slot)], STOP_GRACE_SECONDS
                )
            except BaseException:
                for slot in range(self.n):
                    backend.kill(slot)
                raise
        finally:
            if self.pool is not None and backend is not None:
                self.pool._unlease()
            self.progress.close()

    def _finish(self, error: BaseException | None) -> RunResult:
        if self.failure is not None and error is None:
            error = self.failure[1]
        limit = self.failure[0] if self.failure is not None else None
        episodes = tuple(
            self.results[i]
            for i, _, _ in self.plan
            if i in self.results and (limit is None or i < limit)
        )
        workers = tuple(st.freeze() for st in self.stats.values())
        result = RunResult(
            episodes,
            merge_telemetry(self.telemetry),
            (),
            workers=workers,
            retries=tuple(self.retries),
        )
        if self.journal is not None:
            try:
                self.journal.close()
            except Exception as exc:
                error = error or exc
        if self.side is not None:
            try:
                if error is None:
                    self._absorb()
                self.side.end(result)
            except BaseException as exc:
                error = error or exc
        if self.plain_hooks is not None and (
            self.run_started or not self._work_left() or error is None
        ):
            try:
                self.plain_hooks.on_run_end(result)
            except BaseException as exc:
                error = error or exc
        if error is not None:
            raise error
        return result


register_pool_type(WorkerPool)


def run_distributed(
    open_session: Callable[..., Any],
    model: Any,
    env: Any,
    workers: Workers | WorkerPool,
    *,
    seeds: Sequence[int] | None,
    max_episodes: int | None,
    episodes: int | None,
    max_episode_steps: int | None,
    max_episode_seconds: float | None,
    hooks: RunHooks | None,
    instruction: str | None,
    close_env: bool,
    trust_entrypoints: bool | None,
    execution_horizon: int,
    view: Any,
    workflow_edition: str | None,
    trial_index_base: int,
    prefetch_lead: int,
    journal: Any,
) -> RunResult:
    """``rlmesh.run(..., workers=...)`` (see the module docstring)."""
    count, seed_list = episode_budget(seeds, max_episodes, episodes)
    validate_caps(max_episode_steps, max_episode_seconds, trial_index_base)
    if view is not None and view is not False:
        raise ValueError(
            "view= watches one env, but workers= runs the episodes in other processes; drop view= "
            "(the live progress line shows the run) or run with workers=None"
        )
    if hooks is not None:
        if not isinstance(hooks, RunHooks) and not callable(getattr(hooks, "on_run_end", None)):
            raise TypeError(f"hooks must be a rlmesh.RunHooks, got {type(hooks).__name__}")
        if driver_side_for(hooks) is None:
            _refuse_step_hooks(hooks)
    pool: WorkerPool | None = None
    if isinstance(workers, WorkerPool):
        pool, workers = workers, workers.workers
        if pool.closed:
            raise ValueError(
                f"workers={pool!r}: this pool is closed; start a new one with rlmesh.Workers(...).start()"
            )
    recipes, limit = env_recipe(env, pool.n if pool is not None else workers.n)
    mrecipe = model_recipe(model)
    side = driver_side_for(hooks) if hooks is not None else None
    job = Job(
        envs=tuple(recipes),
        model=mrecipe,
        open_session=open_session,
        session_kw={
            "instruction": instruction,
            "close_env": close_env,
            "trust_entrypoints": trust_entrypoints,
            "execution_horizon": execution_horizon,
            "view": None,
            "workflow_edition": workflow_edition,
            "prefetch_lead": prefetch_lead,
        },
        run_kw={"max_episode_steps": max_episode_steps, "max_episode_seconds": max_episode_seconds},
        hooks_plan=side.plan if side is not None else None,
    )
    plan = [
        (i, seed_list[i] if i < len(seed_list) else None, trial_index_base + i)
        for i in range(count)
    ]
    journal_obj: Journal | None = None
    done: dict[int, EpisodeResult] = {}
    journal_path: str | None = None
    if journal is not None:
        identity = {
            "episodes": count,
            "seeds": seed_list,
            "trial_index_base": trial_index_base,
            "max_episode_steps": max_episode_steps,
            "max_episode_seconds": max_episode_seconds,
            "model": mrecipe.label if mrecipe.kind == "random" else describe_target(model),
            "env": _env_identity(recipes, env),
        }
        journal_obj = Journal.open_for_run(journal, identity)
        journal_path = journal_obj.path
        if any(seed is None for _, seed, _ in plan):
            warnings.warn(
                "journal= with unseeded episodes: a resumed run cannot reproduce them; pass seeds=",
                UserWarning,
                stacklevel=3,
            )
        done = {i: r for i, r in journal_obj.done().items() if i < count}
    left = count - len(done)
    n = pool.n if pool is not None else workers.n
    if n is None:
        if limit is not None:
            n = limit
        elif workers.resolved_backend() == "ray":
            n = _ray_cpus()
        else:
            n = default_processes()
    n = max(1, min(n, left)) if left else 1
    driver = _Driver(
        cfg=workers,
        plan=plan,
        done=done,
        n=n,
        job=job,
        hooks=hooks,
        journal=journal_obj,
        journal_path=journal_path,
        pool=pool,
    )
    return driver.run()


def _env_identity(recipes: list[EnvRecipe], env: Any) -> str:
    if any(r.kind == "gym" for r in recipes) or isinstance(env, (str, list, tuple)):
        return ",".join(r.label for r in recipes)
    return describe_target(env)


def _ray_cpus() -> int:
    ray = import_ray()
    if not ray.is_initialized():
        return default_processes()
    return max(1, int(ray.cluster_resources().get("CPU", 1)))
