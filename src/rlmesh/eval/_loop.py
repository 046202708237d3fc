"""The one drive loop: ``Session.run`` for a single env (EVAL-20..27, DELTA-39, DELTA-46).

Per episode: reset -> clock starts -> ``on_episode_start`` -> loop (wall-clock cap
checked at the top, predict timed, env step timed, ``on_step``) -> an episode that
left the loop neither terminated nor truncated is marked truncated (EVAL-23) ->
``on_episode_end``. ``on_run_end`` fires exactly once, with the completed episodes,
even on an exception or ``KeyboardInterrupt``; the original exception wins (EVAL-27).

The hot path binds every callable to a local and builds a ``StepEvent`` only when
hooks are given (P-3).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._budget import BUILTIN_STEP_BOUND, episode_budget, finish_run, validate_caps
from ._episode import Episode
from ._hooks import RunHooks, StepEvent
from ._observers import DriveStep, HooksObserver, ObserverList
from ._progress import RunProgress, check_progress
from ._results import EpisodeResult, RunResult, aggregate_telemetry
from ._stats import Timings
from ._vector import run_vector

if TYPE_CHECKING:
    from ._drive import Drive
    from ._hooks import RunContext

__all__ = ["BUILTIN_STEP_BOUND", "play_episode", "run_session"]


def run_session(
    drive: Drive,
    context: RunContext,
    *,
    seeds: Sequence[int] | None,
    max_episodes: int | None,
    episodes: int | None,
    max_episode_steps: int | None,
    max_episode_seconds: float | None,
    hooks: RunHooks | None,
    trial_index_base: int,
    progress: bool | None = None,
) -> RunResult:
    """Implementation of :meth:`Session.run` (single env; vector envs go to ``_vector``).

    ``context`` is what ``on_run_start`` receives and what ``StepEvent.read`` reads
    through (the session). ``progress`` is the live line's switch (:mod:`._progress`);
    under a terminal viewer no line is drawn (its HUD shows the episode count).
    """
    drive.ensure_open()
    count, seed_list = episode_budget(seeds, max_episodes, episodes)
    validate_caps(max_episode_steps, max_episode_seconds, trial_index_base)
    check_progress(progress)
    if hooks is not None and not isinstance(hooks, RunHooks):
        missing = [n for n in ("on_step", "on_run_end") if not callable(getattr(hooks, n, None))]
        if missing:
            raise TypeError(f"hooks must be a rlmesh.RunHooks, got {type(hooks).__name__}")
    if count == 0:  # EVAL-21: empty result, no env reset required
        return finish_run(
            drive, [], (), ObserverList([HooksObserver(hooks)] if hooks is not None else []), None
        )
    env = drive.connect()
    observers = drive.observers(hooks, context)  # the user's hooks, then the live viewer (VIEW-6)
    line = RunProgress(count, enabled=False if drive.terminal_view else progress)
    if line.enabled:  # last: the progress line (it watches no steps)
        observers = ObserverList((*observers.observers, line))
    if env.is_vector:
        return run_vector(
            drive,
            context,
            count=count,
            seed_list=seed_list,
            max_episode_steps=max_episode_steps,
            max_episode_seconds=max_episode_seconds,
            observers=observers,
            trial_index_base=trial_index_base,
        )

    cap = max_episode_steps if max_episode_steps is not None else BUILTIN_STEP_BOUND
    max_secs = None if max_episode_seconds is None else float(max_episode_seconds)
    done: list[EpisodeResult] = []
    timings = Timings(), Timings(), Timings()  # reset, step, predict; bounded memory (issue 28)
    error: BaseException | None = None
    try:
        if observers:
            observers.on_run_start(context)
        for i in range(count):
            seed = seed_list[i] if i < len(seed_list) else None
            episode = play_episode(
                drive,
                context,
                i,
                seed,
                trial_index_base + i,
                count,
                cap,
                max_secs,
                observers,
                timings,
            )
            result = episode.result(i)
            done.append(result)
            if observers:
                observers.on_episode_end(result, 0)
    except BaseException as exc:
        error = error or exc
    t_reset, t_step, t_pred = timings
    telemetry = aggregate_telemetry(
        [
            (("env.reset", "env", "rpc.total", "ms"), t_reset),
            (("env.step", "env", "rpc.total", "ms"), t_step),
            (("model.predict", "runner", "rpc.total", "ms"), t_pred),
        ],
        1e3,
    )
    return finish_run(drive, done, telemetry, observers, error)


def play_episode(
    drive: Drive,
    context: RunContext,
    i: int,
    seed: int | None,
    trial: int,
    count: int,
    cap: int,
    max_secs: float | None,
    observers: ObserverList,
    timings: tuple[Timings, Timings, Timings],
) -> Episode:
    """Reset, then predict and step until the episode ends or a cap hits; the episode's books.

    The hot path binds every callable to a local; unless an observer watches steps it
    makes no observer call per step, and it builds a ``StepEvent`` only when an observer
    wants one (P-3).
    An episode that left the loop neither terminated nor truncated is marked
    truncated (EVAL-23), as is one an observer ended (the viewer's "end episode").
    """
    perf = time.perf_counter
    t_reset, t_step, t_pred = timings
    predict = drive.route.predict
    env = drive.env
    assert env is not None
    env_step = env.step  # checked as a server checks it when the env is local (SRV-60, CNF-4)
    read = context.read
    stepping = observers.wants_steps  # nobody watches steps: not one observer call per step
    events = observers.wants_events
    t0 = perf()
    obs, info = drive.begin(seed, trial, warn=False)
    episode = drive.episode
    ep_start = episode.start
    t_reset.append(ep_start - t0)
    if observers:
        observers.on_episode_start(i, seed, 0, obs, count)
    steps = 0
    reward = 0.0
    terminated = truncated = False
    pred_s = step_s = 0.0
    last_info = info
    while steps < cap:
        if max_secs is not None and perf() - ep_start >= max_secs:
            break
        t0 = perf()
        action = predict(obs)
        t1 = perf()
        next_obs, r, te, tr, info = env_step(action)
        t2 = perf()
        r = float(r)
        steps += 1
        reward += r
        pred_s += t1 - t0
        step_s += t2 - t1
        t_step.append(t2 - t1)
        t_pred.append(t1 - t0)
        last_info = info
        skip = False
        if stepping:
            event = None
            if events:
                te, tr = bool(te), bool(tr)
                capped = steps >= cap and not te and not tr  # DELTA-46
                event = StepEvent(
                    i,
                    seed,
                    steps - 1,
                    obs,
                    action,
                    r,
                    te,
                    tr or capped,
                    info,
                    (t1 - t0) * 1e3,
                    (t2 - t1) * 1e3,
                    functools.partial(read, obs),
                )
            skip = observers.on_step(
                DriveStep(
                    0, event, next_obs, steps, reward, r, action, (t1 - t0) * 1e3, (t2 - t1) * 1e3
                )
            )
        obs = next_obs
        if te or tr:
            terminated, truncated = bool(te), bool(tr)
            break
        if skip:
            break  # an observer's "end episode" (the viewer's): truncated below (EVAL-23)
    if not terminated and not truncated:
        truncated = True  # EVAL-23: a cap, the built-in bound or an observer ended it
    episode.steps, episode.reward = steps, reward
    episode.terminated, episode.truncated = terminated, truncated
    episode.last_info = last_info
    episode.pred_s, episode.step_s = pred_s, step_s
    return episode
