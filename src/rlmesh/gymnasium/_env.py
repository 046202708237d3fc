"""RemoteEnv: one served env as a real :class:`gymnasium.Env`."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium

from rlmesh.client._dial import dial_keywords
from rlmesh.spaces._gym import to_gymnasium_space

from ._info import _filtered
from ._shared import (
    _connect,
    _Handle,
    _ScalarClient,
    _Shared,
    _shared_step_error,
    _spec_of,
)


class RemoteEnv(_Handle, gymnasium.Env):
    """A served env as a real :class:`gymnasium.Env` (Gymnasium spaces, NumPy values).

    Construction dials and handshakes like :class:`rlmesh.numpy.RemoteEnv` and takes
    the same keywords, plus ``episode_info``.

    Args:
        address: Endpoint address such as ``"127.0.0.1:50051"`` or ``"unix:///tmp/env.sock"``.
        host, port, path, transport: Helpers used when ``address`` is omitted.
        connect_timeout_seconds: Dial + handshake bound (``None``: 10 s).
        request_timeout_seconds: Per-request bound (``None`` or 0: wait forever).
        workflow_edition: Offer exactly this edition.
        token: The endpoint's token (``None``: ``$RLMESH_TOKEN``, else none); a wrong or
            missing one raises ``rlmesh.errors.AuthenticationFailed``.
        tls_ca: For ``tls://`` addresses: the CA bundle to trust (``None``: ``$RLMESH_TLS_CA``,
            else the system store).
        episode_info: Add the runtime keys (``episode_ids``, ``completed_episodes``,
            conformance warnings) to ``info``. Off by default, so ``info`` is exactly
            the env's own (``check_env``'s determinism check needs that).

    Raises:
        ValueError: the endpoint serves several lanes (use :class:`RemoteVectorEnv`).
        ConnectionError: nothing answers at ``address``.
    """

    #: What ``gymnasium.make`` may ask for before connecting; an instance's ``metadata``
    #: lists the one mode its server renders.
    metadata: dict[str, Any] = {"render_modes": ["rgb_array", "ansi", "human", "depth_array"]}

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
        episode_info: bool = False,
        render_mode: str | None = None,
        token: str | None = None,
        tls_ca: Any = None,
    ) -> None:
        kwargs = dial_keywords(locals())
        self._shared: _Shared | None = _connect(_ScalarClient, address, kwargs)
        self._client = self._shared.client
        served = self._client.render_mode
        if render_mode is not None and render_mode != served:
            self.close()
            raise ValueError(
                f"the env at '{self._client.address}' renders {served!r}, not {render_mode!r}; "
                f"the render mode is chosen where the env is served"
            )
        self._episode_info = bool(episode_info)
        self.observation_space = to_gymnasium_space(self._client.observation_space_spec)
        self.action_space = to_gymnasium_space(self._client.action_space_spec)
        self.metadata = dict(self._client.metadata)
        self.metadata["render_modes"] = (
            [served] if served else []
        )  # the served mode is the only one
        self.render_mode = served
        self.spec = _spec_of(self._client, kwargs={"address": self._client.address})

    @property
    def client(self) -> Any:
        """The underlying :class:`rlmesh.numpy.RemoteEnv` connection."""
        return self._client

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode on the served env (``seed`` seeds it there, and ``np_random`` here)."""
        super().reset(seed=seed)
        client = self._client
        client.runtime = {}
        obs, info = client.reset(seed=seed, options=options)
        if self._shared is not None:
            self._shared.owner = self
        return obs, _filtered(info, client.runtime if self._episode_info else None)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Apply one action: ``(obs, reward, terminated, truncated, info)``."""
        shared = self._shared
        if shared is not None and shared.refs > 1:  # only a shared session needs the check
            self._check_owner()  # (not a call per step otherwise: the straight road)
        self._client.runtime = {}
        return self._result(
            *self._client.step(action)
        )  # the client's straight step road (issue 24)

    def step_async(self, action: Any) -> None:
        """Send one step and return at once; :meth:`step_wait` returns its result (see
        :meth:`rlmesh.numpy.RemoteEnv.step_async`)."""
        self._check_owner()
        self._client.step_async(action)

    def _check_owner(self) -> None:
        """Never step another handle's episode on a shared session (issue 29)."""
        shared = self._shared
        if (
            shared is not None
            and shared.refs > 1
            and shared.owner is not self
            and shared.owner is not None
        ):
            raise _shared_step_error(str(self._client.address))

    def step_wait(self) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """The result of the step :meth:`step_async` sent (``NoAsyncCallError`` if none)."""
        self._client.runtime = {}
        return self._result(*self._client.step_wait())

    def _result(
        self,
        obs: Any,
        reward: SupportsFloat,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
    ) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        return (
            obs,
            reward,
            terminated,
            truncated,
            _filtered(info, self._client.runtime if self._episode_info else None),
        )

    def render(self) -> Any:
        """The served env's frame (an ``HxWx3`` uint8 array for ``rgb_array``), or ``None``."""
        return self._client.render()

    def close(self) -> None:
        """Detach from the endpoint (the server keeps running). Idempotent."""
        shared, self._shared = getattr(self, "_shared", None), None
        if shared is not None:
            if shared.owner is self:
                shared.owner = None
            shared.release()

    def __repr__(self) -> str:
        return f"<RemoteEnv address='{getattr(getattr(self, '_client', None), 'address', '?')}'>"
