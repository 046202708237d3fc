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

from ._hooks import RunHooks, StepEvent
from ._results import EpisodeResult, RunResult, aggregate_telemetry, success_from_info

if TYPE_CHECKING:
    from ._session import Session

__all__ = ["BUILTIN_STEP_BOUND", "episode_budget", "run_session", "validate_caps"]

#: The built-in per-episode step bound when no ``max_episode_steps`` is given (EVAL-22).
BUILTIN_STEP_BOUND = 100_000


def _check_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def episode_budget(
    seeds: Sequence[int] | None, max_episodes: int | None, episodes: int | None
) -> tuple[int, list[int]]:
    """The episode count and seed list of a run (EVAL-21, DELTA-39).

    ``max_episodes`` (seed 000) overrides ``len(seeds)``, later episodes unseeded;
    ``episodes`` (0.1.0) must agree with ``len(seeds)``; neither -> ``len(seeds)``
    or 1.

    >>> episode_budget([7, 8], None, None), episode_budget([7], 3, None), episode_budget(None, None, None)
    ((2, [7, 8]), (3, [7]), (1, []))
    """
    seed_list: list[int] = []
    if seeds is not None:
        if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
            raise TypeError(f"seeds must be a sequence of ints, got {type(seeds).__name__}")
        for s in seeds:
            if isinstance(s, bool) or (not isinstance(s, int) and not hasattr(s, "__index__")):
                raise TypeError(f"seeds must be ints, got {s!r}")
        seed_list = [int(s) for s in seeds]
    if max_episodes is not None and episodes is not None and max_episodes != episodes:
        raise ValueError(
            f"max_episodes={max_episodes} and episodes={episodes} disagree; pass one of them "
            "(episodes= is the 0.1.0 spelling of max_episodes=)"
        )
    if episodes is not None:
        count = _check_count("episodes", episodes)
        if seeds is not None and count != len(seed_list):
            raise ValueError(
                f"episodes={count} does not match len(seeds)={len(seed_list)}: give one seed per "
                "episode, or pass max_episodes= to run extra unseeded episodes"
            )
        return count, seed_list
    if max_episodes is not None:
        return _check_count("max_episodes", max_episodes), seed_list
    if seeds is not None:
        return len(seed_list), seed_list
    return 1, seed_list


def validate_caps(
    max_episode_steps: int | None, max_episode_seconds: float | None, trial_index_base: int
) -> None:
    """Validate the per-episode caps before connecting (EVAL-20, DELTA-47)."""
    if max_episode_steps is not None:
        if isinstance(max_episode_steps, bool) or not isinstance(max_episode_steps, int):
            raise TypeError(f"max_episode_steps must be an int, got {type(max_episode_steps).__name__}")
        if max_episode_steps < 1:
            raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
    if max_episode_seconds is not None:
        if isinstance(max_episode_seconds, bool) or not isinstance(max_episode_seconds, (int, float)):
            raise TypeError(f"max_episode_seconds must be a number, got {type(max_episode_seconds).__name__}")
        if not max_episode_seconds > 0:
            raise ValueError(f"max_episode_seconds must be > 0, got {max_episode_seconds}")
    _check_count("trial_index_base", trial_index_base)


def finish_run(
    sess: Session[Any, Any],
    episodes: list[EpisodeResult],
    telemetry: Any,
    hooks: RunHooks | None,
    error: BaseException | None,
) -> RunResult:
    """End the open episode, fire ``on_run_end`` once and re-raise the first error (EVAL-27)."""
    try:
        sess._end_open_episode()
    except BaseException as exc:
        error = error or exc
    advisories: tuple[Any, ...] = ()
    adapter = getattr(sess._route, "adapter", None)
    if adapter is not None:
        adv = getattr(adapter, "advisories", ())
        try:
            advisories = tuple(adv() if callable(adv) else adv)
        except Exception:
            advisories = ()
    result = RunResult(tuple(episodes), telemetry, advisories)
    if hooks is not None:
        try:
            hooks.on_run_end(result)
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error
    return result


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
        from ._vector import run_vector

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
    t_reset: list[float] = []
    t_step: list[float] = []
    t_pred: list[float] = []
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
            (("env.reset", "env", "rpc.total", "ms"), [x * 1e3 for x in t_reset]),
            (("env.step", "env", "rpc.total", "ms"), [x * 1e3 for x in t_step]),
            (("model.predict", "runner", "rpc.total", "ms"), [x * 1e3 for x in t_pred]),
        ]
    )
    return finish_run(sess, done, telemetry, hooks, error)
