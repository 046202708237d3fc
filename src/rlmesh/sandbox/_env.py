"""``SandboxEnv`` / ``SandboxVectorEnv``: a remote env client that owns its sandbox (SBX-20..22).

Construction classifies the source, builds (image or venv) if needed, starts the
server, waits until it answers and dials it; ``close()`` detaches and stops the
sandbox. Everything else (reset, step, render, spaces, contract, metadata) is the
remote client's. The ``rlmesh.numpy`` flavours decode to ``numpy.ndarray``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..client._env import RemoteEnv, RemoteVectorEnv
from ..errors import ConnectionLost, SessionClosed
from ._errors import SandboxCrashed, SandboxStartError
from ._launch import check_timeout, start_env_sandbox
from ._options import SandboxBuild, SandboxInfo, SandboxRuntime

__all__ = ["SandboxEnv", "SandboxVectorEnv", "ScalarSandbox", "VectorSandbox"]

_VECTOR_PARAMS = ("num_envs", "vectorization_mode")

_T = TypeVar("_T")


def check_single_env_params(params: Mapping[str, Any]) -> None:
    """``SandboxEnv``'s refusal of the vector keywords among its ``make()`` params.

    Raises:
        TypeError: ``num_envs`` or ``vectorization_mode`` given (they are ``SandboxVectorEnv``'s).
    """
    for key in _VECTOR_PARAMS:
        if key in params:
            raise TypeError(
                f"SandboxEnv is single-env only; use SandboxVectorEnv(source, num_envs=...) ({key}= given)"
            )


def check_vector_args(num_envs: Any, vectorization_mode: Any) -> None:
    """``SandboxVectorEnv``'s lane count (an int >= 2) and ``vectorization_mode`` (None, sync, async).

    Raises:
        TypeError: ``num_envs`` is not an int.
        ValueError: fewer than two lanes, or an unknown mode.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int):
        raise TypeError(f"num_envs must be an int, got {type(num_envs).__name__}")
    if num_envs < 2:
        raise ValueError(
            f"SandboxVectorEnv needs num_envs >= 2, got {num_envs}; use SandboxEnv for one env"
        )
    if vectorization_mode not in (None, "sync", "async"):
        raise ValueError(
            f"vectorization_mode must be None, 'sync' or 'async', got {vectorization_mode!r}"
        )


