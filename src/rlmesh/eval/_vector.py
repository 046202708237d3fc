"""The vector driver behind ``Session.run`` for ``num_envs``-lane envs (EVAL-60..69, DELTA-39, DELTA-49).

All lanes step together; lanes that need a model forward this step are fused into
ONE call of the batched corner when the model has one (EVAL-69: one forward per
step, or per ``h`` steps when chunking), else the model is called per lane. Each
lane keeps its own episode accounting, replay queue and context.

Resets, by what the env allows -- one loop each, reading top to bottom:

- **driver-owned** (:func:`_drive_owned`; a Gymnasium ``VectorEnv``, which resets
  chosen lanes with ``options={"reset_mask": ...}``, or a lanes endpoint resetting
  ``env_indices``): a finished lane is reset at once with the next episode's seed,
  so per-episode seeds, step/time caps and trials all work (O-2);
- **NextStep autoreset** (:func:`_drive_next_step`, e.g. a served Gymnasium vector
  env): the env resets a finished lane on the following step and ignores that
  lane's action; only the first ``num_envs`` episodes can be seeded, and caps are
  refused. That step must pay reward 0 and not be done (AR-6), checked exactly as
  a server checks it;
- **SameStep autoreset** (:func:`_drive_same_step`): the observation returned with
  ``done`` already starts the next episode.

Env results are read through ``rlmesh._envkit`` (classify, results, checks): the same
normalisation, lane-info slicing and final-info rule as the server's driver, and
for an in-process env the same checks of actions, observations and info under
the same ``RLMESH_VALIDATION_POLICY`` (SRV-60, CNF-4: ``Session._checks``).

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

from .._envkit.checks import env_failure
from .._envkit.results import (
    lane_final_info,
    lane_info,
    next_step_violation,
    normalize_reset,
    read_vector_step,
)
from ..errors import EnvironmentException, Unsupported
from ..models._route import LocalRoute, new_episode_id
from ..models._values import get_bridge, to_numpy_tree
from ..tensor import Tensor
from ._budget import BUILTIN_STEP_BOUND, finish_run
from ._hooks import RunHooks, StepEvent
from ._results import EpisodeResult, RunResult, aggregate_telemetry, success_from_info
from ._stats import Timings

if TYPE_CHECKING:
    from ._session import Session
    from ._targets import EnvConn

__all__ = ["lane_info", "run_vector"]

_NP = get_bridge("numpy")


UNSCORED = -1  # the episode index of a lane running past the budget (DELTA-39)


class _Lanes:
    """Per-lane episode state (parallel lists; the lane count is small).

    ``ep[i]`` is the lane's episode index in the budget, :data:`UNSCORED` while it
    runs an episode past the budget; ``rolling[i]`` marks a NextStep lane whose
    next step is the env's autoreset of it.
    """

    def __init__(self, n: int) -> None:
        self.ep = [UNSCORED] * n
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


def _refuse_unowned(
    mode: str,
    n: int,
    *,
    count: int,
    seed_list: list[int],
    capped: bool,
    trial_index_base: int,
) -> None:
    """The checks for an env that resets its own lanes (up front, or when a lane reset is refused)."""
    if mode == "Disabled":
        _refuse(
            f"the env reports num_envs={n} with autoreset disabled and cannot reset single "
            "lanes; use a gymnasium VectorEnv (reset_mask) or an autoresetting env"
        )
    if len(seed_list) > n and count > n:
        _refuse(
            f"{len(seed_list)} seeds for a {mode} autoreset env with num_envs={n}: only the first "
            f"{n} episodes start at an explicit reset; pass at most {n} seeds, drive a "
            "gymnasium VectorEnv that supports per-lane resets, or serve independent lanes "
            "(rlmesh serve ENV --num-envs N)"
        )
    if capped:
        _refuse(
            f"step/time caps need driver-owned per-lane resets, which this {mode} autoreset env "
            f"with num_envs={n} does not offer; cap the env itself (e.g. TimeLimit) or serve "
            "independent lanes (rlmesh serve ENV --num-envs N)"
        )
    if trial_index_base:
        _refuse(f"trial_index_base={trial_index_base} needs driver-owned resets; this env autoresets")


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
    """Drive all lanes of a vector env until ``count`` scored episodes completed.

    Picks who resets finished lanes -- the driver (:func:`_drive_owned`), or the env
    by NextStep (:func:`_drive_next_step`) or SameStep (:func:`_drive_same_step`)
    autoreset -- and runs that mode's loop.
    """
    n = conn.num_envs
    how = conn.per_lane_reset
    capped = max_episode_steps is not None or max_episode_seconds is not None
    needs_owned = (len(seed_list) > n and count > n) or capped or bool(trial_index_base)
    if not how and needs_owned and getattr(conn, "autoreset_indices", False):
        how = "indices"  # a served lanes or Gymnasium vector endpoint resets single lanes (AR-10); refused below if not
    refuse = functools.partial(
        _refuse_unowned,
        conn.autoreset_mode,
        n,
        count=count,
        seed_list=seed_list,
        capped=capped,
        trial_index_base=trial_index_base,
    )
    if not how:
        refuse()
    run = _VectorRun(sess, conn, count, seed_list, hooks, trial_index_base if how else None, max_episode_steps)
    try:
        if hooks is not None:
            hooks.on_run_start(sess)
        run.start()
        if how:
            secs = None if max_episode_seconds is None else float(max_episode_seconds)
            _drive_owned(run, how, secs, refuse)
        elif conn.autoreset_mode == "SameStep":
            _drive_same_step(run)
        else:
            _drive_next_step(run)
    except BaseException as exc:
        run.error = exc
    return run.close()


class _VectorRun:
    """The books of one vector run: lanes, budget, timings, and the per-step chores every mode shares."""

    def __init__(
        self,
        sess: Session[Any, Any],
        conn: EnvConn,
        count: int,
        seed_list: list[int],
        hooks: RunHooks | None,
        trial_index_base: int | None,
        max_episode_steps: int | None,
    ) -> None:
        self.sess = sess
        self.conn = conn
        self.env = conn.env
        self.n = n = conn.num_envs
        self.count = count
        self.seed_list = seed_list
        self.hooks = hooks
        self.trial_base = trial_index_base  # None: the env resets lanes, episodes carry no trial index
        self.cap = max_episode_steps if max_episode_steps is not None else BUILTIN_STEP_BOUND
        self.route = route = sess._route
        self.local = isinstance(route, LocalRoute)
        self.served = hasattr(route, "predict_lane")  # a RemoteModel route: one model lane per env lane
        self.lanes = _Lanes(n)
        self.done: list[EpisodeResult] = []
        self.t_step, self.t_pred = Timings(), Timings()  # bounded memory (issue 28)
        self.started = 0
        self.error: BaseException | None = None
        self.obs: Any = None
        self.last_action: Any = None  # the batch the last step sent (the viewer plots its watched lane)
        self.view = sess._attach_view()  # the live viewer (VIEW-6): fed once per vector step, every lane
        self.checks = sess._checks  # an in-process env's checks (SRV-60, CNF-4); None when remote or "off"

    @property
    def finished(self) -> bool:
        return len(self.done) >= self.count

    def assign(self, lane: int) -> None:
        """Give ``lane`` the next episode of the budget, or mark it unscored past the budget."""
        lanes = self.lanes
        if self.started < self.count:
            k = self.started
            self.started += 1
            lanes.ep[lane] = k
            lanes.seed[lane] = self.seed_list[k] if k < len(self.seed_list) else None
            lanes.trial[lane] = None if self.trial_base is None else self.trial_base + k
        else:
            lanes.ep[lane], lanes.seed[lane], lanes.trial[lane] = UNSCORED, None, None

    def begin(self, lane: int) -> None:
        """The lane's episode starts now: fresh books, model episode hooks, ``on_episode_start``."""
        lanes, route = self.lanes, self.route
        eid = new_episode_id()
        lanes.eid[lane] = eid
        lanes.steps[lane] = 0
        lanes.reward[lane] = 0.0
        lanes.pred_s[lane] = lanes.step_s[lane] = 0.0
        lanes.queue[lane].clear()
        lanes.start[lane] = time.perf_counter()
        if self.local:
            if route.any_ctx:
                route.store.begin(eid, lanes.seed[lane])
            adapter = route.adapters[lane]
            if adapter is not None:
                adapter.reset()
        elif self.served:
            route.begin_episode(eid, lanes.seed[lane], lane)
        if self.hooks is not None and lanes.ep[lane] != UNSCORED:
            self.hooks.on_episode_start(episode=lanes.ep[lane], seed=lanes.seed[lane])
        view = self.view
        if view is not None and lane == view.selected_lane and lanes.ep[lane] != UNSCORED:
            view.begin_episode(lanes.ep[lane], lanes.seed[lane], self.count, self.obs)

    def finish(self, lane: int, terminated: bool, truncated: bool, info: Mapping[str, Any]) -> None:
        """The lane's episode ended: end the model episode; score it when it is in the budget."""
        lanes = self.lanes
        if (self.local or self.served) and lanes.eid[lane]:
            eid, lanes.eid[lane] = lanes.eid[lane], ""
            if self.served:
                self.route.end_episode(eid, lane)
            else:
                self.route.end_episode(eid)
        k = lanes.ep[lane]
        if k == UNSCORED:
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
            time.perf_counter() - lanes.start[lane],
            lanes.pred_s[lane] * 1e3 / steps if steps else 0.0,
            lanes.step_s[lane] * 1e3 / steps if steps else 0.0,
            lanes.trial[lane],
        )
        self.done.append(result)
        if self.view is not None:
            self.view.end_episode(result)
        if self.hooks is not None:
            self.hooks.on_episode_end(result)

    def start(self) -> None:
        """The first full reset: every lane gets an episode of the budget."""
        n = self.n
        for lane in range(n):
            self.assign(lane)
        seeds0 = [self.lanes.seed[i] for i in range(n)]
        ret = self.env.reset(seed=seeds0) if any(s is not None for s in seeds0) else self.env.reset()
        self.obs, info = normalize_reset(ret)
        checks = self.checks
        if checks is not None:
            self.obs = checks.observation(self.obs, "reset")
            # Warnings raised by this reset ride in the reset's info, as in a served reset
            # reply; a run does not surface a vector env's reset info either way.
            checks.local_info(info, "reset")
        if self.local and self.conn.remote:
            self.route.env_plain = not isinstance(self.obs, np.ndarray) and _has_plain(self.obs)
        for lane in range(n):
            self.begin(lane)

    def step(self) -> tuple[Any, Any, Any, dict[str, Any], list[Any] | None, float, float]:
        """Predict and step all lanes; returns ``(reward, terminated, truncated, info, per_lane_obs, pred_s, step_s)``.

        ``per_lane_obs`` (for ``on_step``) is the observation the actions were
        chosen from, split by lane, when hooks are installed. ``self.obs`` becomes
        the env's new observation.
        """
        n, perf = self.n, time.perf_counter
        obs = self.obs
        t0 = perf()
        action = _predict(self.route, self.local, self.conn, obs, self.lanes, n)
        t1 = perf()
        checks = self.checks
        if checks is not None:
            checks.action(action)  # the env gets the batch as the model gave it once it passes
        result = self.env.step(action)
        self.last_action = action
        try:
            obs2, rew, term, trunc, info = read_vector_step(result, n)
        except Exception as exc:  # as the server's driver words a result it cannot read
            raise env_failure("step", exc) from None
        if checks is not None:
            obs2 = checks.observation(obs2, "step")
            info = checks.local_info(info, "step")
        t2 = perf()
        self.t_pred.append(t1 - t0)
        self.t_step.append(t2 - t1)
        per_obs = None
        if self.hooks is not None:
            obs_np = obs if not (self.local and self.route.env_plain) else to_numpy_tree(obs)
            per_obs = _NP.tree_unstack(obs_np, n)
        self.obs = obs2
        return (
            rew,
            term,
            trunc,
            info,
            per_obs,
            t1 - t0,
            t2 - t1,
        )

    def advance(
        self, lane: int, r: float, te: bool, tr: bool, info: dict[str, Any], per_obs: Any, pred_s: float, step_s: float
    ) -> bool:
        """Book one step of a running lane (and ``on_step``); whether its episode ended or hit the cap."""
        lanes = self.lanes
        lanes.steps[lane] += 1
        lanes.reward[lane] += r
        lanes.pred_s[lane] += pred_s
        lanes.step_s[lane] += step_s
        capped = lanes.steps[lane] >= self.cap and not te and not tr
        hooks = self.hooks
        if per_obs is not None and hooks is not None and lanes.ep[lane] != UNSCORED:
            hooks.on_step(
                StepEvent(
                    lanes.ep[lane], lanes.seed[lane], lanes.steps[lane] - 1,
                    per_obs[lane], lanes.last_action[lane], r, te,
                    tr or capped, lane_info(info, lane, self.n), pred_s * 1e3,
                    step_s * 1e3, functools.partial(self.sess.read, per_obs[lane]),
                )
            )
        return te or tr or capped

    def feed_view(self, rew: Any, pred_s: float, step_s: float) -> int | None:
        """Feed the live viewer once per vector step; the watched lane when the viewer asked to end its episode."""
        view = self.view
        if view is None:
            return None
        f = view.selected_lane if view.selected_lane < self.n else 0
        lanes = self.lanes
        action = _lane_action(self.last_action, f)  # the watched lane's action, for the page's action plot
        skip = view.step(self.obs, lanes.steps[f], lanes.reward[f], float(rew[f]), pred_s * 1e3, step_s * 1e3, action)
        return f if skip and lanes.ep[f] != UNSCORED else None

    def close(self) -> RunResult:
        """End every in-flight lane episode (the model's hook), then the run's result."""
        lanes, route = self.lanes, self.route
        if self.local or self.served:
            for lane in range(self.n):
                if lanes.eid[lane]:
                    try:
                        if self.served:
                            route.end_episode(lanes.eid[lane], lane)
                        else:
                            route.end_episode(lanes.eid[lane])
                    except BaseException as exc:
                        self.error = self.error or exc
                    lanes.eid[lane] = ""
        telemetry = aggregate_telemetry(
            [
                (("env.step", "env", "rpc.total", "ms"), self.t_step),
                (("model.predict", "runner", "rpc.total", "ms"), self.t_pred),
            ],
            1e3,
        )
        return finish_run(self.sess, self.done, telemetry, self.hooks, self.error)


