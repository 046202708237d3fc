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
- *the worker was lost* (killed, crashed, node removed): what it reported before it died
  is kept; its episode is queued again (at most ``max_retries`` times, each noted in
  ``RunResult.retries``), unless the journal shows the worker finished it before it died
  (then that result is kept), and the slot gets a fresh worker;
- *an episode runs past its deadline* (``episode_timeout_seconds``): the driver stops its
  worker (what it finished before is kept) and, as ``Workers(on_episode_timeout=)`` says,
  queues the episode again as a retry or records it as timed out (``RunResult.timed_out``);
  the slot gets a fresh worker;
- *a worker could not set up* (env or model failed to build): the run fails with that error;
- ``KeyboardInterrupt`` (Ctrl-C): every worker is stopped, ``on_run_end`` fires, it propagates.

With ``workers=Workers(...)`` the run starts its workers and stops them at the end. With a
:class:`WorkerPool` (``Workers(...).start()``) the workers outlive the run: the run hands
them its job, and at the end they release the run's env and model (workers still
running an episode the run no longer needs, or all of the run's after Ctrl-C, are stopped
instead and replaced when the next run starts).
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from ... import adapters
from ...errors import WorkerLost
from .._busy import for_workers
from .._progress import RunProgress
from .._results import EpisodeResult, EpisodeRetry, RunResult, TelemetryRow, WorkerStats
from .backend import Task
from .hooks import driver_side_for
from .job import Job, Outcome, ship
from .journal import Journal
from .workers import STARTUP_TIMEOUT_SECONDS, WorkerPool, Workers, make_backend

__all__ = ["DriverContext", "merge_telemetry"]

