"""``EnvServer(framework="torch"|"jax", device=...)``: the env speaks its framework (SRV-30..34).

The driver works on canonical numpy trees. A framework env is reached through a
thin proxy (:class:`BridgedEnv`) that the driven env (``serve/_driven.py``) calls
instead of the env:

- actions: the driver's canonical action (arrays that are views of the fresh
  receive buffer) is decoded by the bridge -- torch tensors sharing that memory,
  jax arrays -- and placed on ``device``; a vector endpoint's actions arrive fused
  (``[N, ...]`` per leaf, batched Discrete as an int tensor);
- results: framework leaves in observations, rewards, flags and infos become host
  numpy arrays (a CPU tensor's own memory, no copy; an accelerator tensor is
  copied to the host once) before the driven env normalizes them.

An observation may hold host (numpy) arrays too; the first leaf of each such
foreign type warns once, because the env probably meant to return its
framework's arrays. ``render`` frames may be framework tensors as well.

The driven env inspected the real env at construction (spaces, metadata, vector
shape); the proxy only intercepts ``reset``/``step``/``render``/``close`` and
forwards every other attribute.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from .._bridge import Bridge, is_jax, is_torch, resolve_bridge
from .._plan import value_plan
from ._driven import DrivenEnv, DrivenLanes, DrivenOneLane

__all__ = ["BridgedEnv", "bridge_env", "resolve_framework"]

log = logging.getLogger("rlmesh.serve")

_HOST = ("numpy", "np", "plain", "native")


def resolve_framework(framework: Any, device: Any) -> tuple[Bridge | None, Any]:
    """SRV-30/32: ``(bridge, device)`` for a framework with devices, ``(None, None)`` for numpy.

    Raises:
        ValueError: an unknown framework; a device without a framework that has
            devices; a device this machine does not have.
        ImportError: the framework is not installed.
    """
    if framework is None or (isinstance(framework, str) and framework.strip().lower() in _HOST):
        if device is not None:
            raise ValueError(
                f"device={device!r} requires a framework with a device (framework='torch' or 'jax')"
            )
        return None, None
    try:
        bridge = resolve_bridge(framework)
    except (ValueError, TypeError):
        raise ValueError(
            f"unknown framework {framework!r}; expected 'numpy', 'torch' or 'jax'"
        ) from None
    if bridge.name in _HOST:
        if device is not None:
            raise ValueError(
                f"device={device!r} requires a framework with a device (framework='torch' or 'jax')"
            )
        return None, None
    bridge.ensure_available()
    if device is not None and not bridge.supports_device():
        raise ValueError(
            f"device={device!r} requires a framework with a device; {bridge!r} has none"
        )
    return bridge, bridge.resolve_device(device) if device is not None else None


def bridge_env(driven: DrivenEnv, bridge: Bridge, device: Any) -> None:
    """Route ``driven``'s env calls through :class:`BridgedEnv` (in place)."""
    if isinstance(driven, DrivenLanes):
        for lane in driven.lanes_:
            lane.env = BridgedEnv(lane.env, bridge, device, lane.act_space, None)
        return
    lanes = (
        1 if isinstance(driven, DrivenOneLane) else driven.lanes
    )  # a 1-lane vector env takes [1, ...]
    env = driven.env  # type: ignore[attr-defined]
    driven.env = BridgedEnv(env, bridge, device, driven.act_space, lanes)  # type: ignore[attr-defined]


class BridgedEnv:
    """The env as the driver sees it: numpy in, numpy out; the env itself sees its framework."""

    def __init__(
        self, env: Any, bridge: Bridge, device: Any, act_space: Any, lanes: int | None
    ) -> None:
        self._env = env
        self._bridge = bridge
        self._device = device
        decode = value_plan(act_space, lanes=lanes, bridge=bridge).decode
        if device is None:
            self._action = decode
        else:
            to_device = bridge.to_device

            def action(canonical: Any) -> Any:
                return to_device(decode(canonical), device)

            self._action = action
        self._warned: set[type] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    @property
    def unwrapped_env(self) -> Any:
        """The env this proxy forwards to."""
        return self._env

    def reset(self, **kwargs: Any) -> Any:
        result = self._env.reset(**kwargs)
        if isinstance(result, tuple) and len(result) == 2:
            return self._obs(result[0]), self._bridge.encode(result[1])
        return self._obs(result)

    def step(self, action: Any) -> Any:
        result = self._env.step(None if action is None else self._action(action))
        if not isinstance(result, tuple) or len(result) not in (4, 5):
            return result  # the driven env reports the malformed result
        encode = self._bridge.encode
        return (self._obs(result[0]), *[encode(x) for x in result[1:]])

    def render(self, *args: Any, **kwargs: Any) -> Any:
        render = getattr(self._env, "render", None)
        if not callable(render):
            return None  # an env without render() has no frame
        frame = render(*args, **kwargs)
        if isinstance(frame, list):
            return [self._bridge.encode(f) for f in frame]
        return self._bridge.encode(frame)

    def close(self) -> Any:
        return self._env.close()

    # -- observations -----------------------------------------------------------------

    def _obs(self, obs: Any) -> Any:
        if is_torch(obs) or is_jax(obs):
            return self._bridge.encode(obs)
        return self._walk(obs)

    def _walk(self, x: Any) -> Any:
        if is_torch(x) or is_jax(x):
            return self._bridge.encode(x)
        if isinstance(x, dict):
            return {k: self._walk(v) for k, v in x.items()}
        if isinstance(x, tuple):
            return tuple(self._walk(v) for v in x)
        if isinstance(x, list):
            return [self._walk(v) for v in x]
        if isinstance(x, np.ndarray) or (hasattr(x, "__array__") and not isinstance(x, np.generic)):
            self._foreign(type(x))
        return x

    def _foreign(self, tp: type) -> None:
        if tp in self._warned:
            return
        self._warned.add(tp)
        log.warning(
            "the %s env returned an observation leaf of type %s.%s; it is sent as is, but "
            "return %s arrays for a framework=%r env (SRV-33)",
            self._bridge.name,
            tp.__module__,
            tp.__qualname__,
            self._bridge.name,
            self._bridge.name,
        )