def _lane_action(action: Any, lane: int) -> Any:
    """Lane ``lane`` of a batched action tree (numpy leaves), or None when it cannot be cut."""
    if action is None:
        return None
    try:
        tree = to_numpy_tree(action)
        if isinstance(tree, Mapping):
            return {k: np.asarray(v)[lane] for k, v in tree.items()}
        if isinstance(tree, tuple):
            return tuple(np.asarray(v)[lane] for v in tree)
        return np.asarray(tree)[lane]
    except Exception:
        return None


def _drive_owned(run: _VectorRun, how: str, max_secs: float | None, refuse: Any) -> None:
    """Driver-owned resets: a lane that ends (or runs out of time) is reset at once with its next seed."""
    lanes, n = run.lanes, run.n
    while not run.finished:
        if max_secs is not None:
            now = time.perf_counter()
            expired = [
                lane for lane in range(n)
                if lanes.ep[lane] != UNSCORED and now - lanes.start[lane] >= max_secs
            ]
            for lane in expired:
                run.finish(lane, False, True, {})
            if expired:
                _reset_lanes(run, how, expired, refuse)
                if run.finished:
                    break
        rew, term, trunc, info, per_obs, pred_s, step_s = run.step()
        ended: list[int] = []
        for lane in range(n):
            te, tr = bool(term[lane]), bool(trunc[lane])
            if run.advance(lane, float(rew[lane]), te, tr, info, per_obs, pred_s, step_s):
                run.finish(lane, te, True if not te else tr, lane_final_info(info, lane, n))
                ended.append(lane)
        watched = run.feed_view(rew, pred_s, step_s)
        if watched is not None and watched not in ended:
            run.finish(watched, False, True, {})  # the viewer's "end episode" on the watched lane
            ended.append(watched)
        if ended and not run.finished:
            _reset_lanes(run, how, ended, refuse)