#: Poll period of the driver loop (it also bounds how late Ctrl-C is noticed).
POLL_SECONDS = 0.2
#: Episodes handed to one worker at a time: the one it runs and the next, queued.
PIPELINE_DEPTH = 2
#: Seconds a pool's workers get to close a finished run's env and model before they are stopped.
STOP_GRACE_SECONDS = 5.0


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
        timed_out: frozenset[int] = frozenset(),
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
        self.timeout = cfg.episode_timeout_seconds
        #: When the episode at the head of each worker's queue started (about: when it was
        #: handed to an idle worker, or when the one before it was reported finished).
        self.running_since: dict[int, float] = {}
        self.timed_out: set[int] = set(timed_out)  # episodes recorded as timed out
        #: A grouped run: the group each worker holds (its env), once it left its first one.
        self.affinity: dict[int, int] = {}
        self.progress = RunProgress(len(plan), n, enabled=cfg.progress)
        for index in sorted(done):
            self.progress.update(resumed=done[index])

    # -- workers ------------------------------------------------------------------------------

    def _spawn(self, slot: int) -> None:
        gen = self.generation.get(slot, -1) + 1
        self.generation[slot] = gen
        label = f"w{slot}" if gen == 0 else f"w{slot}.{gen}"
        self.labels[slot] = label
        self.affinity.pop(slot, None)  # a fresh worker sets up on its first group
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
                task = self._next_for(slot) if self.job.groups else self.pending.popleft()
                if self.backend.submit(slot, task):
                    queue.append(task)
                    if len(queue) == 1:
                        self.running_since[slot] = time.monotonic()
                else:
                    self.pending.appendleft(task)

    def _next_for(self, slot: int) -> Task:
        """Take the next episode for ``slot`` in a grouped run (task affinity): the first one
        of the group it holds; else the first of the group no other worker holds with the
        most episodes left (the earliest on a tie); else the first of the group with the
        most episodes left per worker on it (the tail is shared). Switching groups costs
        the worker an env build, so it switches only when its group has nothing left."""
        job = self.job
        held = self.affinity.setdefault(slot, job.first_group(slot))
        for i, task in enumerate(self.pending):
            if job.group_for(task[0]) == held:
                del self.pending[i]
                return task
        holders: dict[int, int] = {}
        for other, group in self.affinity.items():
            if other != slot and other in self.ready:
                holders[group] = holders.get(group, 0) + 1
        left: dict[int, int] = {}
        first: dict[int, int] = {}
        for i, task in enumerate(self.pending):
            group = job.group_for(task[0])
            left[group] = left.get(group, 0) + 1
            first.setdefault(group, i)

        def rank(group: int) -> tuple[int, float, int]:
            return (holders.get(group, 0), -left[group] / (holders.get(group, 0) + 1), first[group])

        group = min(left, key=rank)
        self.affinity[slot] = group
        i = first[group]
        task = self.pending[i]
        del self.pending[i]
        return task

    def _take(self, slot: int, index: int) -> Task | None:
        """Remove and return the episode ``index`` handed to worker ``slot`` (None: stale)."""
        queue = self.inflight.get(slot)
        for i, task in enumerate(queue or ()):
            if task[0] == index:
                assert queue is not None
                queue.remove(task)
                if not queue:
                    self.running_since.pop(slot, None)
                elif i == 0:  # the next one starts now
                    self.running_since[slot] = time.monotonic()
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
        index = outcome.result.index
        task = self._take(slot, index)
        if task is None or index in self.results:
            return  # a stale report (an episode already finished elsewhere)
        self._keep(self.labels[slot], outcome)

    def _keep(self, label: str, outcome: Outcome, *, timed_out: bool = False) -> None:
        """Record one finished (or timed-out) episode: results, journal, stats, hooks, progress."""
        result = outcome.result
        index = result.index
        self.results[index] = result
        if timed_out:
            self.timed_out.add(index)
        if self.journal is not None and not outcome.journaled:
            self.journal.record(result, label, timed_out=timed_out)
        st = self.stats.get(label)
        if st is not None and not timed_out:
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

    def _drop(self, slot: int) -> Task | None:
        """Forget worker ``slot``: the episode it was running (``None``: none); the episodes
        queued behind it never started and go back to the queue."""
        self.ready.discard(slot)
        self.started_at.pop(slot, None)
        self.running_since.pop(slot, None)
        queue = self.inflight.pop(slot, None) or deque()
        task = queue.popleft() if queue else None
        self.pending.extendleft(reversed(queue))
        return task

    def _on_lost(self, slot: int, reason: str) -> None:
        task = self._drop(slot)
        label = self.labels.get(slot, f"w{slot}")
        if slot in self.inherited:  # a pool worker that died between runs: replaced, not a retry
            self.inherited.discard(slot)
            self.started_at[slot] = time.monotonic()
            self.backend.spawn(slot, label)
            self.backend.assign(slot, label)
            return
        self._retry(self._salvaged(task, label), label, reason)
        self._replace(slot, reason)

    def _salvaged(self, task: Task | None, label: str) -> Task | None:
        """``task``, the episode a lost or stopped worker was running; ``None`` when it has
        none, or when the journal shows it finished and journaled the episode before it
        ended without reporting it (that result is then kept)."""
        if task is not None and self.journal is not None:
            kept = self.journal.recorded(task)
            if kept is not None and task[0] not in self.results:
                self._keep(label, Outcome(kept, (), None, journaled=True))
                return None
        return task

    def _retry(self, task: Task | None, label: str, reason: str) -> None:
        """Queue ``task`` again (first), noted as a retry; ``WorkerLost`` past ``max_retries``."""
        if task is None or (self.failure is not None and task[0] > self.failure[0]):
            return  # none, or the run ends before this episode (an earlier one raised)
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

    def _replace(self, slot: int, reason: str) -> None:
        """A fresh worker in ``slot`` while work is left (``WorkerLost`` when none can be had)."""
        if self._work_left() and self.spawns_left > 0:
            self.spawns_left -= 1
            self._spawn(slot)
        elif self._work_left() and not self.ready and self._alive() == 0:
            raise WorkerLost(f"every worker was lost and no replacement is left ({reason})")

    def _check_deadlines(self) -> None:
        """Stop the worker of an episode past ``episode_timeout_seconds``; retry or record it."""
        timeout = self.timeout
        if timeout is None or not self.running_since:
            return
        now = time.monotonic()
        for slot, since in list(self.running_since.items()):
            queue = self.inflight.get(slot)
            if now - since <= timeout or not queue:
                continue
            late = queue[0]
            for event in self.backend.stop(slot):  # what it finished before it was stopped
                self._handle(event)
            label = self.labels.get(slot, f"w{slot}")
            task = self._salvaged(self._drop(slot), label)
            st = self.stats.get(label)
            where = f"worker {label}" + (f" (pid {st.pid})" if st is not None and st.pid else "")
            index, seed, trial = late
            reason = (
                f"episode {index} (seed {seed}) ran past episode_timeout_seconds={timeout:g} on "
                f"{where}: stopped"
            )
            if task is None:
                pass  # it finished (journaled) before it was stopped
            elif task != late:  # it finished in time after all; the one after it was cut short
                self.pending.appendleft(task)
            elif self.cfg.on_episode_timeout == "record":
                if self.failure is None or index < self.failure[0]:
                    result = EpisodeResult(
                        index, seed, 0, 0.0, False, True, False, now - since, None, None, trial
                    )
                    self._keep(label, Outcome(result, ()), timed_out=True)
            else:
                self._retry(task, label, reason)
            self._replace(slot, reason)

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
            self.progress.start()
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
                    self._check_deadlines()
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
        if error is None and len(episodes) != len(self.plan):  # never: every index exactly once
            missing = [i for i, _, _ in self.plan if i not in self.results]
            error = RuntimeError(
                f"a distributed run ended without episodes {missing[:10]}: an rlmesh bug, please report it"
            )
        workers = tuple(st.freeze() for st in self.stats.values())
        result = RunResult(
            episodes,
            merge_telemetry(self.telemetry),
            (),
            workers=workers,
            retries=tuple(self.retries),
            timed_out=tuple(e.index for e in episodes if e.index in self.timed_out),
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
