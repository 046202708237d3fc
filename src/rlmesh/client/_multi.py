"""``RemoteVectorEnv([addr, ...])`` for the rlmesh, NumPy, torch and jax flavours (issue 26).

``RemoteVectorEnv(address)`` with a list (or tuple) of addresses builds an instance of a
subclass of the very class called (so ``isinstance(env, rlmesh.numpy.RemoteVectorEnv)``
holds) whose methods run on :class:`rlmesh.client._fanout.FanOut`: one batch of lanes over
many endpoints, stepped by sending to all of them, then gathering.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from .._bridge import Bridge
from .._contract import EnvContract
from ..errors import EndpointLost
from . import _env
from ._dial import dial_keywords
from ._fanout import FanOut, FanOutHandle

__all__ = ["MultiEndpointVectorEnv", "multi_class"]

_CLASSES: dict[type, type] = {}


def multi_class(cls: type) -> type:
    """The many-endpoint subclass of a flavour's ``RemoteVectorEnv`` (made once per class)."""
    if issubclass(cls, MultiEndpointVectorEnv):
        return cls
    made = _CLASSES.get(cls)
    if made is None:
        made = type(
            cls.__name__,
            (MultiEndpointVectorEnv, cls),
            {
                "__module__": cls.__module__,
                "__qualname__": cls.__qualname__,
                "__doc__": MultiEndpointVectorEnv.__doc__,
            },
        )
        _CLASSES[cls] = made
    return made


