"""The vector driver behind ``Session.run`` for ``num_envs``-lane envs (EVAL-60..69, DELTA-39, DELTA-49).

All lanes step together; lanes that need a model forward this step are fused into
ONE call of the batched corner when the model has one (EVAL-69: one forward per
step, or per ``h`` steps when chunking), else the model is called per lane. Each
lane keeps its own episode accounting, replay queue and context.

Resets, by what the env allows:

- **driver-owned** (a Gymnasium ``VectorEnv``, which resets chosen lanes with
  ``options={"reset_mask": ...}``): a finished lane is reset at once with the next
  episode's seed, so per-episode seeds, step/time caps and trials all work (O-2);
- **NextStep autoreset** (e.g. a ``RemoteVectorEnv``): the env resets a finished lane
  on the following step and ignores that lane's action; only the first
  ``num_envs`` episodes can be seeded, and caps are refused;
- **SameStep autoreset**: the observation returned with ``done`` already starts the
  next episode.

The budget counts *started* episodes, so the result holds exactly ``count``
episodes, in order of completion; lanes rolled past the budget run unscored and
hooks never see them (DELTA-39).
"""

from __future__ import annotations

import functools
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..models._values import get_bridge, to_numpy_tree
from ._hooks import RunHooks, StepEvent
from ._loop import BUILTIN_STEP_BOUND, finish_run
from ._policy import LocalRoute, new_episode_id
from ._results import EpisodeResult, RunResult, aggregate_telemetry, success_from_info

if TYPE_CHECKING:
    from ._session import Session
    from ._targets import EnvConn

__all__ = ["lane_info", "run_vector"]

_NP = get_bridge("numpy")


def lane_info(info: Mapping[str, Any] | None, lane: int, n: int) -> dict[str, Any]:
    """One lane's view of a batched vector info dict (gymnasium ``key`` / ``_key`` mask layout)."""
    if not info:
        return {}
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key.startswith("_"):
            continue
        mask = info.get("_" + key)
        if mask is not None and not bool(np.asarray(mask)[lane]):
            continue
        if isinstance(value, Mapping):
            out[key] = lane_info(value, lane, n)
        elif isinstance(value, (np.ndarray, list, tuple)) and len(value) == n:
            out[key] = value[lane]
        else:
            out[key] = value
    return out


class _Lanes:
    """Per-lane episode state (parallel lists; the lane count is small)."""

    def __init__(self, n: int) -> None:
        self.ep = [-1] * n
        self.seed: list[int | None] = [None] * n
        self.trial: list[int | None] = [None] * n
        self.eid = [""] * n
        self.steps = [0] * n
        self.reward = [0.0] * n
        self.pred_s = [0.0] * n
        self.step_s = [0.0] * n
        self.start = [0.0] * n
        self.rolling = [False] * n
        self.queue: list[deque[Any]] = [deque() for _ in range(n)]
        self.last_action: list[Any] = [None] * n


def _refuse(msg: str) -> None:
    raise ValueError(f"invalid vector run: {msg}")


