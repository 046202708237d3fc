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

Env results come from the env side (:class:`~rlmesh.eval._envside.EnvSide`): the
same normalisation, lane-info slicing and final-info rule as the server's driver,
and for an in-process env the same checks of actions, observations and info under
the same ``RLMESH_VALIDATION_POLICY`` (SRV-60, CNF-4). Actions come from the route's
``predict_lanes``; hooks and the viewer are the run's observer list.

The budget counts *started* episodes, so the result holds exactly ``count``
episodes, in order of completion; lanes rolled past the budget run unscored and
hooks never see them (DELTA-39).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._autoreset import Autoreset
from .._envkit.results import lane_final_info, lane_info, next_step_violation
from .._ids import new_local_episode_id
from ..errors import EnvironmentException, Unsupported
from ..models._values import get_bridge, to_numpy_tree
from ._budget import BUILTIN_STEP_BOUND, finish_run
from ._episode import Episode
from ._hooks import StepEvent
from ._observers import DriveStep, ObserverList
from ._results import EpisodeResult, RunResult, aggregate_telemetry
from ._stats import Timings

if TYPE_CHECKING:
    from ._drive import Drive
    from ._hooks import RunContext

__all__ = ["lane_info", "run_vector"]

_NP = get_bridge("numpy")


UNSCORED = -1  # the episode index of a lane running past the budget (DELTA-39)


class _Lanes:
    """Per-lane state (parallel lists; the lane count is small).

    ``ep[i]`` is the lane's episode index in the budget, :data:`UNSCORED` while it
    runs an episode past the budget; ``books[i]`` its episode's books;
    ``rolling[i]`` marks a NextStep lane whose next step is the env's autoreset of
    it; ``last_action[i]`` the action the lane was last given.
    """

    def __init__(self, n: int) -> None:
        self.ep = [UNSCORED] * n
        self.seed: list[int | None] = [None] * n
        self.trial: list[int | None] = [None] * n
        self.books = [Episode() for _ in range(n)]
        self.rolling = [False] * n
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
    if mode == Autoreset.DISABLED:
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
        _refuse(
            f"trial_index_base={trial_index_base} needs driver-owned resets; this env autoresets"
        )


