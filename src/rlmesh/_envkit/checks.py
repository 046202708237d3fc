"""What every driver checks: the validation policy and the checks it governs, and the words for a failure (CNF-4, SRV-60, ERR-2)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from .._keys import CONFORMANCE_WARNING_KEY
from .._plan import value_plan
from ..errors import EnvironmentException, InvalidAction
from ..spaces._quick import compile_quick_box
from ..spaces._spec import SpaceSpec
from ..wire.meta import normalize_info
from .results import read_scalar_step

__all__ = [
    "Checks",
    "env_failure",
    "failure_text",
    "local_checks",
    "local_scalar_step",
    "path_text",
    "validation_policy",
]


def validation_policy() -> str:
    """CNF-4: ``strict``, ``off`` or (default) ``warn`` from ``RLMESH_VALIDATION_POLICY``."""
    raw = os.environ.get("RLMESH_VALIDATION_POLICY", "").strip().lower()
    return raw if raw in ("strict", "off") else "warn"


def failure_text(op: str, exc: BaseException) -> str:
    """ERR-2: ``"{op} failed: {ExcType}: {text}"``, the words of a failed env call."""
    try:
        text = str(exc)
    except Exception:  # an env exception whose __str__ fails must not take the driver down
        text = "<unprintable exception>"
    return f"{op} failed: {type(exc).__name__}: {text}"


def env_failure(op: str, exc: BaseException) -> EnvironmentException:
    """A result that cannot be read (e.g. a reward that is no number), as a served client sees it.

    The served driver sends ``[INTERNAL] {op} failed: {ExcType}: {text}`` and ends the
    session (ERR-2); in-process drivers raise this same fatal
    :class:`~rlmesh.errors.EnvironmentException`.
    """
    return EnvironmentException(failure_text(op, exc), code="INTERNAL", op=op, recoverable=False)


class Checks:
    """What every driver checks on env outputs and on actions (SRV-60, CNF-2..4, INFO-4).

    Built once per session (in-process) or per server (served) from the per-lane
    spaces; ``policy`` is resolved once (:func:`validation_policy`, CNF-4). Both the
    server's driver and in-process sessions call the same methods, so a value is
    refused, warned about or let through with the same error type and words:

    - :meth:`observation`: a structural deviation (CNF-2) is a fatal ``[INTERNAL]``;
      a range deviation (CNF-3) is fatal under ``strict``, a conformance warning
      under ``warn``, unchecked under ``off``. Returns the canonical value (SRV-61:
      the dtype a peer sees).
    - :meth:`action`: a structural deviation raises the encoder's ``ValueError`` /
      ``TypeError`` / ``KeyError`` (what a client raises before sending); a range
      deviation is an :class:`~rlmesh.errors.InvalidAction` under ``strict`` (the
      action is not delivered), a warning under ``warn``.
    - :meth:`info` / :meth:`local_info`: the pending conformance warnings ride in the
      info under ``rlmesh.conformance.warning``, once per (kind, path) per session
      (INFO-4); served, the info must also be carriable by the metadata codec (MET-1).
    """

    __slots__ = (
        "_act_encode",
        "_act_range",
        "_action_ranged",
        "_action_unranged",
        "_obs_encode",
        "_obs_quick",
        "_obs_range",
        "_observe_ranged",
        "_observe_unranged",
        "_root_box",
        "_warned",
        "action_in",
        "lanes",
        "observe",
        "pending",
        "policy",
    )

    def __init__(
        self,
        obs_space: SpaceSpec,
        act_space: SpaceSpec,
        lanes: int | None,
        policy: str | None = None,
    ) -> None:
        self.policy = validation_policy() if policy is None else policy
        self.lanes = lanes
        off = self.policy == "off"
        obs, act = value_plan(obs_space, lanes=lanes), value_plan(act_space, lanes=lanes)
        self._obs_encode = obs.encode
        self._act_encode = act.encode
        self._obs_range = None if off else obs.range_check  # CNF-4
        self._act_range = None if off else act.range_check
        #: The in-range test of a root Box's range check: the common case costs one call.
        self._obs_quick = getattr(self._obs_range, "quick", None)
        #: Whose range check is a root Box's (one path, ``$``): once that path has been
        #: warned about under ``warn``, a later deviation changes nothing (INFO-4 warns once
        #: per path and session), so the range goes unchecked until the session ends.
        self._root_box = {
            "observation": self._obs_quick is not None,
            "action": getattr(self._act_range, "quick", None) is not None,
        }
        self._observe_ranged = self._observe_of(obs_space, lanes, self._obs_range is not None)
        self._observe_unranged = self._observe_of(obs_space, lanes, False)
        self._action_ranged = self._action_of(act_space, lanes, self._act_range is not None)
        self._action_unranged = self._action_of(act_space, lanes, False)
        #: ``observe(obs)``: :meth:`observation`'s common case in one call, for a caller on
        #: the step path: the canonical value when it needs neither a word nor a warning,
        #: else ``None`` (or an encoder error): the caller then calls :meth:`observation`,
        #: which words the error or the warning.
        self.observe: Callable[[Any], Any] = self._observe_ranged
        #: ``action_in(action)``: :meth:`action` (same result and errors), in one call for a
        #: small float Box, the bare encoder where no range deviation is possible.
        self.action_in: Callable[[Any], Any] = self._action_ranged
        self._warned: set[tuple[str, str]] = set()
        self.pending: list[dict[str, str]] = []

    def _observe_of(self, spec: SpaceSpec, lanes: int | None, ranged: bool) -> Callable[[Any], Any]:
        quick = compile_quick_box(spec, lanes, ranged=ranged)
        if quick is not None:
            return quick
        encode, in_range = self._obs_encode, self._obs_quick
        if not ranged:
            return encode
        if in_range is None:
            return _nothing  # no one-call range test: every value takes observation()

        def observe(obs: Any) -> Any:  # a root integer Box
            canonical = encode(obs)
            return canonical if in_range(canonical) else None

        return observe

    def _action_of(self, spec: SpaceSpec, lanes: int | None, ranged: bool) -> Callable[[Any], Any]:
        full = self.action if ranged else self._act_encode
        quick = compile_quick_box(spec, lanes, ranged=ranged, otherwise=full)
        return full if quick is None else quick

    def begin_session(self) -> None:
        """SES-6 / INFO-4: warnings are deduplicated per session."""
        self._warned.clear()
        self.pending.clear()
        self.observe = self._observe_ranged
        self.action_in = self._action_ranged

    def observation(self, obs: Any, op: str, encode: Any = None) -> Any:
        """The canonical observation, or a fatal ``[INTERNAL]`` (SRV-60).

        ``encode`` replaces the compiled encoder (a partial reset's ``k`` lanes); such
        a value is checked structurally only.
        """
        try:
            canonical = (encode or self._obs_encode)(obs)
        except (ValueError, TypeError, KeyError) as exc:
            raise EnvironmentException(
                f"{op} failed: the env returned an observation that does not match observation_space at {path_text(exc)}",
                code="INTERNAL",
                op=op,
                recoverable=False,
            ) from None
        check = self._obs_range
        if check is not None and encode is None:
            quick = self._obs_quick
            if quick is not None and quick(canonical):
                return canonical
            deviations = check(canonical)
            if deviations:
                if self.policy == "strict":
                    path, detail = deviations[0]
                    raise EnvironmentException(
                        f"{op} failed: observation out of range at {path}: {detail}",
                        code="INTERNAL",
                        op=op,
                        recoverable=False,
                    )
                self._warn("observation", deviations)
        return canonical

    def action(self, action: Any) -> Any:
        """The canonical action; structural deviations raise the encoder's error as is (VAL-14)."""
        canonical = self._act_encode(action)
        check = self._act_range
        if check is not None:
            deviations = check(canonical)
            if deviations:
                if self.policy == "strict":
                    path, detail = deviations[0]
                    raise InvalidAction(
                        f"action out of range at {path}: {detail}", op="step", recoverable=True
                    )
                self._warn("action", deviations)
        return canonical

    def info(self, info: Mapping[str, Any] | None, op: str) -> dict[str, Any] | None:
        """``info`` with the pending warnings, normalized for the wire; ``None`` when empty.

        Raises:
            EnvironmentException: ``[INTERNAL] {op} failed: info: ...`` -- a value the
                metadata codec cannot carry (fatal, MET-1).
        """
        if self.pending:
            info = dict(info or {})
            info[CONFORMANCE_WARNING_KEY] = list(self.pending)
            self.pending.clear()
        if not info:
            return None
        try:
            out: dict[str, Any] = normalize_info(info)  # sent at once: a plain dict needs no copy
            return out
        except TypeError as exc:
            raise EnvironmentException(
                f"{op} failed: info: {exc}", code="INTERNAL", op=op, recoverable=False
            ) from None

    def local_info(self, info: dict[str, Any], op: str) -> dict[str, Any]:
        """In-process: the env's own info, plus the pending warnings (INFO-4).

        The info is not normalized: an in-process run hands hooks and recorders the
        env's own values, even ones the wire could not carry (MET-1 is a property of
        the wire, not a check the policy governs).
        """
        warned = self.pending
        if warned:
            info = {**info, CONFORMANCE_WARNING_KEY: list(warned)}
            warned.clear()
        return info

    def _warn(self, kind: str, deviations: list[tuple[str, str]]) -> None:
        for path, detail in deviations:
            key = (kind, path)
            if key not in self._warned:  # INFO-4 / OPP-5: once per (kind, path) per session
                self._warned.add(key)
                self.pending.append({"kind": kind, "path": path, "detail": detail})
        if self.policy == "warn" and self._root_box[kind] and (kind, "$") in self._warned:
            # decided for this session: the root Box's one path has had its warning
            if kind == "observation":
                self.observe = self._observe_unranged
            else:
                self.action_in = self._action_unranged


def _nothing(value: Any) -> None:
    return None


def path_text(exc: BaseException) -> str:
    """An encoder error's message, starting with its JSONPath (CNF-5; ``$: `` added when missing)."""
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    text = str(text)
    return text if text.startswith("$") else f"$: {text}"


def local_checks(obs_space: Any, act_space: Any, lanes: int | None) -> Checks | None:
    """The checks of an in-process session (CNF-4, resolved once): ``None`` under ``off``.

    ``None`` too for spaces that do not convert to a :class:`SpaceSpec` (a local env
    with exotic Gymnasium spaces, EVAL-7): such an env could not be served at all.
    Under ``off`` nothing is checked in-process (the hot path stays the bare env call);
    a served endpoint still refuses what its wire cannot carry (CNF-2 structure, MET-1 info).
    """
    policy = validation_policy()
    if (
        policy == "off"
        or not isinstance(obs_space, SpaceSpec)
        or not isinstance(act_space, SpaceSpec)
    ):
        return None
    return Checks(obs_space, act_space, lanes, policy)


def local_scalar_step(step: Any, checks: Checks | None) -> Any:
    """``step(action) -> (obs, float, bool, bool, dict)`` for an in-process scalar env.

    Reads the result as the served scalar env does (``rlmesh.serve._driven.DrivenScalar``) and checks the action, observation
    and info as the server's driver does (``checks``; ``None``: read only). The env
    receives the action as the model gave it (a Discrete action stays an
    ``np.int64``: Gymnasium checks those faster than an ``int``); the model receives
    the canonical observation (SRV-61: coerced to the space's dtype, as served). An
    exception the env itself raises propagates unchanged; a result that cannot be read
    is the served ``[INTERNAL] step failed: ...`` (:func:`env_failure`).
    """
    if checks is None:

        def read(action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
            result = step(action)
            try:
                return read_scalar_step(result)
            except Exception as exc:
                raise env_failure("step", exc) from None

        return read

    check_action, check_obs, check_info = checks.action, checks.observation, checks.local_info

    def checked(action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        check_action(action)  # the env gets the model's action as given once it passes
        result = step(action)
        try:
            obs, reward, terminated, truncated, info = read_scalar_step(result)
        except Exception as exc:
            raise env_failure("step", exc) from None
        obs = check_obs(obs, "step")
        return obs, reward, terminated, truncated, check_info(info, "step")

    return checked