def run_vector(
    sess: Session[Any, Any],
    conn: EnvConn,
    *,
    count: int,
    seed_list: list[int],
    max_episode_steps: int | None,
    max_episode_seconds: float | None,
    hooks: RunHooks | None,
    trial_index_base: int,
) -> RunResult:
    """Drive all lanes of a vector env until ``count`` scored episodes completed."""
    n = conn.num_envs
    how = conn.per_lane_reset
    needs_owned = (
        (len(seed_list) > n and count > n)
        or max_episode_steps is not None
        or max_episode_seconds is not None
        or bool(trial_index_base)
    )
    if not how and needs_owned and getattr(conn, "next_step_indices", False):
        how = "indices"  # a NEXT_STEP lanes endpoint resets single lanes (issue 12); refused below if not
    owned = bool(how)
    mode = "owned" if owned else conn.autoreset_mode
    unowned_mode = conn.autoreset_mode

    def refuse_unowned() -> None:
        """The checks for an env that resets its own lanes (up front, or when a lane reset is refused)."""
        m = unowned_mode
        if m == "Disabled":
            _refuse(
                f"the env reports num_envs={n} with autoreset disabled and cannot reset single "
                "lanes; use a gymnasium VectorEnv (reset_mask) or an autoresetting env"
            )
        if len(seed_list) > n and count > n:
            _refuse(
                f"{len(seed_list)} seeds for a {m} autoreset env with num_envs={n}: only the first "
                f"{n} episodes start at an explicit reset; pass at most {n} seeds, drive a "
                "gymnasium VectorEnv that supports per-lane resets, or serve independent lanes "
                "(rlmesh serve ENV --num-envs N)"
            )
        if max_episode_steps is not None or max_episode_seconds is not None:
            _refuse(
                f"step/time caps need driver-owned per-lane resets, which this {m} autoreset env "
                f"with num_envs={n} does not offer; cap the env itself (e.g. TimeLimit) or serve "
                "independent lanes (rlmesh serve ENV --num-envs N)"
            )
        if trial_index_base:
            _refuse(
                f"trial_index_base={trial_index_base} needs driver-owned resets; this env autoresets"
            )

    if not owned:
        refuse_unowned()
    cap = max_episode_steps if max_episode_steps is not None else BUILTIN_STEP_BOUND
    max_secs = None if max_episode_seconds is None else float(max_episode_seconds)
    route = sess._route
    local = isinstance(route, LocalRoute)
    served = hasattr(route, "predict_lane")  # a RemoteModel route: one model lane per env lane
    env = conn.env
    perf = time.perf_counter
    lanes = _Lanes(n)
    done: list[EpisodeResult] = []
    t_step: list[float] = []
    t_pred: list[float] = []
    started = 0
    error: BaseException | None = None
    view = sess._attach_view()  # the live viewer (VIEW-6): fed once per vector step, every lane

    def assign(lane: int) -> None:
        nonlocal started
        if started < count:
            k = started
            started += 1
            lanes.ep[lane] = k
            lanes.seed[lane] = seed_list[k] if k < len(seed_list) else None
            lanes.trial[lane] = trial_index_base + k if owned else None
        else:
            lanes.ep[lane], lanes.seed[lane], lanes.trial[lane] = -1, None, None

    def begin(lane: int) -> None:
        eid = new_episode_id()
        lanes.eid[lane] = eid
        lanes.steps[lane] = 0
        lanes.reward[lane] = 0.0
        lanes.pred_s[lane] = lanes.step_s[lane] = 0.0
        lanes.queue[lane].clear()
        lanes.start[lane] = perf()
        if local:
            if route.any_ctx:
                route.store.begin(eid, lanes.seed[lane])
            adapter = route.adapters[lane]
            if adapter is not None:
                adapter.reset()
        elif served:
            route.begin_episode(eid, lanes.seed[lane], lane)
        if hooks is not None and lanes.ep[lane] >= 0:
            hooks.on_episode_start(episode=lanes.ep[lane], seed=lanes.seed[lane])
        if view is not None and lane == view.selected_lane and lanes.ep[lane] >= 0:
            view.begin_episode(lanes.ep[lane], lanes.seed[lane], count, pending_obs[0])

    def finish(lane: int, terminated: bool, truncated: bool, info: Mapping[str, Any]) -> None:
        if local and lanes.eid[lane]:
            eid, lanes.eid[lane] = lanes.eid[lane], ""
            route.end_episode(eid)
        elif served and lanes.eid[lane]:
            eid, lanes.eid[lane] = lanes.eid[lane], ""
            route.end_episode(eid, lane)
        k = lanes.ep[lane]
        if k < 0:
            return
        steps = lanes.steps[lane]
        result = EpisodeResult(
            k,
            lanes.seed[lane],
            steps,
            lanes.reward[lane],
            terminated,
            truncated if (terminated or truncated) else True,
            success_from_info(info),
            perf() - lanes.start[lane],
            lanes.pred_s[lane] * 1e3 / steps if steps else 0.0,
            lanes.step_s[lane] * 1e3 / steps if steps else 0.0,
            lanes.trial[lane],
        )
        done.append(result)
        if view is not None:
            view.end_episode(result)
        if hooks is not None:
            hooks.on_episode_end(result)

    pending_obs: list[Any] = [None]  # the observation a lane's begin() shows in the viewer

    try:
        if hooks is not None:
            hooks.on_run_start(sess)
        for lane in range(n):
            assign(lane)
        seeds0 = [lanes.seed[i] for i in range(n)]
        ret = env.reset(seed=seeds0) if any(s is not None for s in seeds0) else env.reset()
        obs, _info = ret if isinstance(ret, tuple) and len(ret) == 2 else (ret, {})
        pending_obs[0] = obs
        if local and conn.remote:
            route.env_plain = not isinstance(obs, np.ndarray) and _has_plain(obs)
        for lane in range(n):
            begin(lane)
        while len(done) < count:
            now = perf()
            to_reset: list[int] = []
            if max_secs is not None:
                for lane in range(n):
                    if lanes.ep[lane] >= 0 and not lanes.rolling[lane] and now - lanes.start[lane] >= max_secs:
                        finish(lane, False, True, {})
                        to_reset.append(lane)
                if to_reset:
                    obs = _reset_lanes(env, how, n, to_reset, lanes, assign, begin, refuse_unowned)
                    if len(done) >= count:
                        break
            t0 = perf()
            action = _predict(route, local, conn, obs, lanes, n)
            t1 = perf()
            obs2, rew, term, trunc, info = env.step(action)
            t2 = perf()
            t_pred.append(t1 - t0)
            t_step.append(t2 - t1)
            rew = np.asarray(rew, dtype=np.float64).reshape(n)
            term = np.asarray(term, dtype=bool).reshape(n)
            trunc = np.asarray(trunc, dtype=bool).reshape(n)
            per_obs = None
            if hooks is not None:
                obs_np = obs if not (local and route.env_plain) else to_numpy_tree(obs)
                per_obs = _NP.tree_unstack(obs_np, n)
            to_reset = []
            for lane in range(n):
                if lanes.rolling[lane]:  # NextStep: this step was the env's reset of the lane
                    lanes.rolling[lane] = False
                    assign(lane)
                    begin(lane)
                    continue
                r = float(rew[lane])
                te, tr = bool(term[lane]), bool(trunc[lane])
                lanes.steps[lane] += 1
                lanes.reward[lane] += r
                lanes.pred_s[lane] += t1 - t0
                lanes.step_s[lane] += t2 - t1
                capped = lanes.steps[lane] >= cap and not te and not tr
                if per_obs is not None and hooks is not None and lanes.ep[lane] >= 0:
                    hooks.on_step(
                        StepEvent(
                            lanes.ep[lane], lanes.seed[lane], lanes.steps[lane] - 1,
                            per_obs[lane], lanes.last_action[lane], r, te,
                            tr or capped, lane_info(info, lane, n), (t1 - t0) * 1e3,
                            (t2 - t1) * 1e3, functools.partial(sess.read, per_obs[lane]),
                        )
                    )
                if te or tr or capped:
                    linfo = lane_info(info, lane, n)
                    final = linfo.get("final_info")  # SameStep autoreset keeps the ended step's info here
                    if isinstance(final, Mapping):
                        linfo = dict(final)
                    if mode == "SameStep":
                        finish(lane, te, tr, linfo)
                        assign(lane)
                        begin(lane)
                    else:
                        finish(lane, te, tr or capped, linfo)
                        if owned:
                            to_reset.append(lane)
                        else:
                            lanes.rolling[lane] = True
            obs = obs2
            pending_obs[0] = obs
            if view is not None:
                f = view.selected_lane if view.selected_lane < n else 0
                if view.step(obs, lanes.steps[f], lanes.reward[f], float(rew[f]), (t1 - t0) * 1e3, (t2 - t1) * 1e3) and owned and lanes.ep[f] >= 0 and f not in to_reset:
                    finish(f, False, True, {})  # the viewer's "end episode" on the watched lane
                    to_reset.append(f)
            if to_reset and len(done) < count:
                obs = _reset_lanes(env, how, n, to_reset, lanes, assign, begin, refuse_unowned)
    except BaseException as exc:
        error = exc
    if local or served:  # end every in-flight lane episode (the model's hook) on the way out
        for lane in range(n):
            if lanes.eid[lane]:
                try:
                    if served:
                        route.end_episode(lanes.eid[lane], lane)
                    else:
                        route.end_episode(lanes.eid[lane])
                except BaseException as exc:
                    error = error or exc
                lanes.eid[lane] = ""
    telemetry = aggregate_telemetry(
        [
            (("env.step", "env", "rpc.total", "ms"), [x * 1e3 for x in t_step]),
            (("model.predict", "runner", "rpc.total", "ms"), [x * 1e3 for x in t_pred]),
        ]
    )
    return finish_run(sess, done, telemetry, hooks, error)


