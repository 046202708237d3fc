"""The one env view: what an env object *is* and how its results read, for every driver.

Both the server's driver (``serve/_driver.py``) and in-process sessions
(``eval/``) classify and read envs through this module, so the same env object
behaves the same whether it is driven locally or served (issue 10):

- vector detection (SRV-3, :func:`is_vector_env`) and the declared autoreset mode
  (AR-1, :func:`autoreset_mode_of`, :func:`declared_autoreset`: unknown modes are
  refused with ``ValueError`` on both paths);
- the env id (SRV-11), the published metadata and the metadata key names;
- reset/step normalisation (ENVCALL-2/3, :func:`normalize_reset`,
  :func:`normalize_step`: ``info`` may be any ``Mapping``, e.g. a read-only
  ``types.MappingProxyType``);
- one lane of a batched vector info dict (:func:`lane_info`) and one lane's final
  info (AR-7, :func:`lane_final_info`);
- the NEXT_STEP autoreset contract (AR-6, :func:`next_step_violation`);
- the validation policy knob (CNF-4, :func:`validation_policy`) and the checks it
  governs (SRV-60, CNF-2/3, INFO-4, :class:`Checks`): observations and actions
  against the spaces, and the info the wire must carry; a failure to read a
  step's reward or flags is worded once (:func:`env_failure`).

The views (:class:`ScalarView`, :class:`VectorView`, :class:`LanesView`,
:class:`OneLaneView`) expose ``num_envs``, the per-lane spaces, the autoreset
mode and ``reset``/``step``/``render``/``close`` with Gymnasium results
normalized (ENVCALL-1..5): a reset returns ``(obs, info)``, a step
``(obs, reward, terminated, truncated, info)``, and for several lanes the reward
and flags are float64 / bool arrays of length N.

This module sits below ``serve/`` and ``eval/`` and imports neither.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._contract import UNKNOWN_ENV_ID
from ._keys import AUTORESET_MODE_KEY, CONFORMANCE_WARNING_KEY, MAX_EPISODE_STEPS_KEY
from ._plan import value_plan
from .errors import EnvironmentException, InvalidAction
from .spaces._gym import as_spec
from .spaces._spec import SpaceSpec
from .wire.meta import normalize

__all__ = [
    "AUTORESET_CHOICES",
    "Checks",
    "EnvView",
    "Lanes",
    "LanesView",
    "OneLaneView",
    "ScalarView",
    "VectorView",
    "autoreset_mode_of",
    "autoreset_name",
    "declared_autoreset",
    "env_failure",
    "env_id_of",
    "is_vector_env",
    "local_checks",
    "local_scalar_step",
    "lane_final_info",
    "lane_info",
    "next_step_violation",
    "normalize_reset",
    "normalize_step",
    "path_text",
    "published_metadata",
    "read_scalar_step",
    "read_vector_step",
    "spec_id",
    "subset_resets",
    "validation_policy",
    "vector_lanes",
    "view_of",
]

log = logging.getLogger("rlmesh.serve")

_MODES = {"NextStep": "NextStep", "SameStep": "SameStep", "Disabled": "Disabled"}
#: Command-line spellings of the autoreset modes (``--autoreset``) and their wire names.
AUTORESET_CHOICES = {"next-step": "NextStep", "same-step": "SameStep", "disabled": "Disabled"}


def autoreset_name(mode: Any) -> str:
    """``"NextStep"``/``"SameStep"``/``"Disabled"`` from a CLI spelling, a wire name or an ``AutoresetMode``."""
    value = getattr(mode, "value", mode)
    if isinstance(value, str):
        if value in _MODES:
            return value
        key = value.strip().lower().replace("_", "-")
        if key in AUTORESET_CHOICES:
            return AUTORESET_CHOICES[key]
    raise ValueError(
        f"unknown autoreset mode {mode!r}; use 'next-step', 'same-step' or 'disabled' "
        "(or a gymnasium AutoresetMode)"
    )


class Lanes(list[Any]):
    """Scalar envs to serve as the lanes of one endpoint, with an explicit autoreset mode.

    ``EnvServer(Lanes(envs, autoreset="disabled"), address)``; a plain list of envs
    autoresets NEXT_STEP, like ``gymnasium.make_vec``.
    """

    def __init__(self, envs: Sequence[Any], autoreset: Any = "next-step") -> None:
        super().__init__(envs)
        self.autoreset_mode = autoreset_name(autoreset)


def is_vector_env(env: Any) -> bool:
    """SRV-3: an env exposing num_envs / single_observation_space / single_action_space."""
    return any(_has(env, a) for a in ("num_envs", "single_observation_space", "single_action_space"))


def vector_lanes(env: Any) -> int | None:
    """``None`` for a scalar env, else the lane count of a vector env (SRV-3).

    Raises:
        ValueError: a vector env reporting fewer than one lane.
    """
    if not is_vector_env(env):
        return None
    try:
        n = int(getattr(env, "num_envs", 0) or 0)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise ValueError(f"vector env reports num_envs={n}; it needs at least one lane")
    return n


def subset_resets(env: Any) -> bool:
    """AR-10: whether ``env`` resets chosen lanes: a Gymnasium (>= 1.1) ``VectorEnv`` taking ``options["reset_mask"]``."""
    vector = sys.modules.get("gymnasium.vector")  # not imported: env cannot be a Gymnasium VectorEnv
    if vector is None or not hasattr(vector, "AutoresetMode") or not isinstance(env, vector.VectorEnv):
        return False
    return _reset_takes_options(env)


def _has(env: Any, name: str) -> bool:
    try:
        inspect.getattr_static(env, name)
        return True
    except AttributeError:
        return False


def autoreset_mode_of(metadata: Any) -> str:
    """AR-1: the mode a metadata mapping declares; absent -> Disabled; unknown -> ValueError."""
    try:
        if metadata is None or AUTORESET_MODE_KEY not in metadata:
            return "Disabled"
        raw = metadata[AUTORESET_MODE_KEY]
    except TypeError:
        return "Disabled"
    if raw is None:
        raise ValueError("metadata['autoreset_mode'] is None; use 'NextStep', 'SameStep' or 'Disabled'")
    value = getattr(raw, "value", raw)
    if isinstance(value, str) and value in _MODES:
        return _MODES[value]
    raise ValueError(
        f"unknown metadata['autoreset_mode'] {raw!r}; expected gymnasium AutoresetMode or "
        "one of 'NextStep', 'SameStep', 'Disabled'"
    )


def declared_autoreset(metadata: Any, default: str = "NextStep") -> str:
    """AR-1 for a vector env: the declared mode, ``default`` when none is declared (gymnasium: NextStep).

    Raises:
        ValueError: the metadata declares an unknown mode (e.g. ``"Weird"``) or ``None``.
    """
    try:
        declared = metadata is not None and AUTORESET_MODE_KEY in metadata
    except TypeError:
        declared = False
    return autoreset_mode_of(metadata) if declared else default


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
        "_obs_encode",
        "_obs_quick",
        "_obs_range",
        "_warned",
        "action_in",
        "lanes",
        "observation_fast",
        "pending",
        "policy",
    )

    def __init__(self, obs_space: SpaceSpec, act_space: SpaceSpec, lanes: int | None, policy: str | None = None) -> None:
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
        #: ``(encode, in_range)`` for a caller that inlines :meth:`observation`'s common
        #: case: a value ``encode`` returns for which ``in_range`` (``None``: no range to
        #: check) is true is what :meth:`observation` returns; anything else must go
        #: through :meth:`observation` (which words the errors and the warnings).
        #: ``None`` when the range check has no quick test.
        self.observation_fast: tuple[Any, Any] | None = (
            (self._obs_encode, self._obs_quick) if self._obs_range is None or self._obs_quick is not None else None
        )        #: :meth:`action`, or the bare encoder when no range deviation is possible (the
        #: same result and errors, one call less per step; issue 24).
        self.action_in = self._act_encode if self._act_range is None else self.action
        self._warned: set[tuple[str, str]] = set()
        self.pending: list[dict[str, str]] = []

    def begin_session(self) -> None:
        """SES-6 / INFO-4: warnings are deduplicated per session."""
        self._warned.clear()
        self.pending.clear()

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
                    raise InvalidAction(f"action out of range at {path}: {detail}", op="step", recoverable=True)
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
            return normalize(info)
        except TypeError as exc:
            raise EnvironmentException(f"{op} failed: info: {exc}", code="INTERNAL", op=op, recoverable=False) from None

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


def path_text(exc: BaseException) -> str:
    """An encoder error's message, starting with its JSONPath (CNF-5; ``$: `` added when missing)."""
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    text = str(text)
    return text if text.startswith("$") else f"$: {text}"


