"""The env wrappers the server's driver drives: one env, a vector env, lanes, a one-lane vector env.

:func:`driven_env` classifies what the user passed to ``EnvServer`` (SRV-3,
DELTA-14/15) and wraps it in one of :class:`DrivenScalar`, :class:`DrivenVector`,
:class:`DrivenLanes` or :class:`DrivenOneLane`. Each exposes ``num_envs``, the
per-lane spaces, the autoreset mode and ``reset``/``step``/``render``/``close``
with Gymnasium results normalized (ENVCALL-1..5) through ``rlmesh._envkit``: a
reset returns ``(obs, info)``, a step ``(obs, reward, terminated, truncated,
info)``, and for several lanes the reward and flags are float64 / bool arrays of
length N. In-process sessions read envs through the same ``rlmesh._envkit`` rules
without these wrappers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._autoreset import Autoreset
from .._envkit.classify import (
    autoreset_mode_of,
    autoreset_name,
    declared_autoreset,
    env_id_of,
    is_vector_env,
    published_metadata,
    reset_takes_options,
    subset_resets,
    vector_lanes,
)
from .._envkit.results import (
    lane_info,
    normalize_reset,
    normalize_step,
    read_scalar_step,
    read_vector_step,
)
from .._keys import AUTORESET_MODE_KEY
from ..spaces._gym import as_spec
from ..spaces._spec import SpaceSpec

__all__ = [
    "DrivenEnv",
    "DrivenLanes",
    "DrivenOneLane",
    "DrivenScalar",
    "DrivenVector",
    "driven_env",
    "frame_to_hwc_uint8",
]

log = logging.getLogger("rlmesh.serve")


class DrivenEnv:
    """Common shape of the driven envs: what the driver reads and calls."""

    num_envs: int
    obs_space: SpaceSpec
    act_space: SpaceSpec
    autoreset: str
    env_id: str
    render_mode: str | None
    metadata: Any
    lanes: int | None  # None for a scalar endpoint, N otherwise
    supports_partial_reset = False

    def _describe(self, env: Any, metadata: Any, autoreset: str = "Disabled") -> None:
        """What a wrapper of one env object publishes: metadata, autoreset mode (none for a
        scalar env), id, render mode, whether reset takes options."""
        self.metadata = metadata
        self.autoreset = autoreset
        self.env_id = env_id_of(env)
        self.render_mode = _render_mode(env)
        self._options_ok = reset_takes_options(env)
        self._warned_options = False

    def reset(
        self,
        seeds: list[int | None],
        options: Any,
        env_indices: list[int],
        *,
        seed_int: bool = False,
    ) -> tuple[Any, dict[str, Any]]:
        raise NotImplementedError

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        raise NotImplementedError

    def render(self, env_index: int) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class DrivenScalar(DrivenEnv):
    """One Gymnasium-shaped env."""

    lanes = None

    def __init__(self, env: Any) -> None:
        _require_methods(env)
        self.env = env
        self.num_envs = 1
        self.obs_space = as_spec(env.observation_space, "observation_space", opaque=True)
        self.act_space = as_spec(env.action_space, "action_space", opaque=True)
        self._describe(env, published_metadata(env))

    def reset(
        self,
        seeds: list[int | None],
        options: Any,
        env_indices: list[int],
        *,
        seed_int: bool = False,
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
        result = self.env.step(action)  # ledger: env
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


class DrivenVector(DrivenEnv):
    """A Gymnasium-style vector env (``num_envs`` >= 2, batched spaces)."""

    def __init__(self, env: Any) -> None:
        _require_methods(env)
        self.env = env
        self.num_envs = int(env.num_envs)
        self.lanes = self.num_envs
        self.obs_space, self.act_space = _single_spaces(env)
        md = published_metadata(env)
        self._describe(env, md, declared_autoreset(md))  # AR-1: gymnasium's default is NextStep
        # AR-10: a Gymnasium VectorEnv resets chosen lanes (options["reset_mask"]) in every
        # autoreset mode, as an in-process session resets them; a duck-typed NEXT_STEP env cannot.
        self.supports_partial_reset = self.autoreset != Autoreset.NEXT_STEP or subset_resets(env)

    def reset(
        self,
        seeds: list[int | None],
        options: Any,
        env_indices: list[int],
        *,
        seed_int: bool = False,
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
        # the serve loop's Driver steps a DrivenVector's env itself, with this reading's
        # common case inlined (one Python call less per step): it never calls this
        return read_vector_step(self.env.step(action), self.num_envs)

    def render(self, env_index: int) -> Any:
        return _lane_frame(self.env, env_index)

    def close(self) -> None:
        self.env.close()


class DrivenLanes(DrivenEnv):
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
        self.lanes_ = [DrivenScalar(e) for e in envs]
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
            self.metadata = {
                **dict(md or {}),
                AUTORESET_MODE_KEY: self.autoreset,
            }  # the contract says so
        except (TypeError, ValueError):
            self.metadata = {AUTORESET_MODE_KEY: self.autoreset}
        self._pending = np.zeros(self.num_envs, dtype=bool)  # NEXT_STEP: lanes owing an autoreset
        self.env_id = first.env_id
        self.render_mode = first.render_mode
        self._lane_action = _lane_splitter(self.act_space)  # None: plain ``action[i]``

    def reset(
        self,
        seeds: list[int | None],
        options: Any,
        env_indices: list[int],
        *,
        seed_int: bool = False,
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
            if (
                mode == Autoreset.NEXT_STEP and pending[i]
            ):  # the autoreset step: reward 0, not done (AR-6)
                obs[i], infos[i] = lane.reset([], None, [])
                pending[i] = False
                continue
            a = None if action is None else action[i] if split is None else split(action, i)
            obs[i], rewards[i], terminated[i], truncated[i], infos[i] = lane.step(a)
            if terminated[i] or truncated[i]:
                if mode == Autoreset.NEXT_STEP:
                    pending[i] = True
                elif mode == Autoreset.SAME_STEP:
                    if final_obs is None:
                        final_obs, reset_infos = [None] * n, [None] * n
                    final_obs[i] = obs[i]
                    obs[i], reset_infos[i] = lane.reset([], None, [])  # type: ignore[index]
        done = terminated | truncated
        info: dict[str, Any] = {"final_info": infos, "_final_info": done}
        if final_obs is not None:
            info.update(
                final_obs=final_obs, _final_obs=done, reset_info=reset_infos, _reset_info=done
            )
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


class DrivenOneLane(DrivenScalar):
    """A vector env with ``num_envs == 1`` served as a scalar env (DELTA-15)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.num_envs = 1
        self.obs_space, self.act_space = _single_spaces(env)
        md = getattr(env, "metadata", None)
        if md is not None and declared_autoreset(md, ""):
            if autoreset_mode_of(md) == Autoreset.SAME_STEP:
                raise ValueError(
                    "a 1-lane vector env with SAME_STEP autoreset cannot be served as a scalar env; "
                    "construct it with NEXT_STEP or DISABLED autoreset"
                )
            md = {k: v for k, v in md.items() if k != AUTORESET_MODE_KEY}
        self._describe(env, md)

    def reset(
        self,
        seeds: list[int | None],
        options: Any,
        env_indices: list[int],
        *,
        seed_int: bool = False,
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
        return _lane_frame(self.env, 0)


def _lane_frame(env: Any, index: int) -> Any:
    """Lane ``index``'s frame of a vector env's ``render()`` (OPP-14: a list holds one frame
    per lane; anything else is the frame)."""
    render = getattr(env, "render", None)
    frames = render() if callable(render) else None
    if isinstance(frames, (list, tuple)):
        return frames[index] if 0 <= index < len(frames) else None
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
    if kind in ("text", "opaque"):  # a batch is a list: action[i] is lane i
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


def _require_methods(env: Any) -> None:
    for name in ("reset", "step", "close"):
        if not callable(getattr(env, name, None)):
            raise TypeError(f"env must have a '{name}' method")  # SRV-2


def _single_spaces(env: Any) -> tuple[SpaceSpec, SpaceSpec]:
    """A vector env's per-lane spaces (``single_*``, else the spaces it has)."""
    obs = getattr(env, "single_observation_space", None) or env.observation_space
    act = getattr(env, "single_action_space", None) or env.action_space
    return (
        as_spec(obs, "single_observation_space", opaque=True),
        as_spec(act, "single_action_space", opaque=True),
    )


def _render_mode(env: Any) -> str | None:
    mode = getattr(env, "render_mode", None)
    if mode is not None and not isinstance(mode, str):
        raise TypeError(f"env.render_mode must be a str or None, got {type(mode).__name__}")
    return mode


def frame_to_hwc_uint8(frame: Any) -> np.ndarray[Any, Any] | None:
    """RND-3: cast (not clamp) to uint8; CHW becomes HWC; other shapes give no frame."""
    if frame is None:
        return None
    try:
        arr = np.asarray(frame)
    except Exception:
        return None
    if arr.dtype.kind not in "biufc" or arr.size == 0:  # strings, objects ...: no frame
        return None
    if arr.ndim == 3 and arr.shape[-1] in (3, 4):
        pass
    elif arr.ndim == 3 and arr.shape[0] in (3, 4):
        arr = np.transpose(arr, (1, 2, 0))
    elif arr.ndim != 2:
        return None
    return np.ascontiguousarray(arr.astype(np.uint8, copy=False))


def driven_env(env: Any) -> DrivenEnv:
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
            return DrivenScalar(env[0])
        return DrivenLanes(env, getattr(env, "autoreset_mode", None))
    n = vector_lanes(env)
    if n is None:
        return DrivenScalar(env)
    return DrivenOneLane(env) if n == 1 else DrivenVector(env)