def _drive_next_step(run: _VectorRun) -> None:
    """NextStep autoreset: the step after a lane ends is the env's reset of it (reward 0, not done, AR-6).

    The env ignores that lane's action; the observation it returns starts the lane's
    next episode. An env that pays reward or reports done on that step breaks its
    contract: the run fails the way a served endpoint does (``[INTERNAL]``).
    """
    lanes, n = run.lanes, run.n
    while not run.finished:
        rew, term, trunc, info, per_obs, pred_s, step_s = run.step()
        for lane in range(n):
            if lanes.rolling[lane]:
                if rew[lane] != 0 or term[lane] or trunc[lane]:
                    raise EnvironmentException(
                        f"step failed: {next_step_violation(lane)}", code="INTERNAL", op="step", recoverable=False
                    )
                lanes.rolling[lane] = False
                run.assign(lane)
                run.begin(lane)
                continue
            te, tr = bool(term[lane]), bool(trunc[lane])
            if run.advance(lane, float(rew[lane]), te, tr, info, per_obs, pred_s, step_s):
                run.finish(lane, te, True if not te else tr, lane_final_info(info, lane, n))
                lanes.rolling[lane] = True
        run.feed_view(rew, pred_s, step_s)  # the env owns resets: a viewer's "skip" cannot end a lane here


