"""``rlmesh.run(..., workers=...)``: check the run, build its job and plan, open its journal, drive it.

:func:`run_distributed` turns the run's keywords into what the driver (:mod:`.driver`) needs:
the job the workers receive (:mod:`.job`), the plan (episode ``i`` is ``(i, seeds[i],
trial_index_base + i)``), the journal and what it already holds (:mod:`.journal`), and the
worker count; then it hands them to the driver.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..._spawn.recipe import EnvRecipe
from .._budget import episode_budget, validate_caps
from .._hooks import RunHooks
from .._options import RunOptions
from .._results import EpisodeResult, RunResult
from .backend import Task
from .driver import _Driver
from .hooks import driver_side_for
from .job import (
    Group,
    Job,
    ModelRecipe,
    SlotEnv,
    describe_target,
    env_recipes,
    model_recipe,
    slot_label,
)
from .journal import Journal
from .workers import WorkerPool, Workers, check_episode_timeout, default_workers

__all__ = ["run_distributed", "run_grouped"]


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
    hooks, pool, workers = _checked(opts, workers)
    envs, limit = env_recipes(env, pool.n if pool is not None else workers.n)
    mrecipe = model_recipe(model)
    job = _job(open_session, opts, workers, envs, mrecipe)
    base = opts.trial_index_base
    plan = [(i, seed_list[i] if i < len(seed_list) else None, base + i) for i in range(count)]
    identity = {
        "episodes": count,
        "seeds": seed_list,
        "trial_index_base": base,
        "max_episode_steps": opts.max_episode_steps,
        "max_episode_seconds": opts.max_episode_seconds,
        "model": mrecipe.label if mrecipe.kind == "random" else describe_target(model),
        "env": _env_identity(envs, env),
    }
    return _drive(opts, workers, pool, limit, job, plan, identity, hooks)


def run_grouped(
    open_session: Callable[..., Any],
    groups: Sequence[tuple[Any, Any, Sequence[int]]],
    workers: Workers | WorkerPool,
    options: RunOptions,
    names: Sequence[str] | None = None,
) -> list[RunResult]:
    """Several runs as one over the same workers: ``groups`` is ``(model, env, seeds)`` per
    group (a suite's tasks); one :class:`RunResult` per group, each as its own run would
    give (episode ``k`` of a group is ``reset(seed=seeds[k])`` with trial index ``k``).

    Each worker holds one group's env at a time and is handed that group's episodes while
    any are left (task affinity): a group's env is built by one worker, or by a few at the
    end when they share the last groups' episodes, not by every worker. Groups that pass
    the same model object share one model recipe (a worker switching groups keeps its
    model). ``options`` applies to every group (its ``seeds``/``episodes`` are unused);
    ``hooks`` see every episode with its index in the whole run; a journal covers the
    whole run, whose identity holds ``names`` (one per group: what tells the groups apart
    when their models and envs describe alike, e.g. a suite's task names and params).
    Worker-side hooks (a recorder's capture) are not supported.
    """
    opts = options
    if not groups:
        raise ValueError("run_grouped needs at least one group")
    hooks, pool, workers = _checked(opts, workers)
    if hooks is not None and driver_side_for(hooks) is not None:
        raise ValueError("a grouped run takes driver-side hooks only (no recorder capture)")
    n_for = pool.n if pool is not None else workers.n
    models: list[Any] = []
    recipes: list[ModelRecipe] = []
    members: list[Group] = []
    group_of: list[int] = []
    plan: list[Task] = []
    limit: int | None = None
    for g, (model, env, seeds) in enumerate(groups):
        envs, env_limit = env_recipes(env, n_for)
        if env_limit is not None:
            limit = env_limit if limit is None else min(limit, env_limit)
        k = next((i for i, m in enumerate(models) if m is model), None)
        if k is None:
            k = len(models)
            models.append(model)
            recipes.append(model_recipe(model))
        members.append(Group(tuple(envs), k))
        for trial, seed in enumerate(seeds):
            plan.append((len(plan), int(seed), trial))
            group_of.append(g)
    job = dataclasses.replace(
        _job(open_session, opts, workers, members[0].envs, recipes[0]),
        groups=tuple(members),
        models=tuple(recipes),
        group_of=tuple(group_of),
    )
    identity = {
        "names": list(names) if names is not None else None,
        "groups": [
            {
                "seeds": [int(s) for s in seeds],
                "model": describe_target(model),
                "env": describe_target(env),
            }
            for model, env, seeds in groups
        ],
        "max_episode_steps": opts.max_episode_steps,
        "max_episode_seconds": opts.max_episode_seconds,
    }
    result = _drive(opts, workers, pool, limit, job, plan, identity, hooks)
    out: list[RunResult] = []
    episodes = {e.index: e for e in result.episodes}
    first = 0
    for _, _, seeds in groups:  # a group's episodes are the plan's indices first..end-1
        end = first + len(seeds)
        out.append(
            RunResult(
                tuple(dataclasses.replace(episodes[i], index=i - first) for i in range(first, end)),
                workers=result.workers,
                retries=tuple(
                    dataclasses.replace(r, index=r.index - first)
                    for r in result.retries
                    if first <= r.index < end
                ),
                timed_out=tuple(i - first for i in result.timed_out if first <= i < end),
            )
        )
        first = end
    return out


def _checked(
    opts: RunOptions, workers: Workers | WorkerPool
) -> tuple[Any, WorkerPool | None, Workers]:
    """Refuse what ``workers=`` cannot do; ``(hooks, pool or None, the Workers settings)``."""
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
    workers = _with_episode_timeout(workers, opts.episode_timeout_seconds)
    if opts.progress is not None:  # run(progress=...) decides over Workers(progress=...)
        workers = dataclasses.replace(workers, progress=opts.progress)
    return hooks, pool, workers


def _job(
    open_session: Callable[..., Any],
    opts: RunOptions,
    workers: Workers,
    envs: Sequence[SlotEnv],
    mrecipe: ModelRecipe,
) -> Job:
    side = driver_side_for(opts.hooks) if opts.hooks is not None else None
    return Job(
        envs=tuple(envs),
        model=mrecipe,
        open_session=open_session,
        session=dataclasses.replace(opts.session, view=None),
        caps={
            "max_episode_steps": opts.max_episode_steps,
            "max_episode_seconds": opts.max_episode_seconds,
        },
        hooks_plan=side.plan if side is not None else None,
        episode_timeout_seconds=workers.episode_timeout_seconds,
    )


def _drive(
    opts: RunOptions,
    workers: Workers,
    pool: WorkerPool | None,
    limit: int | None,
    job: Job,
    plan: list[Task],
    identity: dict[str, Any],
    hooks: Any,
) -> RunResult:
    """Open the journal (``opts.journal``), size the crowd and drive the run."""
    journal_obj: Journal | None = None
    done: dict[int, EpisodeResult] = {}
    timed_out: frozenset[int] = frozenset()
    journal_path: str | None = None
    if opts.journal is not None:
        journal_obj = Journal.open_for_run(opts.journal, identity)
        journal_path = journal_obj.path
        if any(seed is None for _, seed, _ in plan):
            warnings.warn(
                "journal= with unseeded episodes: a resumed run cannot reproduce them; pass seeds=",
                UserWarning,
                stacklevel=4,
            )
        try:
            done = journal_obj.done(plan)
            timed_out = journal_obj.timed_out() & frozenset(done)
        except BaseException:
            journal_obj.close()
            raise
    left = len(plan) - len(done)
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
        timed_out=timed_out,
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


def _with_episode_timeout(workers: Workers, seconds: Any) -> Workers:
    """``workers`` with ``run(episode_timeout_seconds=...)`` applied (given once, or twice the same).

    Raises:
        ValueError: the run and its ``Workers`` give different deadlines.
    """
    timeout = check_episode_timeout(seconds, "episode_timeout_seconds=")
    if timeout is None or timeout == workers.episode_timeout_seconds:
        return workers
    if workers.episode_timeout_seconds is not None:
        raise ValueError(
            f"episode_timeout_seconds={timeout:g} but Workers(episode_timeout_seconds="
            f"{workers.episode_timeout_seconds:g}): give the deadline once"
        )
    return dataclasses.replace(workers, episode_timeout_seconds=timeout)
