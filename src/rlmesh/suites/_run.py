"""``rlmesh.suites.run``: every task of a suite, in this process or over one pool of workers.

In this process the tasks run one after another, one ``rlmesh.run`` each. With
``workers=`` the whole suite is one distributed run (:func:`rlmesh.eval._api.run_groups`)
over one pool: each worker keeps one task's env and takes that task's episodes while any
are left (task affinity), so each task's env is built by about one worker rather than by
every worker, and no worker waits for a task's last episode before starting the next
task. ``journal=`` (a directory) holds the suite's journal: a re-run skips finished
episodes. A recorder (one bundle, a workload and videos per task) records each task in its
own run over the pool. A sandbox puts the envs in their own virtual environment when this
one lacks the simulator.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..eval import EpisodeResult, RunHooks, RunResult, WorkerPool, Workers, run as run_one
from ..eval._api import run_groups
from ..eval._options import RunOptions
from ..recorder import Recorder
from ..sandbox import SandboxBuild, SandboxEnv
from ._results import SuiteResult, TaskResult
from ._spec import Suite, SuiteKind, parse_suite

__all__ = ["run", "sandbox_env"]

SCRIPTED = "scripted"


def sandbox_env(
    kind: SuiteKind, task: str, backend: str | None, params: Mapping[str, Any]
) -> SandboxEnv:
    """One task's env in a sandbox that installs the suite's packages (built once, then cached)."""
    return SandboxEnv(
        kind.sandbox_source,
        build=SandboxBuild(packages=list(kind.packages)),
        backend=backend,
        connect_timeout_seconds=600.0,
        task=task,
        **params,
    )


def _sandbox_backend(sandbox: bool | str | None, kind: SuiteKind) -> str | bool | None:
    """``False``: in this process; else the sandbox backend (``None``: the sandbox's auto)."""
    if sandbox is None or sandbox == "auto":
        return False if kind.available() else "venv"
    if sandbox is False:
        return False
    if sandbox is True:
        return "venv"
    if sandbox in ("venv", "docker"):
        return sandbox
    raise ValueError(
        f"sandbox must be None/'auto', True, False, 'venv' or 'docker', got {sandbox!r}"
    )


def _model_for(model: Any, suite: Suite) -> tuple[Callable[[str], Any], str]:
    """``task -> model`` and a label for the results."""
    if isinstance(model, str) and model.lower() in (SCRIPTED, f"{suite.name}:{SCRIPTED}"):
        if not suite.kind.available():
            raise ValueError(
                f"the scripted {suite.name} policy runs in this process and needs "
                f'{", ".join(suite.kind.modules)}: pip install "rlmesh-py[{suite.name}]"'
            )
        return suite.scripted, f"{suite.name}:{SCRIPTED}"
    if isinstance(model, Mapping):
        missing = [t for t in suite.tasks if t not in model]
        if missing:
            raise ValueError(f"the model mapping has no model for task(s) {', '.join(missing)}")
        return (lambda task: model[task]), "per-task models"
    return (lambda task: model), getattr(model, "__name__", None) or type(model).__name__


def _pool(workers: Any) -> tuple[Any, bool, int | None]:
    """``(workers for each run, whether we started a pool to close, worker count)``."""
    if workers is None:
        return None, False, None
    if isinstance(workers, WorkerPool):
        return workers, False, getattr(workers, "n", None)
    spec = workers if isinstance(workers, Workers) else Workers(n=int(workers))
    return spec.start(), True, spec.n


def run(
    model: Any,
    suite: str | Suite,
    *,
    tasks: str | list[str] | tuple[str, ...] | None = None,
    episodes_per_task: int = 10,
    workers: int | Workers | WorkerPool | None = None,
    sandbox: bool | str | None = None,
    record: str | os.PathLike[str] | None = None,
    journal: str | os.PathLike[str] | None = None,
    max_episode_steps: int | None = None,
    on_task: Callable[[TaskResult], None] | None = None,
    progress: bool | None = None,
    **env_params: Any,
) -> SuiteResult:
    """Evaluate ``model`` on every task of ``suite``; returns a :class:`SuiteResult` (per task).

    Args:
        model: What ``rlmesh.run`` accepts (a ``Model``, a policy, a served model's
            ``RemoteModel``, a factory for workers), the same for every task; a mapping
            ``task -> model``; or ``"scripted"`` (the suite's scripted baseline per task).
        suite: ``"metaworld:MT10"``, ``"metaworld:reach-v3,push-v3"``, ``"metaworld"``
            (its default group) or a :class:`Suite`.
        tasks: Narrow the suite to these tasks (names or a comma-separated string).
        episodes_per_task: Episodes per task; episode *k* is ``reset(seed=k)`` (the
            suite's seed schedule), the same episodes in every run.
        workers: Run the suite's episodes in worker processes (an int, a
            :class:`rlmesh.Workers` or a started pool): one run over every task, each
            worker staying on one task's env while that task has episodes left. An int
            or ``Workers`` starts one pool for the whole suite.
        sandbox: ``None`` (auto): this process when it can import the suite's
            simulator, else a venv sandbox that installs it; ``False``: always this
            process; ``True``/``"venv"``/``"docker"``: that sandbox backend.
        record: A path: record every episode into one result bundle there (a workload
            and per-episode videos per task; needs the ``record`` extra).
        journal: A directory for the suite's journal (one per task when recording); a
            re-run of the same call skips what finished (runs the tasks in a worker
            process when ``workers`` is not given).
        max_episode_steps: Cap each episode (default: the suite's horizon, 500).
        on_task: Called with each :class:`TaskResult` as its task finishes (with
            ``workers``: in the order the tasks finish, its result holding the task's
            episodes; the returned :class:`SuiteResult` adds the workers' figures).
        progress: ``rlmesh.run``'s live line: one for the suite with ``workers``, else
            one per task (``None``: on a terminal, once it has gone on for 1.5 s;
            ``True`` always; ``False`` never).
        **env_params: The suite env's params for every task (Meta-World: ``camera``,
            ``image_size``, ``render_every``, ``terminate_on_success``).

    Example:
        >>> from rlmesh import suites
        >>> res = suites.run("scripted", "metaworld:reach-v3", episodes_per_task=2)  # doctest: +SKIP
        >>> res["reach-v3"].success_rate  # doctest: +SKIP
        1.0
    """
    if episodes_per_task < 1:
        raise ValueError(f"episodes_per_task must be >= 1, got {episodes_per_task}")
    if max_episode_steps is not None:
        env_params["max_episode_steps"] = max_episode_steps
    selected = parse_suite(suite, tasks, **env_params)
    backend = _sandbox_backend(sandbox, selected.kind)
    model_for, label = _model_for(model, selected)
    if journal is not None:
        Path(journal).mkdir(parents=True, exist_ok=True)
        if workers is None:
            workers = 1
    recorder = Recorder() if record is not None else None
    pool, owned, n = _pool(workers)
    t0 = time.perf_counter()
    done: list[TaskResult] = []
    try:
        if pool is not None and recorder is None:  # one run over every task (task affinity)
            done = _run_tasks(
                selected, model_for, backend, pool, journal, episodes_per_task, progress, on_task
            )
        else:
            for task in selected.tasks:
                done.append(
                    _run_task(
                        task,
                        selected,
                        model_for(task),
                        backend,
                        pool,
                        recorder,
                        journal,
                        label,
                        episodes_per_task,
                        progress,
                    )
                )
                if on_task is not None:
                    on_task(done[-1])
        if recorder is not None and record is not None:
            recorder.export(Path(record))
    finally:
        if owned:
            pool.close()
        if recorder is not None:
            recorder.close()
    return SuiteResult(
        suite=selected.label,
        model=label,
        tasks=tuple(done),
        seconds=time.perf_counter() - t0,
        workers=n,
        sandboxed=backend is not False,
    )


def _run_task(
    task: str,
    suite: Suite,
    model: Any,
    backend: str | bool | None,
    pool: Any,
    recorder: Recorder | None,
    journal: str | os.PathLike[str] | None,
    label: str,
    episodes: int,
    progress: bool | None = None,
) -> TaskResult:
    params = dict(suite.params)
    recipe = _recipe(suite, task, backend)
    hooks = None
    if recorder is not None:
        camera = params.get("camera")
        role = "image/wrist" if camera == "gripperPOV" else "image/primary"
        hooks = recorder.capture(
            model=label,
            env=suite.name,
            task=task,
            config={k: v for k, v in params.items() if v is not None},
            cameras=[role] if camera is not None else ["render"],
        )
    seeds = suite.seeds(task, episodes)
    t0 = time.perf_counter()
    if pool is None:
        env = recipe()
        result = run_one(model, env, seeds=seeds, hooks=hooks, close_env=True, progress=progress)
        _close(env)
    else:
        result = run_one(
            model,
            recipe,
            seeds=seeds,
            hooks=hooks,
            workers=pool,
            journal=None if journal is None else os.path.join(journal, f"{task}.journal"),
            progress=progress,
        )
    return TaskResult(task=task, result=result, seconds=time.perf_counter() - t0)


def _recipe(suite: Suite, task: str, backend: str | bool | None) -> Any:
    if backend is False:
        return suite.env(task)
    params = dict(suite.params)
    return functools.partial(
        sandbox_env, suite.kind, task, None if backend is True else backend, params
    )


class _TaskWatch(RunHooks):
    """Sees each episode of a suite's one run finish: when a task's last one does, builds its
    :class:`TaskResult` (its wall time: from its first episode's start to its last's end)."""

    def __init__(
        self, tasks: tuple[str, ...], episodes: int, on_task: Callable[[TaskResult], None] | None
    ) -> None:
        self.tasks = tasks
        self.episodes = episodes
        self.on_task = on_task
        self.finished: dict[str, list[EpisodeResult]] = {task: [] for task in tasks}
        self.span: dict[str, tuple[float, float]] = {}
        self.reported: set[str] = set()

    def seconds(self, task: str) -> float:
        start, end = self.span.get(task, (0.0, 0.0))
        return end - start

    def on_episode_end(self, result: EpisodeResult) -> None:
        g, k = divmod(result.index, self.episodes)
        task = self.tasks[g]
        now = time.perf_counter()
        start, end = self.span.get(task, (now - result.duration_s, now))
        self.span[task] = (min(start, now - result.duration_s), max(end, now))
        mine = self.finished[task]
        mine.append(dataclasses.replace(result, index=k))
        if len(mine) == self.episodes and self.on_task is not None:
            self.reported.add(task)
            episodes = tuple(sorted(mine, key=lambda e: e.index))
            self.on_task(TaskResult(task, RunResult(episodes), self.seconds(task)))


def _run_tasks(
    suite: Suite,
    model_for: Callable[[str], Any],
    backend: str | bool | None,
    pool: Any,
    journal: str | os.PathLike[str] | None,
    episodes: int,
    progress: bool | None,
    on_task: Callable[[TaskResult], None] | None,
) -> list[TaskResult]:
    """Every task's episodes as one distributed run: a worker keeps one task's env and takes
    that task's episodes while any are left, so each env is built by about one worker."""
    watch = _TaskWatch(suite.tasks, episodes, on_task)
    groups = [
        (model_for(task), _recipe(suite, task, backend), suite.seeds(task, episodes))
        for task in suite.tasks
    ]
    results = run_groups(
        groups,
        RunOptions(
            workers=pool,
            hooks=watch,
            progress=progress,
            journal=None if journal is None else os.path.join(journal, "suite.journal"),
        ),
        names=[f"{suite.name}:{task} {dict(sorted(suite.params.items()))}" for task in suite.tasks],
    )
    done = [
        TaskResult(task=task, result=result, seconds=watch.seconds(task))
        for task, result in zip(suite.tasks, results)
    ]
    for task_result in done:  # tasks the journal held whole: no episode of theirs ran now
        if on_task is not None and task_result.task not in watch.reported:
            on_task(task_result)
    return done


def _close(env: Any) -> None:
    try:
        env.close()
    except Exception:
        pass
