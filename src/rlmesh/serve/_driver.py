"""The env driver: runs requests against a :class:`~rlmesh.serve._driven.DrivenEnv` and keeps episode books.

One driver per server; per-session state (lane states, the interrupted-episode
buffer, conformance-warning dedup) is reset by :meth:`Driver.begin_session`
(SES-6). Env calls happen on the caller's thread (DELTA-16: the serve thread).

Errors leave here as :class:`RequestFailed` carrying the wire code, message,
operation and whether the session survives; the serve loop turns them into
``Error`` frames.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import numpy as np

from .._autoreset import Autoreset
from .._dtypes import np_dtype
from .._envkit.checks import Checks, failure_text, path_text
from .._envkit.results import (
    lane_final_info,
    next_step_violation,
    read_scalar_step,
    read_vector_step,
)
from .._ids import new_episode_id
from .._plan import ValuePlan, value_plan
from ..errors import CODE_NUMBERS, EnvironmentException, ProtocolException, is_recoverable_exception
from ..wire import frames, messages as m
from ..wire.meta import normalize
from ._books import ACTIVE, IDLE, PENDING, _Books
from ._driven import DrivenEnv, DrivenScalar, DrivenVector, frame_to_hwc_uint8

__all__ = ["Driver", "RequestFailed", "reply_too_large"]

log = logging.getLogger("rlmesh.serve")


_INTERRUPTED_CAP = 100  # AR-4


class RequestFailed(Exception):
    """A request failed; ``recoverable`` says whether the session survives."""

    def __init__(self, code: str, message: str, *, op: str = "", recoverable: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.op = op
        self.recoverable = recoverable

    def to_message(self) -> m.Error:
        return m.Error(
            code=CODE_NUMBERS[self.code],
            message=self.message,
            recoverable=self.recoverable,
            op=self.op,
        )

    @classmethod
    def of(cls, exc: EnvironmentException) -> RequestFailed:
        """A shared env check (:class:`rlmesh._envkit.checks.Checks`) refused a value."""
        return cls(exc.code, exc.message, op=exc.op, recoverable=exc.recoverable)


def _env_failure(op: str, exc: BaseException) -> RequestFailed:
    """ERR-2/ERR-6/DEC-8: ``[INTERNAL] {op} failed: {ExcType}: {text}``, fatal unless marked."""
    recoverable = is_recoverable_exception(exc)
    code = getattr(exc, "code", "INTERNAL") if recoverable else "INTERNAL"
    if code not in CODE_NUMBERS:
        code = "INTERNAL"
    return RequestFailed(code, failure_text(op, exc), op=op, recoverable=recoverable)


def reply_too_large(msg: Any, nbytes: int, max_frame_bytes: int) -> RequestFailed:
    """A reply over the frame limit is never sent: this fatal error says why and what to set."""
    what = {
        m.ResetReply.KIND: "reset",
        m.StepReply.KIND: "step",
        m.RenderReply.KIND: "render",
    }.get(msg.KIND)
    op = what or "request"
    thing = (
        "observation" if what in ("reset", "step") else ("frame" if what == "render" else "reply")
    )
    return RequestFailed(
        "INTERNAL",
        f"{op} failed: the {thing} is {nbytes} bytes on the wire, over the frame limit of "
        f"{max_frame_bytes} bytes (max_frame_bytes); set {frames.MAX_FRAME_BYTES_ENV} "
        "to a larger value on both the server and the client to send it",
        op=op,
        recoverable=False,
    )


def _bad_action(exc: Exception) -> RequestFailed:
    """An action the env's checks refused (CNF-4 strict: out of range), or that does not fit
    the action space at all."""
    if isinstance(exc, EnvironmentException):
        return RequestFailed.of(exc)
    return RequestFailed(
        "INVALID_ACTION", f"action does not match action_space at {path_text(exc)}", op="step"
    )


def _reset_needed(op: str) -> RequestFailed:
    """A step or render before this session's first reset: refused, the env is not called."""
    return RequestFailed(
        "NOT_READY",
        f"{op} before reset: this session has not reset the env yet (a new session never continues "
        "the previous client's episode); call reset() first",
        op=op,
        recoverable=True,
    )


