"""Env clients of the framework flavours (``rlmesh.torch``, ``rlmesh.jax``) with ``device=``.

The flavours decode through their value bridge (``rlmesh._bridge``): tensor
leaves become ``torch.Tensor`` / ``jax.Array`` built on the reply's receive
buffer, primitives and containers stay as in the dependency-free client
(BKD-1). ``device=`` places every decoded value on a device in one transfer per
leaf per step -- the whole ``[N, ...]`` batch of a vector client at once, never
lane by lane; for jax one ``device_put`` call carries the whole step result.
"""

from __future__ import annotations

from typing import Any

from ._env import _RemoteEnvBase

__all__ = ["FrameworkEnvClient"]


class FrameworkEnvClient(_RemoteEnvBase):
    """Base of the torch/jax env clients: the seed-001 keywords plus ``device=``."""

    def __init__(
        self,
        address: str | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        path: str | None = None,
        transport: str | None = None,
        connect_timeout_seconds: float | None = None,
        request_timeout_seconds: float | None = None,
        workflow_edition: str | None = None,
        device: Any = None,
        wait_for_slot: bool = False,
        token: str | None = None,
        tls_ca: Any = None,
    ) -> None:
        bridge = self._bridge
        bridge.ensure_available()
        resolved = bridge.resolve_device(device)  # ValueError before dialing
        self._device = resolved
        self._place = None if resolved is None or _is_default(bridge.name, resolved) else resolved
        super().__init__(
            address,
            host=host,
            port=port,
            path=path,
            transport=transport,
            connect_timeout_seconds=connect_timeout_seconds,
            request_timeout_seconds=request_timeout_seconds,
            workflow_edition=workflow_edition,
            wait_for_slot=wait_for_slot,
            token=token,
            tls_ca=tls_ca,
        )

    @property
    def device(self) -> Any:
        """The device values are placed on (``None``: where decoding puts them, the host)."""
        return self._device

    def _move(self, tree: Any) -> Any:
        return self._bridge.to_device(tree, self._place)

    def _reset(
        self,
        seeds: list[int | None],
        options: Any,
        env_indices: list[int],
        *,
        seed_int: bool = False,
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = super()._reset(seeds, options, env_indices, seed_int=seed_int)
        if self._place is not None:
            obs = self._move(obs)
        return obs, info

    def _step_result(self, reply: Any, frame: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super()._step_result(reply, frame)
        if self._place is not None:
            if self._vector:  # one call for the whole step (jax: one device_put)
                obs, reward, terminated, truncated = self._move(
                    (obs, reward, terminated, truncated)
                )
            else:
                obs = self._move(obs)
        return obs, reward, terminated, truncated, info

    def render(self, *, env_index: int = 0) -> Any:
        """Render a frame (uint8 HxW, HxWx3 or HxWx4) on :attr:`device`, or ``None``."""
        frame = super().render(env_index=env_index)
        if frame is not None and self._place is not None:
            frame = self._move(frame)
        return frame


def _is_default(name: str, device: Any) -> bool:
    """Whether decoded values already live on ``device`` (then nothing moves)."""
    if name == "torch":
        return bool(device.type == "cpu")
    if name == "jax":
        import importlib

        jax = importlib.import_module("jax")

        return bool(device == jax.devices()[0])
    return False