def run_vector(
    drive: Drive,
    context: RunContext,
    *,
    count: int,
    seed_list: list[int],
    max_episode_steps: int | None,
    max_episode_seconds: float | None,
    observers: ObserverList,
    trial_index_base: int,
) -> RunResult:
    """Drive all lanes of a vector env until ``count`` scored episodes completed.

    Picks who resets finished lanes -- the driver (:func:`_drive_owned`), or the env
    by NextStep (:func:`_drive_next_step`) or SameStep (:func:`_drive_same_step`)
    autoreset -- and runs that mode's loop.
    """
    env = drive.connect()
    n = env.num_envs
    how = env.per_lane_reset
    capped = max_episode_steps is not None or max_episode_seconds is not None
    needs_owned = (len(seed_list) > n and count > n) or capped or bool(trial_index_base)
    if not how and needs_owned and env.autoreset_indices:
        how = "indices"  # a served lanes or Gymnasium vector endpoint resets single lanes (AR-10); refused below if not
    refuse = functools.partial(
        _refuse_unowned,
        env.autoreset,
        n,
        count=count,
        seed_list=seed_list,
        capped=capped,
        trial_index_base=trial_index_base,
    )
    if not how:
        refuse()
    run = _VectorRun(
        drive,
        context,
        count,
        seed_list,
        observers,
        trial_index_base if how else None,
        max_episode_steps,
    )
    try:
        if observers:
            observers.on_run_start(context)
        run.start()
        if how:
            secs = None if max_episode_seconds is None else float(max_episode_seconds)
            _drive_owned(run, how, secs, refuse)
        elif env.autoreset == Autoreset.SAME_STEP:
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
        drive: Drive,
        context: RunContext,
        count: int,
        seed_list: list[int],
        observers: ObserverList,
        trial_index_base: int | None,
        max_episode_steps: int | None,
    ) -> None:
        self.drive = drive
        self.read = context.read
        env = drive.env
        assert env is not None
        self.env = env
        self.n = n = env.num_envs
        self.count = count
        self.seed_list = seed_list
        self.observers = observers
        self.observing = bool(observers)
        self.stepping = observers.wants_steps  # nobody watches steps: no call per lane-step
        self.events = observers.wants_events
        self.trial_base = (
            trial_index_base  # None: the env resets lanes, episodes carry no trial index
        )
        self.cap = max_episode_steps if max_episode_steps is not None else BUILTIN_STEP_BOUND
        self.route = drive.route
        self.lanes = _Lanes(n)
        self.done: list[EpisodeResult] = []
        self.t_step, self.t_pred = Timings(), Timings()  # bounded memory (issue 28)
        self.started = 0
        self.error: BaseException | None = None
        self.obs: Any = None
        self.last_action: Any = (
            None  # the batch the last step sent (the viewer plots its watched lane)
        )

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
        """The lane's episode starts now: fresh books, the route's episode, ``on_episode_start``."""
        lanes = self.lanes
        seed = lanes.seed[lane]
        books = lanes.books[lane] = Episode(new_local_episode_id(), seed, lanes.trial[lane])
        self.route.begin_episode(books.id, seed, lane)
        if self.observing and lanes.ep[lane] != UNSCORED:
            self.observers.on_episode_start(lanes.ep[lane], seed, lane, self.obs, self.count)

    def finish(self, lane: int, terminated: bool, truncated: bool, info: Mapping[str, Any]) -> None:
        """The lane's episode ended: end the route's episode; score it when it is in the budget."""
        books = self.lanes.books[lane]
        if books.id:
            eid, books.id = books.id, ""
            self.route.end_episode(eid, lane)
        k = self.lanes.ep[lane]
        if k == UNSCORED:
            return
        books.terminated, books.truncated = terminated, truncated
        result = books.result(k, info)
        self.done.append(result)
        if self.observing:
            self.observers.on_episode_end(result, lane)

    def start(self) -> None:
        """The first full reset: every lane gets an episode of the budget."""
        n = self.n
        for lane in range(n):
            self.assign(lane)
        self.obs = self.env.reset_all([self.lanes.seed[i] for i in range(n)])
        for lane in range(n):
            self.begin(lane)

    def step(self) -> tuple[Any, Any, Any, dict[str, Any], list[Any] | None, float, float]:
        """Predict and step all lanes; returns ``(reward, terminated, truncated, info, per_lane_obs, pred_s, step_s)``.

        ``per_lane_obs`` (for ``on_step``) is the observation the actions were
        chosen from, split by lane, when an observer wants step events. ``self.obs``
        becomes the env's new observation.
        """
        perf = time.perf_counter
        obs = self.obs
        t0 = perf()
        action = self.route.predict_lanes(obs, self.lanes.rolling, self.lanes.last_action)
        t1 = perf()
        obs2, rew, term, trunc, info = self.env.step_lanes(action)
        t2 = perf()
        self.last_action = action
        self.t_pred.append(t1 - t0)
        self.t_step.append(t2 - t1)
        per_obs = None
        if self.events:
            per_obs = _NP.tree_unstack(to_numpy_tree(obs) if self.env.canonical else obs, self.n)
        self.obs = obs2
        return rew, term, trunc, info, per_obs, t1 - t0, t2 - t1

    def advance(
        self,
        lane: int,
        r: float,
        te: bool,
        tr: bool,
        info: dict[str, Any],
        per_obs: Any,
        pred_s: float,
        step_s: float,
    ) -> tuple[bool, bool]:
        """Book one step of a running lane (and ``on_step``).

        Returns ``(ended, end_asked)``: whether its episode ended or hit the cap, and
        whether an observer asked to end it (the viewer's "end episode").
        """
        lanes = self.lanes
        books = lanes.books[lane]
        books.steps += 1
        books.reward += r
        books.pred_s += pred_s
        books.step_s += step_s
        capped = books.steps >= self.cap and not te and not tr
        asked = False
        if self.stepping and lanes.ep[lane] != UNSCORED:
            event = None
            if per_obs is not None:
                event = StepEvent(
                    lanes.ep[lane],
                    lanes.seed[lane],
                    books.steps - 1,
                    per_obs[lane],
                    lanes.last_action[lane],
                    r,
                    te,
                    tr or capped,
                    lane_info(info, lane, self.n),
                    pred_s * 1e3,
                    step_s * 1e3,
                    functools.partial(self.read, per_obs[lane]),
                )
            asked = self.observers.on_step(
                DriveStep(
                    lane,
                    event,
                    self.obs,
                    books.steps,
                    books.reward,
                    r,
                    self.last_action,
                    pred_s * 1e3,
                    step_s * 1e3,
                    True,
                )
            )
        return te or tr or capped, asked

    def close(self) -> RunResult:
        """End every in-flight lane episode (the route's), then the run's result."""
        lanes, route = self.lanes, self.route
        for lane in range(self.n):
            books = lanes.books[lane]
            if books.id:
                try:
                    route.end_episode(books.id, lane)
                except BaseException as exc:
                    self.error = self.error or exc
                books.id = ""
        telemetry = aggregate_telemetry(
            [
                (("env.step", "env", "rpc.total", "ms"), self.t_step),
                (("model.predict", "runner", "rpc.total", "ms"), self.t_pred),
            ],
            1e3,
        )
        return finish_run(self.drive, self.done, telemetry, self.observers, self.error)