class Driver:
    """Executes Reset/Step/Render against one driven env and keeps the episode books."""

    def __init__(self, env: DrivenEnv) -> None:
        self.env = env
        self.lanes = env.lanes
        n = env.num_envs
        self.obs_plan = value_plan(env.obs_space, lanes=self.lanes)
        self.act_plan = value_plan(env.act_space, lanes=self.lanes)
        #: SRV-60 / CNF-4: the same checks, policy and words as an in-process session's.
        self.checks = Checks(env.obs_space, env.act_space, self.lanes)
        self.policy = self.checks.policy
        # Resolved once for the step path (issue 24): the action's one root leaf, if any,
        # read straight off the frame; the observation's split when it is one segment.
        self._act_leaf, self._act_dtype, self._act_shape, self._act_nbytes = _direct_leaf(
            env.act_space, self.lanes
        )
        self._act_flat = len(self._act_shape) == 1  # a segment's 1-D view has that shape already
        self._obs_leaf = _SEGMENT if self.obs_plan.leaf == "segment" else None
        #: A plain one-env endpoint's env, stepped here directly (``DrivenScalar.step``'s reading
        #: of the result inlined); ``None``: through the driven env's ``step``.
        self._raw_env = env.env if type(env) is DrivenScalar else None
        #: A vector env, stepped here directly (``DrivenVector.step``'s reading inlined).
        self._raw_vector = env.env if type(env) is DrivenVector else None
        self._lanes_shape = (n,)
        self._books = _Books(n)
        self._no_flags = bytes(n)  # a vector step's terminated/truncated bytes when no lane ended
        self._interrupted: deque[m.EpisodeRecord] = deque()
        self._has_reset = False  # this session reset the env: step/render may run

    # -- sessions ---------------------------------------------------------------------

    def begin_session(self) -> None:
        """SES-6: nothing carries over from the previous session, not even its episode."""
        self._has_reset = False
        self._books.reset_all()
        self._interrupted.clear()
        self.checks.begin_session()

    def end_session(self) -> list[m.EpisodeRecord]:
        """SES-5: complete every active episode as truncated; return them with the buffered ones."""
        out = list(self._interrupted)
        self._interrupted.clear()
        books = self._books
        for i, st in enumerate(books.state):
            if st == ACTIVE:
                out.append(books.record(i, False, True, None))
        books.reset_all()
        return out

    # -- requests -----------------------------------------------------------------------

    def reset(self, req: m.Reset) -> tuple[m.ResetReply, list[Any]]:
        started = time.perf_counter_ns()
        n = self.env.num_envs
        indices = list(req.env_indices)
        if indices:
            if not self.env.supports_partial_reset:
                raise RequestFailed(
                    "UNSUPPORTED",
                    "this endpoint does not support partial reset (env_indices)",
                    op="reset",
                )
            if len(set(indices)) != len(indices) or any(not 0 <= i < n for i in indices):
                raise RequestFailed(
                    "INVALID_ACTION",
                    f"env_indices must be unique lanes in [0, {n}), got {indices}",
                    op="reset",
                )
        count = len(indices) if indices else n
        if req.seeds and len(req.seeds) != count:
            raise RequestFailed(
                "INVALID_ACTION", f"expected {count} seeds, got {len(req.seeds)}", op="reset"
            )
        if req.episode_ids and len(req.episode_ids) != count:
            raise RequestFailed(
                "INVALID_ACTION",
                f"expected {count} episode ids, got {len(req.episode_ids)}",
                op="reset",
            )
        try:
            obs, info = self.env.reset(list(req.seeds), req.options, indices, seed_int=req.seed_int)
        except Exception as exc:
            raise _env_failure("reset", exc) from None
        canonical = self._encode_obs(obs, "reset", partial=len(indices) if indices else None)
        targets = indices or list(range(n))
        books = self._books
        for j, i in enumerate(targets):
            if books.state[i] == ACTIVE:
                self._buffer_interrupted(books.record(i, False, True, None))
            seed = req.seeds[j] if req.seeds else None
            eid = req.episode_ids[j] if req.episode_ids else new_episode_id()
            books.start(i, eid, seed)
        self._has_reset = True
        scalars, segments = self._split_obs(canonical, partial=len(indices) if indices else None)
        info_out = self._info(info, "reset")
        return m.ResetReply(
            obs=scalars, info=info_out, endpoint_ns=time.perf_counter_ns() - started
        ), segments

    def step(self, req: m.Step, segments: list[Any]) -> tuple[m.StepReply, list[Any]]:
        """One step, straight through (issue 24): decode the action, call the env, check
        and encode the observation, keep the books. What does not change per step (the
        action's leaf layout, the checks, the observation's split) was resolved at bind;
        the uncommon cases (a first step after a reset, episode ends, odd values) take
        the general helpers, with the same checks and words.
        """
        started = time.perf_counter_ns()
        if not self._has_reset:
            raise _reset_needed("step")
        # ledger: action
        act = req.action
        leaf = self._act_leaf
        try:
            if (
                leaf is _SCALAR
                and req.has_action
                and len(act) == 1
                and not segments
                and type(act[0]) is int
            ):
                action = self.checks.action_in(act[0])
            elif (
                leaf is _SEGMENT
                and req.has_action
                and not act
                and len(segments) == 1
                and segments[0].nbytes == self._act_nbytes
            ):
                seg = segments[0].view(self._act_dtype)
                action = self.checks.action_in(
                    seg if self._act_flat else seg.reshape(self._act_shape)
                )
            else:
                action = self._decode_action(req, segments)
        except (EnvironmentException, ValueError, TypeError, KeyError) as exc:
            raise _bad_action(exc) from None
        # ledger: books
        if req.episode_ids:
            lanes = self._books.lanes
            for i, eid in req.episode_ids.items():
                if 0 <= i < len(lanes):
                    lanes[i].episode_id = eid
        try:
            raw = self._raw_env
            if raw is not None:  # DrivenScalar.step, inlined: one frame less per step
                result = raw.step(action)  # ledger: env
                # ledger: observation
                if type(result) is tuple and len(result) == 5 and type(result[4]) is dict:
                    obs, reward, terminated, truncated, info = result
                    reward, terminated, truncated = float(reward), bool(terminated), bool(truncated)
                else:
                    obs, reward, terminated, truncated, info = read_scalar_step(result)
            elif (raw := self._raw_vector) is not None:  # DrivenVector.step, inlined
                result = raw.step(action)  # ledger: env
                # ledger: observation
                plain = type(result) is tuple and len(result) == 5
                if plain:  # read_vector_step's common case: a gymnasium vector env's arrays
                    obs, reward, terminated, truncated, info = result
                    shape = self._lanes_shape
                    plain = (
                        type(info) is dict
                        and type(reward) is np.ndarray
                        and type(terminated) is np.ndarray
                        and type(truncated) is np.ndarray
                        and reward.dtype == _F64
                        and terminated.dtype == _BOOL
                        and truncated.dtype == _BOOL
                        and reward.shape == shape
                        and terminated.shape == shape
                        and truncated.shape == shape
                    )
                if not plain:
                    obs, reward, terminated, truncated, info = read_vector_step(
                        result, self.env.num_envs
                    )
            else:
                obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as exc:
            raise _env_failure("step", exc) from None
        # ledger: observation
        try:  # Checks.observation's common case, in one call
            canonical = self.checks.observe(obs)
        except Exception:
            canonical = None
        if canonical is None:  # out of range, odd, or broken: the checks word it (or warn)
            try:
                canonical = self.checks.observation(obs, "step")
            except EnvironmentException as exc:  # SRV-60: the env broke its own contract
                raise RequestFailed.of(exc) from None
        # ledger: books
        books = self._books
        if self.lanes is None:
            if terminated or truncated or books.state[0] != ACTIVE:
                completed = self._account(reward, terminated, truncated, info)
            else:  # _account's common case, inlined
                books.clock += 1
                books.reward[0] += reward
                completed = []
        else:  # the flags are bool arrays of N: their bytes are the wire's 0/1 flag segments
            flags_t, flags_u = terminated.tobytes(), truncated.tobytes()
            if not books.waiting and flags_t == self._no_flags == flags_u:
                books.clock += 1  # every lane mid-episode and none ended: _lane_books' common case
                books.reward += reward
                completed = []
            else:
                completed = self._lane_books(reward, terminated, truncated, info)
        if self._interrupted:
            completed = [*self._interrupted, *completed]
            self._interrupted.clear()
        # ledger: observation
        if self._obs_leaf is _SEGMENT:
            scalars: list[Any] = []
            segs = [canonical]
        else:
            scalars, segs = self.obs_plan.split(canonical)
        info_out = None
        if info or self.checks.pending:
            try:  # _info, inlined
                info_out = self.checks.info(info, "step")  # INFO-4 warnings ride along; MET-1
            except EnvironmentException as exc:
                raise RequestFailed.of(exc) from None
        # ledger: reply
        if self.lanes is None:  # positional: StepReply's field order (cheaper than keywords)
            return (
                m.StepReply(
                    scalars,
                    reward,
                    terminated,
                    truncated,
                    info_out,
                    completed,
                    time.perf_counter_ns() - started,
                ),
                segs,
            )
        segs.append(np.ascontiguousarray(reward, dtype=_F8))
        segs.append(flags_t)
        segs.append(flags_u)
        return (
            m.StepReply(
                scalars, 0.0, False, False, info_out, completed, time.perf_counter_ns() - started
            ),
            segs,
        )

    def render(self, req: m.Render) -> tuple[m.RenderReply, list[Any]]:
        if not self._has_reset:
            raise _reset_needed("render")
        n = self.env.num_envs
        if self.lanes is None and req.env_index != 0:
            raise RequestFailed(
                "INVALID_ACTION",
                f"single-env render only supports env_index 0, got {req.env_index}",
                op="render",
            )
        if not 0 <= req.env_index < n:
            raise RequestFailed(
                "INVALID_ACTION", f"env_index must be in [0, {n}), got {req.env_index}", op="render"
            )
        try:
            frame = self.env.render(req.env_index)
        except Exception as exc:
            # A failed render() (pygame missing, no rgb render mode) leaves the env's state
            # as it was: that request fails, the session lives, so a viewer or a recorder can
            # drop its camera and the run goes on (issue 39).
            failure = _env_failure("render", exc)
            failure.recoverable = True
            raise failure from None
        image = frame_to_hwc_uint8(frame)
        if image is None:
            return m.RenderReply(), []
        return m.RenderReply(format="raw", shape=list(image.shape)), [image]

    # -- helpers ------------------------------------------------------------------------

    def _decode_action(self, req: m.Step, segments: list[Any]) -> Any:
        if not req.has_action:
            return None  # ENVCALL-5
        try:
            raw = self.act_plan.join(req.action, segments)
        except ProtocolException as exc:
            raise RequestFailed(
                "INVALID_ACTION", f"action does not match action_space: {exc}", op="step"
            ) from None
        try:
            return self.checks.action(raw)
        except (EnvironmentException, ValueError, TypeError, KeyError) as exc:
            raise _bad_action(exc) from None

    def _partial(self, k: int) -> ValuePlan:
        """The observation plan of a batch of ``k`` lanes (partial reset replies)."""
        return value_plan(self.env.obs_space, lanes=k)

    def _encode_obs(self, obs: Any, op: str, partial: int | None = None) -> Any:
        try:
            return self.checks.observation(
                obs, op, None if partial is None else self._partial(partial).encode
            )
        except EnvironmentException as exc:  # SRV-60: the env broke its own contract
            raise RequestFailed.of(exc) from None

    def _split_obs(self, canonical: Any, partial: int | None = None) -> tuple[list[Any], list[Any]]:
        plan = self.obs_plan if partial is None else self._partial(partial)
        return plan.split(canonical)

    def _info(self, info: dict[str, Any], op: str) -> Any:
        try:
            return self.checks.info(info, op)  # INFO-4 warnings ride along; MET-1
        except EnvironmentException as exc:
            raise RequestFailed.of(exc) from None

    def _buffer_interrupted(self, record: m.EpisodeRecord) -> None:
        if len(self._interrupted) >= _INTERRUPTED_CAP:
            dropped = self._interrupted.popleft()
            log.warning("interrupted-episode buffer full; dropping episode %s", dropped.episode_id)
        self._interrupted.append(record)

    def _account(
        self, reward: Any, terminated: Any, truncated: Any, info: dict[str, Any]
    ) -> list[m.EpisodeRecord]:
        """AR-5/AR-6: step accounting (one env or lanes); returns the episodes that ended."""
        if self.lanes is not None:
            return self._lane_books(reward, terminated, truncated, info)
        books = self._books
        if books.state[0] != ACTIVE:
            return []
        books.clock += 1
        books.reward[0] += reward
        if terminated or truncated:
            books.park(0, IDLE)
            return [books.record(0, bool(terminated), bool(truncated), _final_info_scalar(info))]
        return []

    def _lane_books(
        self, reward: Any, terminated: Any, truncated: Any, info: dict[str, Any]
    ) -> list[m.EpisodeRecord]:
        """AR-5/AR-6: a vector step's accounting when a lane ended or is not mid-episode.

        One pass over the lanes concerned, the books' moves (:meth:`_Books.start`,
        :meth:`_Books.park`, :meth:`_Books.record`) inlined: an episode end costs no
        Python call of its own unless the step has info to slice (AR-7's final info).
        """
        books = self._books
        state = books.state
        lanes = books.lanes
        extra = books.extra_steps
        waiting = books.waiting
        mode = self.env.autoreset
        ended = (terminated | truncated).nonzero()[0].tolist()
        flags_t, flags_u = terminated.tolist(), truncated.tolist()
        if waiting:
            if mode == Autoreset.NEXT_STEP:  # AR-6: validated before any state changes
                rewards = reward.tolist()
                for i in waiting:
                    if state[i] == PENDING and (flags_t[i] or flags_u[i] or rewards[i] != 0):
                        raise RequestFailed(
                            "INTERNAL",
                            f"step failed: {next_step_violation(i)}",
                            op="step",
                            recoverable=False,
                        )
            for i in waiting:
                extra[i] -= 1  # the shared clock ticks, these lanes do not
        clock = books.clock = books.clock + 1
        sums = books.reward
        sums += reward  # a waiting lane's sum is zeroed when its episode starts
        if not (ended or waiting):
            return []
        now = time.time_ns()
        if waiting:  # the autoreset obs starts an episode (AR-5): _Books.start, inlined
            for i in [*waiting]:  # a copy: a lane that starts leaves ``waiting``
                if state[i] != PENDING:
                    continue
                lane = lanes[i]
                lane.episode_id = lane.episode_id or new_episode_id()
                lane.seed = None
                lane.start_ns = now
                lane.start_step = clock
                extra[i] = 0
                sums[i] = 0.0
                state[i] = ACTIVE
                waiting.remove(i)
        completed: list[m.EpisodeRecord] = []
        if not ended:
            return completed
        n = len(state)
        parked = False
        for i in ended:
            if state[i] != ACTIVE:
                continue
            lane = lanes[i]
            completed.append(
                m.EpisodeRecord(  # _Books.record, inlined (positional: the field order)
                    lane.episode_id,
                    lane.seed,
                    i,
                    clock - lane.start_step + extra[i],
                    float(sums[i]),
                    flags_t[i],
                    flags_u[i],
                    lane.start_ns,
                    now,
                    _final_info_lane(info, i, n) if info else None,
                )
            )
            if mode == Autoreset.SAME_STEP:  # _Books.start: the client pushes the new id
                lane.episode_id = ""  # with the next step; counted from the next step
                lane.seed = None
                lane.start_ns = now
                lane.start_step = clock
                extra[i] = 0
                sums[i] = 0.0
            else:  # _Books.park: NEXT_STEP awaits its autoreset, DISABLED an explicit reset
                state[i] = PENDING if mode == Autoreset.NEXT_STEP else IDLE
                waiting.append(i)
                parked = True
        if parked:
            waiting.sort()
        return completed