def _has_plain(tree: Any) -> bool:
    from ..tensor import Tensor

    if isinstance(tree, Tensor):
        return True
    if isinstance(tree, Mapping):
        return any(_has_plain(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(_has_plain(v) for v in tree)
    return False


def _reset_lanes(
    env: Any, how: str, n: int, which: list[int], lanes: _Lanes, assign: Any, begin: Any, refuse: Any
) -> Any:
    """Driver-owned reset of ``which`` lanes: gymnasium ``reset_mask`` or client ``env_indices``.

    ``refuse()`` raises the autoresetting-env refusal when the endpoint answers that it
    cannot reset single lanes (a served NEXT_STEP Gymnasium vector env)."""
    for lane in which:
        assign(lane)
    from ..errors import Unsupported

    try:
        if how == "mask":
            mask = np.zeros(n, dtype=np.bool_)
            mask[which] = True
            seeds = [lanes.seed[i] if mask[i] else None for i in range(n)]
            ret = env.reset(seed=seeds, options={"reset_mask": mask})
        else:
            seeds = [lanes.seed[i] for i in which]
            ret = env.reset(seed=seeds if any(s is not None for s in seeds) else None, env_indices=which)
    except Unsupported:  # e.g. rlmesh.gymnasium on a served NEXT_STEP Gymnasium vector env
        refuse()
        raise
    obs = ret[0] if isinstance(ret, tuple) and len(ret) == 2 else ret
    for lane in which:
        begin(lane)
    return obs


def _predict(route: Any, local: bool, conn: EnvConn, obs: Any, lanes: _Lanes, n: int) -> Any:
    """One batched env action for all lanes (EVAL-61..63, MOD-35)."""
    if hasattr(route, "predict_lane"):  # a served model: one request per lane that needs an action
        per_obs = _NP.tree_unstack(to_numpy_tree(obs), n)
        for lane in range(n):
            if not lanes.rolling[lane]:
                lanes.last_action[lane] = route.predict_lane(per_obs[lane], lane)
            elif lanes.last_action[lane] is None:
                lanes.last_action[lane] = conn.single_action_space.sample()
        return _NP.tree_stack(lanes.last_action)
    if not local:  # RANDOM_SAMPLE: one sample of the per-lane action space per lane
        space = conn.single_action_space
        for lane in range(n):
            lanes.last_action[lane] = space.sample()
        return _NP.tree_stack(lanes.last_action)
    cs = route.corners
    bridge = route.bridge
    h = route.horizon
    need = [i for i in range(n) if not lanes.rolling[i] and not lanes.queue[i]]
    chunked = h > 1
    batched = (cs.predict_chunk_batch if chunked else None) or (None if chunked and cs.predict_chunk else cs.predict_batch)
    per_lane_actions: list[Any] = [None] * n
    if batched is None and not chunked and route.spec_less:
        # Spec-less predict-only route: the whole batch goes to predict (DELTA-49).
        x = obs if route.identity_decode and not route.env_plain else bridge.decode(to_numpy_tree(obs))
        ctx = route.store.next("") if route.wants_ctx else None
        out = cs.predict(x, ctx)
        try:
            lanes_out = bridge.tree_unstack(out, n)
        except (ValueError, TypeError):
            raise TypeError(
                f"predict received a batch of {n} observations from a vector env and must return "
                f"{n} actions (a leading lane axis); define predict_batch for batched inference, "
                "or serve the env as lanes"
            ) from None
        for lane in range(n):
            lanes.last_action[lane] = lanes_out[lane]
        return bridge.encode(out) if not route.identity_decode else out
    obs_np = to_numpy_tree(obs) if route.env_plain else obs
    if need:
        inputs: list[Any] = []
        if batched is not None and len(need) == n and route.spec_less and route.identity_decode:
            inputs_batch = obs_np  # fast path: the env's batch is the model's batch (EVAL-63)
        else:
            per_obs = _NP.tree_unstack(obs_np, n)
            inputs = [route.model_input(per_obs[i], i) for i in need]
            inputs_batch = bridge.tree_stack(inputs) if batched is not None else None
        if batched is not None:
            ctxs = [route.store.next(lanes.eid[i]) for i in need] if route.cs_wants(chunked, True) else None
            out = batched(inputs_batch, h, ctxs) if chunked else batched(inputs_batch, ctxs)
            outs = bridge.tree_unstack(out, len(need))
        else:
            outs = []
            for j, i in enumerate(need):
                ctx = route.store.next(lanes.eid[i]) if route.cs_wants(chunked, False) else None
                fn = cs.predict_chunk if chunked else cs.predict
                outs.append(fn(inputs[j], h, ctx) if chunked else fn(inputs[j], ctx))
        for j, i in enumerate(need):
            if chunked:
                frames = route.chunk_frames(outs[j])
                lanes.queue[i].extend(frames[1:])
                per_lane_actions[i] = route.env_action(frames[0], i)
            else:
                per_lane_actions[i] = route.env_action(outs[j], i)
    replay_obs: list[Any] | None = None
    for i in range(n):
        if per_lane_actions[i] is None:
            if lanes.queue[i] and not lanes.rolling[i]:
                adapter = route.adapters[i]
                if adapter is not None:  # DELTA-69: keep frame windows consecutive
                    if replay_obs is None:
                        replay_obs = _NP.tree_unstack(obs_np, n)
                    adapter.observe(replay_obs[i])
                per_lane_actions[i] = route.env_action(lanes.queue[i].popleft(), i)
            else:  # a rolling lane: the env ignores its action
                per_lane_actions[i] = lanes.last_action[i]
                if per_lane_actions[i] is None:
                    per_lane_actions[i] = conn.single_action_space.sample()
        lanes.last_action[i] = per_lane_actions[i]
    return _NP.tree_stack(per_lane_actions)