def _drive_owned(run: _VectorRun, how: str, max_secs: float | None, refuse: Any) -> None:
    """Driver-owned resets: a lane that ends (or runs out of time) is reset at once with its next seed."""
    lanes, n = run.lanes, run.n
    while not run.finished:
        if max_secs is not None:
            now = time.perf_counter()
            expired = [
                lane
                for lane in range(n)
                if lanes.ep[lane] != UNSCORED and now - lanes.books[lane].start >= max_secs
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
            end, asked = run.advance(lane, float(rew[lane]), te, tr, info, per_obs, pred_s, step_s)
            if end:
                run.finish(lane, te, True if not te else tr, lane_final_info(info, lane, n))
                ended.append(lane)
            elif asked:
                run.finish(
                    lane, False, True, {}
                )  # an observer's "end episode" (the viewer's watched lane)
                ended.append(lane)
        if ended and not run.finished:
            _reset_lanes(run, how, ended, refuse)


def _drive_next_step(run: _VectorRun) -> None:
    """NextStep autoreset: the step after a lane ends is the env's reset of it (reward 0, not done, AR-6).

    The env ignores that lane's action; the observation it returns starts the lane's
    next episode. An env that pays reward or reports done on that step breaks its
    contract: the run fails the way a served endpoint does (``[INTERNAL]``). The env
    owns resets: an observer's "end episode" cannot end a lane here.
    """
    lanes, n = run.lanes, run.n
    while not run.finished:
        rew, term, trunc, info, per_obs, pred_s, step_s = run.step()
        for lane in range(n):
            if lanes.rolling[lane]:
                if rew[lane] != 0 or term[lane] or trunc[lane]:
                    raise EnvironmentException(
                        f"step failed: {next_step_violation(lane)}",
                        code="INTERNAL",
                        op="step",
                        recoverable=False,
                    )
                lanes.rolling[lane] = False
                run.assign(lane)
                run.begin(lane)
                continue
            te, tr = bool(term[lane]), bool(trunc[lane])
            if run.advance(lane, float(rew[lane]), te, tr, info, per_obs, pred_s, step_s)[0]:
                run.finish(lane, te, True if not te else tr, lane_final_info(info, lane, n))
                lanes.rolling[lane] = True


def _drive_same_step(run: _VectorRun) -> None:
    """SameStep autoreset: the observation returned with ``done`` already starts the lane's next episode.

    The ended episode's info rides in ``info["final_info"]``. The env owns resets: an
    observer's "end episode" cannot end a lane here.
    """
    n = run.n
    while not run.finished:
        rew, term, trunc, info, per_obs, pred_s, step_s = run.step()
        for lane in range(n):
            te, tr = bool(term[lane]), bool(trunc[lane])
            if run.advance(lane, float(rew[lane]), te, tr, info, per_obs, pred_s, step_s)[0]:
                run.finish(lane, te, tr, lane_final_info(info, lane, n))
                run.assign(lane)
                run.begin(lane)


def _reset_lanes(run: _VectorRun, how: str, which: list[int], refuse: Any) -> None:
    """Driver-owned reset of ``which`` lanes: gymnasium ``reset_mask`` or client ``env_indices``.

    ``refuse()`` raises the autoresetting-env refusal when the endpoint answers that it
    cannot reset single lanes (a served NEXT_STEP Gymnasium vector env)."""
    for lane in which:
        run.assign(lane)
    try:
        run.obs = run.env.reset_lanes(how, which, run.lanes.seed)
    except Unsupported:  # e.g. rlmesh.gymnasium on a served NEXT_STEP Gymnasium vector env
        refuse()
        raise
    for lane in which:
        run.begin(lane)
