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

import dataclasses
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ... import adapters
from ..._spawn.recipe import EnvRecipe
from ...errors import WorkerLost
from .._budget import episode_budget, validate_caps
from .._busy import for_workers
from .._hooks import RunHooks
from .._options import RunOptions
from .._results import EpisodeResult, EpisodeRetry, RunResult, TelemetryRow, WorkerStats
from .backend import Task
from .hooks import driver_side_for
from .job import Job, Outcome, SlotEnv, describe_target, env_recipes, model_recipe, ship, slot_label
from .journal import Journal
from .progress import RunProgress
from .workers import STARTUP_TIMEOUT_SECONDS, WorkerPool, Workers, default_workers, make_backend

__all__ = ["merge_telemetry", "run_distributed"]

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


class _Driver:
    def __init__(
        self,
        *,
        cfg: Workers,
        plan: list[Task],
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
        self.pending: deque[Task] = deque(t for t in plan if t[0] not in done)
        self.inflight: dict[int, deque[Task]] = {}  # per worker, in order
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

    def _take(self, slot: int, index: int) -> Task | None:
        """Remove and return the episode ``index`` handed to worker ``slot`` (None: stale)."""
        queue = self.inflight.get(slot)
        for task in queue or ():
            if task[0] == index:
                assert queue is not None
                queue.remove(task)
                return task
        return None

    def _inflight(self) -> Iterator[Task]:
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
                job_bytes = ship(self.job, "run")
                if self.pool is None:
                    self.backend = make_backend(self.cfg, self.n)
                else:
                    self.backend = self.pool.lease()
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
                self.pool.unlease()
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


def run_distributed(
    open_session: Callable[..., Any],
    model: Any,
    env: Any,
    workers: Workers | WorkerPool,
    options: RunOptions,
) -> RunResult:
    """``rlmesh.run(..., workers=...)`` (see the module docstring)."""
    opts = options
    count, seed_list = episode_budget(opts.seeds, opts.max_episodes, opts.episodes)
    validate_caps(opts.max_episode_steps, opts.max_episode_seconds, opts.trial_index_base)
    if opts.session.view is not None and opts.session.view is not False:
        raise ValueError(
            "view= watches one env, but workers= runs the episodes in other processes; drop view= "
            "(the live progress line shows the run) or run with workers=None"
        )
    hooks = opts.hooks
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
    envs, limit = env_recipes(env, pool.n if pool is not None else workers.n)
    mrecipe = model_recipe(model)
    side = driver_side_for(hooks) if hooks is not None else None
    job = Job(
        envs=tuple(envs),
        model=mrecipe,
        open_session=open_session,
        session=dataclasses.replace(opts.session, view=None),
        caps={
            "max_episode_steps": opts.max_episode_steps,
            "max_episode_seconds": opts.max_episode_seconds,
        },
        hooks_plan=side.plan if side is not None else None,
    )
    base = opts.trial_index_base
    plan = [(i, seed_list[i] if i < len(seed_list) else None, base + i) for i in range(count)]
    journal_obj: Journal | None = None
    done: dict[int, EpisodeResult] = {}
    journal_path: str | None = None
    if opts.journal is not None:
        identity = {
            "episodes": count,
            "seeds": seed_list,
            "trial_index_base": base,
            "max_episode_steps": opts.max_episode_steps,
            "max_episode_seconds": opts.max_episode_seconds,
            "model": mrecipe.label if mrecipe.kind == "random" else describe_target(model),
            "env": _env_identity(envs, env),
        }
        journal_obj = Journal.open_for_run(opts.journal, identity)
        journal_path = journal_obj.path
        if any(seed is None for _, seed, _ in plan):
            warnings.warn(
                "journal= with unseeded episodes: a resumed run cannot reproduce them; pass seeds=",
                UserWarning,
                stacklevel=3,
            )
        done = {i: r for i, r in journal_obj.done().items() if i < count}
    left = count - len(done)
    if pool is not None:
        n = pool.n
    else:
        asked = workers.n if workers.n is not None or limit is None else limit
        n = default_workers(dataclasses.replace(workers, n=asked))
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


def _env_identity(envs: list[SlotEnv], env: Any) -> str:
    """The journal's description of the run's env (stable across runs of the same call)."""
    by_name = any(
        isinstance(e, EnvRecipe)
        and (isinstance(e.source, str) or type(e.source).__name__ == "EnvSpec")
        for e in envs
    )
    if by_name or isinstance(env, (str, list, tuple)):
        return ",".join(slot_label(e) for e in envs)
    return describe_target(env)