def _host(tree: Any) -> Any:
    """A flavour's action tree (torch / jax / Tensor / lists) as NumPy leaves."""
    if isinstance(tree, Mapping):
        return {k: _host(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_host(v) for v in tree)
    if isinstance(tree, np.ndarray):
        return tree
    detach = getattr(tree, "detach", None)
    if detach is not None and hasattr(tree, "cpu"):  # torch
        return detach().cpu().numpy()
    return np.asarray(tree)


class MultiEndpointVectorEnv(FanOutHandle):
    """A vector env whose lanes live on many endpoints, stepped concurrently.

    ``RemoteVectorEnv([addr0, addr1, ...])``: each endpoint may be scalar (one lane) or
    vector; lanes are concatenated in address order. Values are batched as for one
    endpoint. ``step`` sends every endpoint its lanes' actions, then gathers the
    replies (``step_async`` / ``step_wait`` are the two halves).

    - Spaces (``single_*``) and the autoreset mode of every vector endpoint must agree
      (``ValueError`` naming the endpoint that differs); scalar endpoints are reset by
      this client in that mode (NEXT_STEP when every endpoint is scalar, or
      ``autoreset_mode=``).
    - ``reset(seed=s)`` seeds lane ``i`` with ``s + i`` (as ``gymnasium.make_vec``); a list
      gives one seed per lane; ``env_indices`` resets only those lanes, each on the
      endpoint that owns it.
    - ``info`` is in Gymnasium's vector layout (arrays with ``_key`` masks,
      ``final_obs`` / ``final_info`` under SAME_STEP) plus ``episode_ids`` and
      ``completed_episodes``.
    - An endpoint that goes away raises :class:`rlmesh.errors.EndpointLost` (its
      ``address``, ``index`` and ``lanes``) once every other reply was read. Then either
      ``reconnect(index)`` and ``reset()`` (or ``reset(env_indices=list(err.lanes))``),
      or ``close()`` to close every endpoint.

    Args:
        address: The endpoint addresses, in lane order.
        connect_timeout_seconds, request_timeout_seconds, workflow_edition: Per endpoint,
            as for one endpoint.
        token, tls_ca: As for one endpoint; one token for every endpoint.
        autoreset_mode: ``"next-step"``, ``"same-step"``, ``"disabled"`` (or Gymnasium's
            ``AutoresetMode``): the mode scalar endpoints follow; vector endpoints must
            serve it.
        device: torch / jax flavours: where values are placed.
    """

    _bridge: ClassVar[Bridge]

    def __init__(
        self,
        address: Sequence[str],
        *,
        connect_timeout_seconds: float | None = None,
        request_timeout_seconds: float | None = None,
        workflow_edition: str | None = None,
        autoreset_mode: Any = None,
        device: Any = None,
        token: str | None = None,
        tls_ca: Any = None,
    ) -> None:
        bridge = self._bridge
        bridge.ensure_available()
        self._place = None
        self._device = None
        if device is not None:
            self._device = bridge.resolve_device(device)
            self._place = self._device if str(self._device).lower() != "cpu" else None
        self._fan = FanOut(list(address), dial_keywords(locals()), autoreset_mode)
        first = self._fan.parts[0].client
        self._contract: EnvContract = first.env_contract
        self._selected_edition = first.selected_workflow_edition
        self._address = ", ".join(self._fan.addresses)
        self._num_envs = self._fan.num_envs
        self._autoreset = self._fan.mode
        self._obs_space: Any = None
        self._act_space: Any = None
        self._metadata: Mapping[str, Any] | None = None

    # -- properties -----------------------------------------------------------------------

    @property
    def num_envs(self) -> int:
        """Total lanes over every endpoint."""
        return self._num_envs

    @property
    def autoreset_mode(self) -> str:
        """``"NextStep"``, ``"SameStep"`` or ``"Disabled"`` (every lane's mode)."""
        return self._fan.mode

    @property
    def metadata(self) -> Mapping[str, Any]:
        if self._metadata is None:
            md = dict(self._contract.metadata or {})
            md["autoreset_mode"] = self._fan.mode
            self._metadata = MappingProxyType(md)
        return self._metadata

    @property
    def closed(self) -> bool:
        return self._fan.closed

    @property
    def device(self) -> Any:
        return self._device

    # -- requests -------------------------------------------------------------------------

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | None = None,
        env_indices: Sequence[int] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every lane (lane ``i`` seeded ``seed + i``), or only ``env_indices``; the full batch."""
        obs, info, runtime = self._fan.reset(seed, options, env_indices)
        for key, value in runtime.items():
            if key != "completed_episodes":
                info.setdefault(key, value)
        obs = self._bridge.decode(obs)
        if self._place is not None:
            obs = self._bridge.to_device(obs, self._place)
        return obs, info

    def step_async(self, actions: Any) -> None:
        """Send every endpoint its lanes' actions and return at once."""
        self._fan.step_async(_host(actions))

    def step_wait(self) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Gather every endpoint's reply: batched ``(obs, rewards, terminations, truncations, info)``."""
        obs, rewards, terms, truncs, info, runtime = self._fan.step_wait()
        for key, value in runtime.items():
            info.setdefault(key, value)
        bridge = self._bridge
        obs = bridge.decode(obs)
        rewards, terms, truncs = bridge.decode_lanes(rewards, terms, truncs)
        if self._place is not None:
            obs, rewards, terms, truncs = bridge.to_device(
                (obs, rewards, terms, truncs), self._place
            )
        return obs, rewards, terms, truncs, info

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """``step_async(actions)`` then ``step_wait()``."""
        self.step_async(actions)
        return self.step_wait()

    def render(self, *, env_index: int = 0) -> Any:
        """Lane ``env_index``'s frame, rendered by the endpoint that owns it."""
        for part in self._fan.parts:
            if env_index in part.lanes:
                frame = (
                    part.client.render(env_index=env_index - part.offset)
                    if not part.scalar
                    else part.client.render()
                )
                return None if frame is None else self._bridge.decode(frame)
        raise ValueError(f"env_index must be in 0..{self._num_envs - 1}, got {env_index}")

    def close(self) -> None:
        """Detach from every endpoint (their servers keep running). Idempotent."""
        fan = getattr(self, "_fan", None)
        if fan is not None:
            fan.close()

    def shutdown(self, reason: str = "owner shutdown") -> bool:
        """Ask every endpoint to stop serving; ``True`` when all accepted."""
        accepted = True
        for part in self._fan.parts:
            try:
                accepted = part.client.shutdown(reason) and accepted
            except EndpointLost:
                accepted = False
        return accepted

    def __del__(self) -> None:
        fan = getattr(self, "_fan", None)
        if fan is not None and not fan.closed:
            for part in fan.parts:
                try:
                    part.client._session.detach()
                except Exception:
                    pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}({getattr(self, 'addresses', '?')!r})"


_env.MULTI_CLASS[:] = [multi_class]
