"""``ServeOptions``: lifecycle knobs of a served endpoint (CFG-1..5, DELTA-9)."""

from __future__ import annotations

import math
import os

from .._build import validate_edition

__all__ = ["ServeOptions"]

_DEFAULT_DRAIN_SECONDS = 5.0  # SRV-45: embedded Python servers cap the drain at 5 s
_DEFAULT_CLOSE_SECONDS = 5.0  # SRV-45: and env.close() at 5 s


def _positive(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number or None, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be positive")
    return float(value)


class ServeOptions:
    """Serve lifecycle options (keyword-only, immutable).

    Args:
        allow_remote_shutdown: Accept a client's ``shutdown()`` request. Off by
            default; ``RLMESH_ALLOW_REMOTE_SHUTDOWN=1|true`` can turn it on, never off.
        idle_timeout_seconds: Stop serving after this long with no session request
            (reset/step/render/close/configure) in flight (CFG-3). ``None``: never.
        drain_timeout_seconds: How long shutdown waits for an in-flight request.
        close_timeout_seconds: How long shutdown waits for ``env.close()``.
        workflow_edition: The edition this endpoint declares (DELTA-9); ``""`` means none.

    Raises:
        ValueError: a timeout that is not positive, or an edition this build cannot drive.
    """

    __slots__ = (
        "_allow_remote_shutdown",
        "_close_timeout_seconds",
        "_drain_timeout_seconds",
        "_idle_timeout_seconds",
        "_workflow_edition",
    )

    def __init__(
        self,
        *,
        allow_remote_shutdown: bool = False,
        idle_timeout_seconds: float | None = None,
        drain_timeout_seconds: float | None = None,
        close_timeout_seconds: float | None = None,
        workflow_edition: str | None = None,
    ) -> None:
        self._allow_remote_shutdown = bool(allow_remote_shutdown)
        self._idle_timeout_seconds = _positive("idle_timeout_seconds", idle_timeout_seconds)
        self._drain_timeout_seconds = _positive("drain_timeout_seconds", drain_timeout_seconds)
        self._close_timeout_seconds = _positive("close_timeout_seconds", close_timeout_seconds)
        if workflow_edition is not None and not workflow_edition.strip():
            workflow_edition = None
        self._workflow_edition = (
            None if workflow_edition is None else validate_edition(workflow_edition)
        )

    @property
    def allow_remote_shutdown(self) -> bool:
        return self._allow_remote_shutdown

    @property
    def idle_timeout_seconds(self) -> float | None:
        return self._idle_timeout_seconds

    @property
    def drain_timeout_seconds(self) -> float | None:
        return self._drain_timeout_seconds

    @property
    def close_timeout_seconds(self) -> float | None:
        return self._close_timeout_seconds

    @property
    def workflow_edition(self) -> str | None:
        return self._workflow_edition

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, name):
            raise AttributeError(f"ServeOptions is immutable; cannot set {name!r}")
        object.__setattr__(self, name, value)

    # -- effective values ---------------------------------------------------------------

    def remote_shutdown_allowed(self) -> bool:
        """The option, or ``RLMESH_ALLOW_REMOTE_SHUTDOWN`` turning it on (CFG-2)."""
        env = os.environ.get("RLMESH_ALLOW_REMOTE_SHUTDOWN", "").strip().lower()
        return self._allow_remote_shutdown or env in ("1", "true")

    def drain_seconds(self) -> float:
        return self._drain_timeout_seconds or _DEFAULT_DRAIN_SECONDS

    def close_seconds(self) -> float:
        return self._close_timeout_seconds or _DEFAULT_CLOSE_SECONDS