class SandboxMixin:
    """What the sandbox adds to a remote client: ownership of the server, crash reports, close."""

    _handle: Any = None
    _sandbox_info: SandboxInfo | None = None

    def _attach(
        self,
        source: Any,
        *,
        num_envs: int,
        vectorization_mode: str | None,
        build: SandboxBuild | None,
        runtime: SandboxRuntime | None,
        backend: str | None,
        connect_timeout_seconds: float,
        params: dict[str, Any],
    ) -> None:
        started = time.monotonic()
        timeout = check_timeout(connect_timeout_seconds)
        handle, info = start_env_sandbox(
            source,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            build=build,
            runtime=runtime,
            backend=backend,
            connect_timeout_seconds=timeout,
            params=params,
        )
        self.source = source
        self._handle = handle
        self._sandbox_info = info
        try:
            remaining = max(timeout - (time.monotonic() - started), 5.0)
            self._connect_remote(handle.address, remaining, getattr(handle, "token", None))
        except ConnectionError as exc:
            logs = handle.logs_tail()
            self._stop_handle()
            raise SandboxStartError(
                f"could not attach to {handle.describe()}: {exc}; recent logs:\n{logs}"
            ) from exc
        except BaseException:
            self._stop_handle()
            raise

    def _connect_remote(
        self, address: str, connect_timeout_seconds: float, token: str | None = None
    ) -> None:
        """Dial the started server with its token (the client class's constructor; a flavour
        may override)."""
        super().__init__(address, connect_timeout_seconds=connect_timeout_seconds, token=token)  # type: ignore[call-arg]

    @property
    def sandbox(self) -> SandboxInfo:
        """Where this sandbox runs: ``SandboxInfo(requested_source, resolved_source, address, container_id)``."""
        assert self._sandbox_info is not None
        return self._sandbox_info

    def _stop_handle(self) -> None:
        handle = self._handle
        if handle is not None:
            handle.stop()  # raises on a transient failure; the handle stays for a retry
            self._handle = None

    def _crashed(self, exc: BaseException) -> BaseException | None:
        handle = self._handle
        if handle is None or isinstance(exc, SessionClosed):
            return None
        deadline = time.monotonic() + 2.0
        alive = handle.alive()
        while (
            alive is True and time.monotonic() < deadline
        ):  # the socket closes a moment before the exit
            time.sleep(0.1)
            alive = handle.alive()
        if alive is not False:
            return None
        return SandboxCrashed(
            f"the sandboxed env server died ({handle.describe()}): {exc}; last log lines:\n{handle.logs_tail(20)}"
        )

    def _guarded(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        try:
            return fn(*args, **kwargs)
        except ConnectionLost as exc:
            crashed = self._crashed(exc)
            if crashed is not None:
                raise crashed from exc
            raise

    def step(self, action: Any) -> Any:
        return self._guarded(super().step, action)  # type: ignore[misc]

    def render(self, *, env_index: int = 0) -> Any:
        return self._guarded(super().render, env_index=env_index)  # type: ignore[misc]

    def close(self) -> None:
        """Detach, then stop and remove the sandbox (SBX-19). A failed stop can be retried."""
        detach_error: BaseException | None = None
        try:
            super().close()  # type: ignore[misc]
        except Exception as exc:
            detach_error = exc
        self._stop_handle()
        if detach_error is not None:
            raise detach_error

    def shutdown(self, reason: str = "owner shutdown") -> bool:
        """Stop the sandbox (the container / child process goes away); always ``True``."""
        self.close()
        return True

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            session = getattr(self, "_session", None)
            if session is not None and not session.closed:
                session.detach()
        with contextlib.suppress(Exception):
            self._stop_handle()

    def __repr__(self) -> str:
        info = self._sandbox_info
        if info is None:
            return f"{type(self).__name__}(<not started>)"
        return (
            f"{type(self).__name__}(source={info.requested_source!r}, address={info.address!r}, "
            f"container_id={info.container_id!r}, backend={info.backend!r})"
        )


class ScalarSandbox(SandboxMixin):
    """Build an env image (or venv) and own the server behind a single-env client (SBX-20).

    Args:
        source: ``gym://CartPole-v1``, ``hf://org/repo@sha[:suite[/task]]``, ``docker://img:tag``
            or a bare gym id / image reference (see ``docs/sandboxes.md``).
        build: :class:`SandboxBuild` options of a build-from-source sandbox.
        runtime: :class:`SandboxRuntime` ``docker run`` options of a prebuilt image.
        connect_timeout_seconds: How long the server may take to become ready (``make()`` included).
        backend: ``"auto"`` (default, or ``$RLMESH_SANDBOX_BACKEND``), ``"docker"`` or ``"venv"``.
        **params: ``make()`` keyword arguments (JSON values).

    Raises:
        TypeError: ``num_envs`` / ``vectorization_mode`` in params (use :class:`SandboxVectorEnv`),
            or a param named like a build/runtime option.
        DockerUnavailable: the Docker backend is needed and Docker is missing or down.
        SandboxBuildError, SandboxStartError: with the last log lines.
    """

    def __init__(
        self,
        source: str,
        /,
        *,
        build: SandboxBuild | None = None,
        runtime: SandboxRuntime | None = None,
        connect_timeout_seconds: float = 30.0,
        backend: str | None = None,
        **params: Any,
    ) -> None:
        check_single_env_params(params)
        self._attach(
            source,
            num_envs=1,
            vectorization_mode=None,
            build=build,
            runtime=runtime,
            backend=backend,
            connect_timeout_seconds=connect_timeout_seconds,
            params=params,
        )

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Start an episode (see :meth:`rlmesh.RemoteEnv.reset`); a dead server raises ``SandboxCrashed``."""
        out: tuple[Any, dict[str, Any]] = self._guarded(super().reset, seed=seed, options=options)  # type: ignore[misc]
        return out


class VectorSandbox(SandboxMixin):
    """Build an env image (or venv) and own ``num_envs`` lanes in ONE sandbox (SBX-21, DELTA-26).

    ``vectorization_mode=None`` serves ``num_envs`` independent ``make()`` lanes; ``"sync"`` /
    ``"async"`` build a Gymnasium vector env inside the sandbox.
    """

    def __init__(
        self,
        source: str,
        /,
        num_envs: int,
        *,
        vectorization_mode: str | None = None,
        build: SandboxBuild | None = None,
        runtime: SandboxRuntime | None = None,
        connect_timeout_seconds: float = 30.0,
        backend: str | None = None,
        **params: Any,
    ) -> None:
        check_vector_args(num_envs, vectorization_mode)
        self._attach(
            source,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            build=build,
            runtime=runtime,
            backend=backend,
            connect_timeout_seconds=connect_timeout_seconds,
            params=params,
        )

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | None = None,
        env_indices: Sequence[int] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all lanes or ``env_indices`` (see :meth:`rlmesh.RemoteVectorEnv.reset`)."""
        out: tuple[Any, dict[str, Any]] = self._guarded(
            super().reset,  # type: ignore[misc]
            seed=seed,
            options=options,
            env_indices=env_indices,
        )
        return out


class SandboxEnv(ScalarSandbox, RemoteEnv):
    __doc__ = ScalarSandbox.__doc__


class SandboxVectorEnv(VectorSandbox, RemoteVectorEnv):
    __doc__ = VectorSandbox.__doc__