def _drive_same_step(run: _VectorRun) -> None:
    """SameStep autoreset: the observation returned with ``done`` already starts the lane's next episode.

    The ended episode's info rides in ``info["final_info"]``.
    """
    n = run.n
    while not run.finished:
        rew, term, trunc, info, per_obs, pred_s, step_s = run.step()
        for lane in range(n):
            te, tr = bool(term[lane]), bool(trunc[lane])
            if run.advance(lane, float(rew[lane]), te, tr, info, per_obs, pred_s, step_s):
                run.finish(lane, te, tr, lane_final_info(info, lane, n))
                run.assign(lane)
                run.begin(lane)
        run.feed_view(rew, pred_s, step_s)  # the env owns resets: a viewer's "skip" cannot end a lane here


def _has_plain(tree: Any) -> bool:
    if isinstance(tree, Tensor):
        return True
    if isinstance(tree, Mapping):
        return any(_has_plain(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(_has_plain(v) for v in tree)
    return False


def _reset_lanes(run: _VectorRun, how: str, which: list[int], refuse: Any) -> None:
    """Driver-owned reset of ``which`` lanes: gymnasium ``reset_mask`` or client ``env_indices``.

    ``refuse()`` raises the autoresetting-env refusal when the endpoint answers that it
    cannot reset single lanes (a served NEXT_STEP Gymnasium vector env)."""
    lanes, n, env = run.lanes, run.n, run.env
    for lane in which:
        run.assign(lane)
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
    run.obs, info = normalize_reset(ret)
    checks = run.checks
    if checks is not None:
        run.obs = checks.observation(run.obs, "reset")
        checks.local_info(info, "reset")
    for lane in which:
        run.begin(lane)


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