def next_step_violation(lane: int) -> str:
    """AR-6: the message for a NEXT_STEP autoreset step that paid reward or reported done.

    The served driver sends it as ``[INTERNAL] step failed: ...`` (fatal); in-process
    sessions raise the same :class:`~rlmesh.errors.EnvironmentException`.
    """
    return (
        f"NEXT_STEP autoreset contract violated on lane {lane}: the autoreset "
        "step must report reward 0 and not done"
    )


def env_id_of(env: Any) -> str:
    """SRV-11: ``env.spec.id`` when it is a str, else ``"UnknownEnv-v1"``."""
    try:
        spec = env.spec
    except Exception:
        return UNKNOWN_ENV_ID
    return spec_id(spec)


def spec_id(spec: Any) -> str:
    """SRV-11: ``spec.id`` when it is a non-empty str, else ``"UnknownEnv-v1"``."""
    ident = getattr(spec, "id", None) if spec is not None else None
    return ident if isinstance(ident, str) and ident else UNKNOWN_ENV_ID


def published_metadata(env: Any) -> Any:
    """``env.metadata``, plus ``max_episode_steps`` from ``env.spec`` when it is known and not declared.

    Clients learn the episode limit from it (``rlmesh.gymnasium``'s ``spec.max_episode_steps``).
    The env's own mapping is never mutated.
    """
    md = getattr(env, "metadata", None)
    try:
        limit = getattr(getattr(env, "spec", None), MAX_EPISODE_STEPS_KEY, None)
    except Exception:
        return md
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        return md
    if md is None:
        return {MAX_EPISODE_STEPS_KEY: limit}
    if not isinstance(md, Mapping) or MAX_EPISODE_STEPS_KEY in md:
        return md
    return {**md, MAX_EPISODE_STEPS_KEY: limit}


