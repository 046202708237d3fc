"""Sandboxes as Gymnasium objects: an env in its own dependency stack, served and connected.

The sandbox half (classify, build, start, crash reports, stop) is
:mod:`rlmesh.sandbox`'s ``ScalarSandbox`` / ``VectorSandbox``, argument checks
included; this module adds the Gymnasium half: the client class, ``episode_info``,
``render_mode`` and a spec whose ``make()`` starts another sandbox.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import VectorEnv

from rlmesh.sandbox import SandboxBuild, SandboxRuntime
from rlmesh.sandbox._env import SandboxMixin, ScalarSandbox, VectorSandbox

from ._env import RemoteEnv
from ._shared import _Handle, _spec_of
from ._vector import RemoteVectorEnv

__all__ = ["SandboxEnv", "SandboxVectorEnv"]


def _sandbox_spec(
    env: Any,
    source: str,
    *,
    connect_timeout_seconds: float,
    build: SandboxBuild | None,
    runtime: SandboxRuntime | None,
    backend: str | None,
    params: dict[str, Any],
    **lanes: Any,
) -> EnvSpec | None:
    """A spec whose ``make()`` starts another sandbox of the same source (``check_env`` calls it)."""
    options = {
        k: v
        for k, v in (("build", build), ("runtime", runtime), ("backend", backend))
        if v is not None
    }
    kwargs = {
        "source": source,
        **lanes,
        "connect_timeout_seconds": connect_timeout_seconds,
        **options,
        **params,
    }
    spec = _spec_of(env.client, vector=isinstance(env, VectorEnv), kwargs=kwargs)
    if spec is None:
        return None
    spec.entry_point = f"rlmesh.gymnasium:{type(env).__name__}"
    return spec


def _make_params(params: dict[str, Any], render_mode: str | None) -> dict[str, Any]:
    """The env's ``make()`` keywords: ``params``, with ``render_mode`` when one is asked for."""
    return dict(params) if render_mode is None else {**params, "render_mode": render_mode}


class _GymSandbox(SandboxMixin):
    """What both Gymnasium sandboxes add to the sandbox: their client class and ``episode_info``."""

    #: The Gymnasium client this sandbox connects with (its constructor dials the server).
    _remote: ClassVar[Any]
    _episode_info_option = False

    def _connect_remote(
        self, address: str, connect_timeout_seconds: float, token: str | None = None
    ) -> None:
        self._remote.__init__(
            self,
            address,
            connect_timeout_seconds=connect_timeout_seconds,
            episode_info=self._episode_info_option,
            token=token,
        )

    __del__ = _Handle.__del__  # close(), which stops the sandbox, not SandboxMixin's detach

    def __repr__(self) -> str:
        return SandboxMixin.__repr__(self)


class SandboxEnv(_GymSandbox, ScalarSandbox, RemoteEnv):
    """An env in its own dependency stack as a real :class:`gymnasium.Env` (SB3 takes it as is).

    Builds (or reuses) the sandbox for ``source`` exactly as :class:`rlmesh.SandboxEnv` does
    (Docker image or cached venv; see docs/sandboxes.md), starts the env server there and
    connects to it; :meth:`close` stops the sandbox. Everything else is
    :class:`RemoteEnv`'s: Gymnasium spaces, NumPy values, the env's own ``info``.

    Args:
        source: ``gym://CartPole-v1``, ``hf://org/repo@sha``, ``docker://img:tag`` ...
        build, runtime, backend, connect_timeout_seconds: as for :class:`rlmesh.SandboxEnv`.
        episode_info: Add the runtime keys to ``info`` (see :class:`RemoteEnv`).
        render_mode: Passed to the env's ``make()`` inside the sandbox (``"rgb_array"``).
        **params: Further ``make()`` keyword arguments (JSON values).

    Raises:
        DockerUnavailable, SandboxBuildError, SandboxStartError: as :class:`rlmesh.SandboxEnv`.
        SandboxCrashed: from ``reset``/``step``/``render`` when the sandboxed server died.
    """

    _remote = RemoteEnv

    def __init__(
        self,
        source: str,
        *,
        build: SandboxBuild | None = None,
        runtime: SandboxRuntime | None = None,
        connect_timeout_seconds: float = 30.0,
        backend: str | None = None,
        episode_info: bool = False,
        render_mode: str | None = None,
        **params: Any,
    ) -> None:
        self._episode_info_option = bool(episode_info)
        ScalarSandbox.__init__(
            self,
            source,
            build=build,
            runtime=runtime,
            connect_timeout_seconds=connect_timeout_seconds,
            backend=backend,
            **_make_params(params, render_mode),
        )
        self.spec = _sandbox_spec(
            self,
            source,
            connect_timeout_seconds=connect_timeout_seconds,
            build=build,
            runtime=runtime,
            backend=backend,
            params=params,
        )

    def reset(  # type: ignore[override]  # Gymnasium's signature, not the lane client's
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode in the sandbox (see :meth:`RemoteEnv.reset`)."""
        return self._guarded(RemoteEnv.reset, self, seed=seed, options=options)

    def render(self) -> Any:  # type: ignore[override]  # Gymnasium's signature, not the lane client's
        """The sandboxed env's frame (see :meth:`RemoteEnv.render`)."""
        return self._guarded(RemoteEnv.render, self)


class SandboxVectorEnv(_GymSandbox, VectorSandbox, RemoteVectorEnv):
    """``num_envs`` lanes of an env in ONE sandbox as a real :class:`gymnasium.vector.VectorEnv`.

    ``vectorization_mode=None`` serves ``num_envs`` independent ``make()`` lanes (NEXT_STEP
    autoreset); ``"sync"``/``"async"`` build a Gymnasium vector env inside the sandbox.
    Other arguments as :class:`SandboxEnv`.
    """

    _remote = RemoteVectorEnv

    def __init__(
        self,
        source: str,
        num_envs: int,
        *,
        vectorization_mode: str | None = None,
        build: SandboxBuild | None = None,
        runtime: SandboxRuntime | None = None,
        connect_timeout_seconds: float = 30.0,
        backend: str | None = None,
        episode_info: bool = False,
        render_mode: str | None = None,
        **params: Any,
    ) -> None:
        self._episode_info_option = bool(episode_info)
        VectorSandbox.__init__(
            self,
            source,
            num_envs,
            vectorization_mode=vectorization_mode,
            build=build,
            runtime=runtime,
            connect_timeout_seconds=connect_timeout_seconds,
            backend=backend,
            **_make_params(params, render_mode),
        )
        self.spec = _sandbox_spec(
            self,
            source,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            connect_timeout_seconds=connect_timeout_seconds,
            build=build,
            runtime=runtime,
            backend=backend,
            params=params,
        )

    def reset(  # type: ignore[override]  # Gymnasium's signature
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every lane (see :meth:`RemoteVectorEnv.reset`)."""
        return self._guarded(RemoteVectorEnv.reset, self, seed=seed, options=options)

    def render(self) -> tuple[Any, ...] | None:  # type: ignore[override]  # Gymnasium's signature
        """One frame per lane (see :meth:`RemoteVectorEnv.render`)."""
        return self._guarded(RemoteVectorEnv.render, self)

    def close(self, **kwargs: Any) -> None:
        """Detach, then stop and remove the sandbox. Idempotent."""
        SandboxMixin.close(self)
