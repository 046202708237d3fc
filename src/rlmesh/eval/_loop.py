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
from typing import TYPE_CHECKING, Any

from ._budget import BUILTIN_STEP_BOUND, episode_budget, finish_run, validate_caps
from ._hooks import RunHooks, StepEvent
from ._results import EpisodeResult, RunResult, aggregate_telemetry, success_from_info
from ._stats import Timings
from ._vector import run_vector

if TYPE_CHECKING:
    from ._session import Session

__all__ = ["BUILTIN_STEP_BOUND", "run_session"]

def run_session(
    sess: Session[Any, Any],
    *,
    seeds: Sequence[int] | None,
    max_episodes: int | None,
    episodes: int | None,
    max_episode_steps: int | None,
    max_episode_seconds: float | None,
    hooks: RunHooks | None,
    trial_index_base: int,
) -> RunResult:
    """Implementation of :meth:`Session.run` (single env; vector envs go to ``_vector``)."""
    sess._ensure_open()
    count, seed_list = episode_budget(seeds, max_episodes, episodes)
    validate_caps(max_episode_steps, max_episode_seconds, trial_index_base)
    if hooks is not None and not isinstance(hooks, RunHooks):
        missing = [n for n in ("on_step", "on_run_end") if not callable(getattr(hooks, n, None))]
        if missing:
            raise TypeError(f"hooks must be a rlmesh.RunHooks, got {type(hooks).__name__}")
    if count == 0:  # EVAL-21: empty result, no env reset required
        return finish_run(sess, [], (), hooks, None)
    conn = sess._connect()
    if conn.is_vector:
        return run_vector(
            sess,
            conn,
            count=count,
            seed_list=seed_list,
            max_episode_steps=max_episode_steps,
            max_episode_seconds=max_episode_seconds,
            hooks=hooks,
            trial_index_base=trial_index_base,
        )

    cap = max_episode_steps if max_episode_steps is not None else BUILTIN_STEP_BOUND
    max_secs = None if max_episode_seconds is None else float(max_episode_seconds)
    perf = time.perf_counter
    route = sess._route
    predict = route.predict
    env_step = sess._step  # checked as a server checks it when the env is local (SRV-60, CNF-4)
    read = sess.read
    view = sess._attach_view()  # the live viewer, hooked into this loop once (VIEW-6); None when off
    done: list[EpisodeResult] = []
    t_reset, t_step, t_pred = Timings(), Timings(), Timings()  # bounded memory (issue 28)
    error: BaseException | None = None
    try:
        if hooks is not None:
            hooks.on_run_start(sess)
        for i in range(count):
            seed = seed_list[i] if i < len(seed_list) else None
            trial = trial_index_base + i
            t0 = perf()
            obs, info = sess._begin(conn, seed, trial, warn=False)
            ep_start = perf()
            t_reset.append(ep_start - t0)
            if hooks is not None:
                hooks.on_episode_start(episode=i, seed=seed)
            if view is not None:
                view.begin_episode(i, seed, count, obs)
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
                if hooks is not None:
                    te, tr = bool(te), bool(tr)
                    capped = steps >= cap and not te and not tr  # DELTA-46
                    hooks.on_step(
                        StepEvent(
                            i, seed, steps - 1, obs, action, r, te, tr or capped, info,
                            (t1 - t0) * 1e3, (t2 - t1) * 1e3, functools.partial(read, obs),
                        )
                    )
                obs = next_obs
                skip = view is not None and view.step(obs, steps, reward, r, (t1 - t0) * 1e3, (t2 - t1) * 1e3, action)
                if te or tr:
                    terminated, truncated = bool(te), bool(tr)
                    break
                if skip:
                    break  # the viewer's "end episode": truncated below (EVAL-23)
            if not terminated and not truncated:
                truncated = True  # EVAL-23: a cap or the built-in bound ended it
            duration = perf() - ep_start
            sess._steps, sess._reward = steps, reward
            sess._terminated, sess._truncated = terminated, truncated
            sess._last_info = last_info
            result = EpisodeResult(
                i,
                seed,
                steps,
                reward,
                terminated,
                truncated,
                success_from_info(last_info),
                duration,
                pred_s * 1e3 / steps if steps else 0.0,
                step_s * 1e3 / steps if steps else 0.0,
                trial,
            )
            done.append(result)
            if view is not None:
                view.end_episode(result)
            if hooks is not None:
                hooks.on_episode_end(result)
    except BaseException as exc:
        error = exc
    telemetry = aggregate_telemetry(
        [
            (("env.reset", "env", "rpc.total", "ms"), t_reset),
            (("env.step", "env", "rpc.total", "ms"), t_step),
            (("model.predict", "runner", "rpc.total", "ms"), t_pred),
        ],
        1e3,
    )
    return finish_run(sess, done, telemetry, hooks, error)