def _reset_takes_options(env: Any) -> bool:
    try:
        params = inspect.signature(env.reset).parameters
    except (TypeError, ValueError):
        return True
    return "options" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def normalize_reset(result: Any) -> tuple[Any, dict[str, Any]]:
    """ENVCALL-2 / EVAL-12: ``(obs, info)`` when a 2-tuple ends in a Mapping/None, else a bare obs.

    Any ``Mapping`` counts as info (a read-only ``types.MappingProxyType`` too); the
    info comes back as a fresh ``dict``.
    """
    if type(result) is tuple and len(result) == 2:
        info = result[1]
        if type(info) is dict:
            return result[0], info
        if info is None or isinstance(info, Mapping):
            return result[0], dict(info or {})
    elif isinstance(result, tuple) and len(result) == 2 and (result[1] is None or isinstance(result[1], Mapping)):
        return result[0], dict(result[1] or {})
    return result, {}


def normalize_step(result: Any, lanes: int | None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """ENVCALL-3: 5-tuple, or the legacy 4-tuple ``(obs, reward, done, info)``.

    ``lanes`` is ``None`` for a scalar env, N for a vector env. ``info`` may be any
    ``Mapping`` (returned as a ``dict``); reward and flags are returned as the env gave them.
    """
    if not isinstance(result, tuple) or len(result) not in (4, 5):
        n = len(result) if isinstance(result, tuple) else 1
        raise ValueError(f"env.step() must return 4 legacy Gym values or 5 Gymnasium values, got {n}")
    if len(result) == 5:
        obs, reward, terminated, truncated, info = result
    else:
        obs, reward, done, info = result
        info = info or {}
        tl = info.get("TimeLimit.truncated", False) if isinstance(info, Mapping) else False
        if lanes is None:
            truncated = bool(done) and bool(tl)
            terminated = bool(done) and not truncated
        else:
            d = np.asarray(done, dtype=bool).reshape(-1)
            t = np.broadcast_to(np.asarray(tl, dtype=bool), d.shape)
            truncated, terminated = d & t, d & ~t
    if type(info) is not dict:
        info = dict(info) if isinstance(info, Mapping) else (dict(info) if info else {})
    return obs, reward, terminated, truncated, info


def read_scalar_step(result: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    """One env's step result as every driver reads it: reward a ``float``, flags ``bool`` (ENVCALL-3).

    Raises:
        ValueError / TypeError: a result of the wrong arity, a reward that is no
            number, a flag with no truth value (callers word it with :func:`env_failure`).
    """
    obs, reward, terminated, truncated, info = normalize_step(result, None)
    return obs, float(reward), bool(terminated), bool(truncated), info


def read_vector_step(result: Any, n: int) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    """A vector env's step result: rewards float64, flags bool, each of length ``n`` (AR-6: empty reads as 0).

    Raises:
        ValueError / TypeError: as :func:`read_scalar_step`, or a vector of the wrong length.
    """
    obs, reward, terminated, truncated, info = normalize_step(result, n)
    return obs, _lanes(reward, np.float64, n), _lanes(terminated, bool, n), _lanes(truncated, bool, n), info


def local_checks(obs_space: Any, act_space: Any, lanes: int | None) -> Checks | None:
    """The checks of an in-process session (CNF-4, resolved once): ``None`` under ``off``.

    ``None`` too for spaces that do not convert to a :class:`SpaceSpec` (a local env
    with exotic Gymnasium spaces, EVAL-7): such an env could not be served at all.
    Under ``off`` nothing is checked in-process (the hot path stays the bare env call);
    a served endpoint still refuses what its wire cannot carry (CNF-2 structure, MET-1 info).
    """
    policy = validation_policy()
    if policy == "off" or not isinstance(obs_space, SpaceSpec) or not isinstance(act_space, SpaceSpec):
        return None
    return Checks(obs_space, act_space, lanes, policy)


def local_scalar_step(step: Any, checks: Checks | None) -> Any:
    """``step(action) -> (obs, float, bool, bool, dict)`` for an in-process scalar env.

    Reads the result as :class:`ScalarView` does and checks the action, observation
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


class EnvView:
    """Common shape of the three views."""

    num_envs: int
    obs_space: SpaceSpec
    act_space: SpaceSpec
    autoreset: str
    env_id: str
    render_mode: str | None
    metadata: Any
    lanes: int | None  # None for a scalar endpoint, N otherwise
    supports_partial_reset = False

    def reset(
        self, seeds: list[int | None], options: Any, env_indices: list[int], *, seed_int: bool = False
    ) -> tuple[Any, dict[str, Any]]:
        raise NotImplementedError

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        raise NotImplementedError

    def render(self, env_index: int) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class ScalarView(EnvView):
    """One Gymnasium-shaped env."""

    lanes = None

    def __init__(self, env: Any) -> None:
        for name in ("reset", "step", "close"):
            if not callable(getattr(env, name, None)):
                raise TypeError(f"env must have a '{name}' method")  # SRV-2
        self.env = env
        self.num_envs = 1
        self.obs_space = as_spec(env.observation_space, "observation_space")
        self.act_space = as_spec(env.action_space, "action_space")
        self._describe(env, published_metadata(env))

    def _describe(self, env: Any, metadata: Any) -> None:
        """What every one-env view publishes: metadata, no autoreset, id, render mode, reset options."""
        self.metadata = metadata
        self.autoreset = "Disabled"
        self.env_id = env_id_of(env)
        self.render_mode = _render_mode(env)
        self._options_ok = _reset_takes_options(env)
        self._warned_options = False

    def reset(
        self, seeds: list[int | None], options: Any, env_indices: list[int], *, seed_int: bool = False
    ) -> tuple[Any, dict[str, Any]]:
        kwargs: dict[str, Any] = {}
        if seeds and seeds[0] is not None:
            kwargs["seed"] = seeds[0]
        if options is not None:
            if self._options_ok:
                kwargs["options"] = options
            elif not self._warned_options:
                self._warned_options = True
                log.warning(
                    "reset options were requested but this environment's reset() takes no options "
                    "parameter; resetting without them"
                )  # DELTA-20
        return normalize_reset(self.env.reset(**kwargs))

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        result = self.env.step(action)
        if type(result) is tuple and len(result) == 5:  # read_scalar_step's common case, inlined
            obs, reward, terminated, truncated, info = result
            if type(info) is dict:
                return obs, float(reward), bool(terminated), bool(truncated), info
        return read_scalar_step(result)

    def render(self, env_index: int) -> Any:
        render = getattr(self.env, "render", None)
        return render() if callable(render) else None

    def close(self) -> None:
        self.env.close()


class VectorView(EnvView):
    """A Gymnasium-style vector env (``num_envs`` >= 2, batched spaces)."""

    def __init__(self, env: Any) -> None:
        for name in ("reset", "step", "close"):
            if not callable(getattr(env, name, None)):
                raise TypeError(f"env must have a '{name}' method")
        self.env = env
        self.num_envs = int(env.num_envs)
        self.lanes = self.num_envs
        obs = getattr(env, "single_observation_space", None) or env.observation_space
        act = getattr(env, "single_action_space", None) or env.action_space
        self.obs_space = as_spec(obs, "single_observation_space")
        self.act_space = as_spec(act, "single_action_space")
        self.metadata = published_metadata(env)
        self.autoreset = declared_autoreset(self.metadata)  # AR-1: gymnasium's default is NextStep
        self.env_id = env_id_of(env)
        self.render_mode = _render_mode(env)
        self._options_ok = _reset_takes_options(env)
        # AR-10: a Gymnasium VectorEnv resets chosen lanes (options["reset_mask"]) in every
        # autoreset mode, as an in-process session resets them; a duck-typed NEXT_STEP env cannot.
        self.supports_partial_reset = self.autoreset != "NextStep" or subset_resets(env)

    def reset(
        self, seeds: list[int | None], options: Any, env_indices: list[int], *, seed_int: bool = False
    ) -> tuple[Any, dict[str, Any]]:
        kwargs: dict[str, Any] = {}
        if seeds and any(s is not None for s in seeds):
            # ENVCALL-1 / CNF2-A3: the env sees the form the caller gave -- one int, or the list.
            kwargs["seed"] = seeds[0] if seed_int and not env_indices else list(seeds)
        opts = dict(options) if isinstance(options, dict) else options
        if env_indices:
            mask = np.zeros(self.num_envs, dtype=bool)
            mask[env_indices] = True
            opts = dict(opts or {})
            opts["reset_mask"] = mask
            if "seed" in kwargs:  # seed only the lanes being reset
                full: list[int | None] = [None] * self.num_envs
                for i, s in zip(env_indices, seeds):
                    full[i] = s
                kwargs["seed"] = full
        if opts is not None and self._options_ok:
            kwargs["options"] = opts
        obs, info = normalize_reset(self.env.reset(**kwargs))
        if env_indices:  # a partial reset answers with the reset lanes only, in request order
            obs = _take(obs, env_indices)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        result = self.env.step(action)
        if type(result) is tuple and len(result) == 5:  # read_vector_step's common case, inlined
            obs, reward, terminated, truncated, info = result
            shape = (self.num_envs,)
            if (
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
            ):
                return result
        return read_vector_step(result, self.num_envs)

    def render(self, env_index: int) -> Any:
        render = getattr(self.env, "render", None)
        frames = render() if callable(render) else None
        if isinstance(frames, (list, tuple)):  # OPP-14: one frame per lane
            return frames[env_index] if 0 <= env_index < len(frames) else None
        return frames

    def close(self) -> None:
        self.env.close()


class LanesView(EnvView):
    """A list of scalar envs served as the lanes of one endpoint (DELTA-14).

    The lanes autoreset like ``gymnasium.make_vec``'s sync vector env (DESIGN):
    NEXT_STEP by default (the step after a lane ends resets it: reward 0, not done),
    SAME_STEP (a lane that ends is reset at once; its terminal observation rides in
    ``info["final_obs"]``, the new episode's reset info in ``info["reset_info"]``),
    or DISABLED (a done lane stays done until an explicit reset). The mode is the
    ``autoreset_mode`` of a :class:`Lanes` list, else the one lane 0's metadata
    declares, else NEXT_STEP; the contract metadata says which.
    """

    supports_partial_reset = True

    def __init__(self, envs: Sequence[Any], autoreset: str | None = None) -> None:
        self.lanes_ = [ScalarView(e) for e in envs]
        first = self.lanes_[0]
        self.num_envs = len(self.lanes_)
        self.lanes = self.num_envs
        self.obs_space, self.act_space = first.obs_space, first.act_space
        for i, lane in enumerate(self.lanes_[1:], 1):
            if lane.obs_space != first.obs_space or lane.act_space != first.act_space:
                raise ValueError(
                    f"lane {i} has different spaces than lane 0; every lane must share one contract "
                    f"(lane 0: {first.obs_space!r} / {first.act_space!r}, lane {i}: {lane.obs_space!r} / "
                    f"{lane.act_space!r})"
                )
        md = first.metadata
        if autoreset is None:
            autoreset = declared_autoreset(md)  # like gymnasium.make_vec
        self.autoreset = autoreset_name(autoreset)
        try:
            self.metadata = {**dict(md or {}), AUTORESET_MODE_KEY: self.autoreset}  # the contract says so
        except (TypeError, ValueError):
            self.metadata = {AUTORESET_MODE_KEY: self.autoreset}
        self._pending = np.zeros(self.num_envs, dtype=bool)  # NEXT_STEP: lanes owing an autoreset
        self.env_id = first.env_id
        self.render_mode = first.render_mode
        self._lane_action = _lane_splitter(self.act_space)  # None: plain ``action[i]``

    def reset(
        self, seeds: list[int | None], options: Any, env_indices: list[int], *, seed_int: bool = False
    ) -> tuple[Any, dict[str, Any]]:
        indices = env_indices or list(range(self.num_envs))
        obs_out: list[Any] = [None] * len(indices)
        infos: list[Any] = []
        for j, i in enumerate(indices):
            seed = [seeds[j]] if seeds else []
            obs_out[j], info = self.lanes_[i].reset(seed, options, [])
            infos.append(info)
            self._pending[i] = False
        return obs_out, {"final_info": infos, "_final_info": np.ones(len(indices), dtype=bool)}

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        n = self.num_envs
        obs: list[Any] = [None] * n
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        infos: list[Any] = [None] * n
        split = self._lane_action
        mode = self.autoreset
        pending = self._pending
        final_obs: list[Any] | None = None
        reset_infos: list[Any] | None = None
        for i, lane in enumerate(self.lanes_):
            if mode == "NextStep" and pending[i]:  # the autoreset step: reward 0, not done (AR-6)
                obs[i], infos[i] = lane.reset([], None, [])
                pending[i] = False
                continue
            a = None if action is None else action[i] if split is None else split(action, i)
            obs[i], rewards[i], terminated[i], truncated[i], infos[i] = lane.step(a)
            if terminated[i] or truncated[i]:
                if mode == "NextStep":
                    pending[i] = True
                elif mode == "SameStep":
                    if final_obs is None:
                        final_obs, reset_infos = [None] * n, [None] * n
                    final_obs[i] = obs[i]
                    obs[i], reset_infos[i] = lane.reset([], None, [])  # type: ignore[index]
        done = terminated | truncated
        info: dict[str, Any] = {"final_info": infos, "_final_info": done}
        if final_obs is not None:
            info.update(final_obs=final_obs, _final_obs=done, reset_info=reset_infos, _reset_info=done)
        return obs, rewards, terminated, truncated, info

    def render(self, env_index: int) -> Any:
        return self.lanes_[env_index].render(0)

    def close(self) -> None:
        errors = []
        for lane in self.lanes_:
            try:
                lane.close()
            except Exception as exc:  # close every lane, then report
                errors.append(exc)
        if errors:
            raise errors[0]


class OneLaneView(ScalarView):
    """A vector env with ``num_envs == 1`` served as a scalar env (DELTA-15)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.num_envs = 1
        obs = getattr(env, "single_observation_space", None) or env.observation_space
        act = getattr(env, "single_action_space", None) or env.action_space
        self.obs_space = as_spec(obs, "single_observation_space")
        self.act_space = as_spec(act, "single_action_space")
        md = getattr(env, "metadata", None)
        if md is not None and declared_autoreset(md, ""):
            if autoreset_mode_of(md) == "SameStep":
                raise ValueError(
                    "a 1-lane vector env with SAME_STEP autoreset cannot be served as a scalar env; "
                    "construct it with NEXT_STEP or DISABLED autoreset"
                )
            md = {k: v for k, v in md.items() if k != AUTORESET_MODE_KEY}
        self._describe(env, md)

    def reset(
        self, seeds: list[int | None], options: Any, env_indices: list[int], *, seed_int: bool = False
    ) -> tuple[Any, dict[str, Any]]:
        kwargs: dict[str, Any] = {}
        if seeds and seeds[0] is not None:
            kwargs["seed"] = [seeds[0]]
        if options is not None and self._options_ok:
            kwargs["options"] = options
        obs, info = normalize_reset(self.env.reset(**kwargs))
        return _unbatch(obs), lane_info(info, 0, 1)

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, reward, terminated, truncated, info = normalize_step(self.env.step(_batch(action)), 1)
        return (
            _unbatch(obs),
            float(np.asarray(reward).reshape(-1)[0]),
            bool(np.asarray(terminated).reshape(-1)[0]),
            bool(np.asarray(truncated).reshape(-1)[0]),
            lane_info(info, 0, 1),
        )

    def render(self, env_index: int) -> Any:
        render = getattr(self.env, "render", None)
        frames = render() if callable(render) else None
        if isinstance(frames, (list, tuple)):
            return frames[0] if frames else None
        return frames



def _lane_splitter(spec: SpaceSpec) -> Any:
    """Lane ``i`` of a canonical batched action, as a scalar endpoint would hand it over.

    Dict/Tuple batches are containers of batched children, a Discrete batch is an
    int array (lane value: ``int``), a rank-0 Box batch gives 0-d arrays. Returns
    ``None`` where plain ``action[i]`` already is right (array leaves of rank >= 1).
    """
    kind = spec.kind
    if kind == "discrete":
        return lambda v, i: int(v[i])
    if kind == "text":
        return None
    if kind == "dict":
        keyed = [(k, _lane_splitter(child) or _index) for k, child in spec._children()]
        return lambda v, i: {k: f(v[k], i) for k, f in keyed}
    if kind == "tuple":
        parts = [_lane_splitter(child) or _index for _, child in spec._children()]
        return lambda v, i: tuple(f(x, i) for f, x in zip(parts, v))
    return (lambda v, i: v[i, ...]) if not spec.shape else None


def _index(v: Any, i: int) -> Any:
    return v[i]


_F64, _BOOL = np.dtype(np.float64), np.dtype(np.bool_)


def _lanes(x: Any, dtype: Any, n: int) -> np.ndarray[Any, Any]:
    if type(x) is np.ndarray and x.dtype == dtype and x.shape == (n,):
        return x  # what a gymnasium vector env returns
    arr = np.asarray(x, dtype=dtype).reshape(-1)
    if arr.size == 0:
        return np.zeros(n, dtype=dtype)  # AR-6: empty vectors read as 0/false
    if arr.size != n:
        raise ValueError(f"vector env returned {arr.size} values for {n} lanes")
    return arr


def _take(x: Any, indices: list[int]) -> Any:
    if isinstance(x, dict):
        return {k: _take(v, indices) for k, v in x.items()}
    if isinstance(x, tuple) and not all(isinstance(v, str) for v in x):
        return tuple(_take(v, indices) for v in x)
    if isinstance(x, (list, tuple)):
        return [x[i] for i in indices]
    return np.asarray(x)[indices]


def _batch(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _batch(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_batch(v) for v in x)
    if isinstance(x, str):
        return (x,)
    return np.asarray(x)[None]


def _unbatch(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _unbatch(v) for k, v in x.items()}
    if isinstance(x, tuple) and not isinstance(x, np.ndarray):
        if len(x) == 1 and isinstance(x[0], str):
            return x[0]
        return tuple(_unbatch(v) for v in x)
    arr = np.asarray(x)
    return arr[0]


def lane_info(info: Mapping[str, Any] | None, lane: int, n: int) -> dict[str, Any]:
    """One lane's view of a batched vector info dict (gymnasium ``key`` / ``_key`` mask layout).

    ``_``-prefixed mask keys are dropped; a key whose ``_key`` mask is false for
    ``lane`` is dropped; nested mappings are sliced the same way; arrays, lists and
    tuples of length ``n`` give their ``lane`` entry; anything else is kept whole.
    The one slicer for every driver (DELTA-15, AR-7, EVAL-66).
    """
    if not info:
        return {}
    out: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(key, str) and key.startswith("_"):
            continue
        mask = info.get("_" + key) if isinstance(key, str) else None
        if mask is not None and not _lane_flag(mask, lane):
            continue
        if isinstance(value, Mapping):
            out[key] = lane_info(value, lane, n)
        elif (isinstance(value, (list, tuple)) and len(value) == n) or (isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == n):
            out[key] = value[lane]
        else:
            out[key] = value
    return out


def lane_final_info(info: Mapping[str, Any] | None, lane: int, n: int) -> dict[str, Any]:
    """AR-7: the info a lane's episode ended with.

    A ``final_info`` entry (gymnasium's SAME_STEP layout, a list of per-lane dicts or
    a batched dict) wins over the step's own info; a lane whose ``_final_info`` mask
    is false has none. Otherwise the lane's slice of the step info.
    """
    sliced = lane_info(info, lane, n)
    final = sliced.get("final_info")
    if isinstance(final, Mapping):
        return dict(final)
    if info and "final_info" in info and "final_info" not in sliced:
        return {}  # masked out for this lane
    return sliced


def _lane_flag(mask: Any, lane: int) -> bool:
    try:
        return bool(np.asarray(mask).reshape(-1)[lane])
    except IndexError:
        return False


def _render_mode(env: Any) -> str | None:
    mode = getattr(env, "render_mode", None)
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"env.render_mode must be a str or None, got {type(mode).__name__}")
    return mode


def view_of(env: Any) -> EnvView:
    """Classify what the user passed to ``EnvServer`` (SRV-3, DELTA-14/15)."""
    if isinstance(env, (list, tuple)):
        if not env:
            raise ValueError("EnvServer needs at least one environment")
        for i, e in enumerate(env):
            if is_vector_env(e):
                raise TypeError(
                    f"lanes must be scalar environments; element {i} is a vector env "
                    f"({type(e).__name__}); serve it on its own instead"
                )
        if len(env) == 1:
            return ScalarView(env[0])
        return LanesView(env, getattr(env, "autoreset_mode", None))
    n = vector_lanes(env)
    if n is None:
        return ScalarView(env)
    return OneLaneView(env) if n == 1 else VectorView(env)