_SCALAR, _SEGMENT = "scalar", "segment"
_BOOL = np.dtype(np.bool_)
_F8 = np.dtype("<f8")  # a vector reply's reward segment
_F64 = np.dtype(np.float64)
_ARRAY_KINDS = frozenset({"box", "multi_binary", "multi_discrete"})


def _direct_leaf(spec: Any, lanes: int | None) -> tuple[str | None, Any, tuple[int, ...], int]:
    """How a step reads an action that is one leaf at the root, straight off the frame.

    ``(_SCALAR, ...)``: a Discrete action, one int in the header; ``(_SEGMENT, dtype,
    shape, nbytes)``: one numeric segment (a bool leaf is not: its bytes need the 0/1
    check of the general path). ``(None, ...)``: the general path (``_decode_action``).
    """
    kind = spec.kind
    if kind == "discrete" and lanes is None:
        return _SCALAR, None, (), 0
    if kind in _ARRAY_KINDS or kind == "discrete":
        dtype = np_dtype(spec.dtype)
        if dtype == _BOOL:
            return None, None, (), 0
        shape = () if kind == "discrete" else tuple(spec._shape)
        full = shape if lanes is None else (lanes, *shape)
        nbytes = dtype.itemsize
        for d in full:
            nbytes *= d
        return _SEGMENT, dtype, full, nbytes
    return None, None, (), 0


def _final_info_scalar(info: dict[str, Any]) -> Any:
    try:
        return normalize(info) if info else None
    except TypeError:
        return None


def _final_info_lane(info: dict[str, Any], i: int, n: int) -> Any:
    """AR-7: lane ``i``'s final info (:func:`rlmesh._envkit.results.lane_final_info`), normalized."""
    try:
        out = lane_final_info(info, i, n)
        return normalize(out) if out else None
    except (TypeError, IndexError):
        return None
