"""``ServeOptions``: lifecycle knobs of a served endpoint (CFG-1..5, DELTA-9)."""

from __future__ import annotations

import os
from typing import Any

from .._argcheck import positive_seconds
from .._build import validate_edition
from .._token import check_token, resolve_token

__all__ = ["ServeOptions"]

_DEFAULT_DRAIN_SECONDS = 5.0  # SRV-45: embedded Python servers cap the drain at 5 s
_DEFAULT_CLOSE_SECONDS = 5.0  # SRV-45: and env.close() at 5 s


#: The options, in the constructor's order: each is kept as ``_<name>`` (``__slots__``) and
#: read by ``replace`` and ``__repr__`` from this one list.
_OPTIONS = (
    "allow_remote_shutdown",
    "idle_timeout_seconds",
    "drain_timeout_seconds",
    "close_timeout_seconds",
    "workflow_edition",
    "token",
    "insecure_no_auth",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "metrics_address",
)


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
        token: The token every client must send at the handshake (compared in constant
            time; docs/security.md). ``None``: ``$RLMESH_TOKEN`` when set (read here, once),
            else none. A server binding beyond loopback needs one, or ``insecure_no_auth``.
        insecure_no_auth: Serve an address reachable from other hosts without a token (the
            explicit opt-out; anyone who can reach the port can drive the endpoint).
        tls_cert, tls_key: PEM certificate chain and private key: serve TLS (clients dial
            ``tls://host:port``). Both or neither.
        tls_client_ca: PEM CA bundle: also require a client certificate signed by it.
        metrics_address: Serve Prometheus metrics on this ``host:port`` (a bare port binds
            127.0.0.1), on a port of its own (docs/serving.md, "Metrics"); needs the
            ``metrics`` extra. ``None``: no metrics, and nothing counted per step.

    Raises:
        ValueError: a timeout that is not positive, an edition this build cannot drive, a
            TLS certificate without its key, or a bad metrics address.
    """

    __slots__ = tuple(f"_{name}" for name in _OPTIONS)

    def __init__(
        self,
        *,
        allow_remote_shutdown: bool = False,
        idle_timeout_seconds: float | None = None,
        drain_timeout_seconds: float | None = None,
        close_timeout_seconds: float | None = None,
        workflow_edition: str | None = None,
        token: str | None = None,
        insecure_no_auth: bool = False,
        tls_cert: str | os.PathLike[str] | None = None,
        tls_key: str | os.PathLike[str] | None = None,
        tls_client_ca: str | os.PathLike[str] | None = None,
        metrics_address: str | None = None,
    ) -> None:
        self._token = resolve_token(check_token(token))
        self._insecure_no_auth = bool(insecure_no_auth)
        self._tls_cert = _path("tls_cert", tls_cert)
        self._tls_key = _path("tls_key", tls_key)
        self._tls_client_ca = _path("tls_client_ca", tls_client_ca)
        if (self._tls_cert is None) != (self._tls_key is None):
            raise ValueError(
                "tls_cert and tls_key go together: pass the certificate chain and its private key "
                "(--tls-cert PATH --tls-key PATH), or neither"
            )
        if self._tls_client_ca is not None and self._tls_cert is None:
            raise ValueError(
                "tls_client_ca needs tls_cert and tls_key: client certificates are a TLS feature"
            )
        if metrics_address is not None:
            if not isinstance(metrics_address, str) or not metrics_address.strip():
                raise ValueError(
                    f"metrics_address must be 'host:port' or a port, got {metrics_address!r}"
                )
            metrics_address = metrics_address.strip()
        self._metrics_address = metrics_address
        self._allow_remote_shutdown = bool(allow_remote_shutdown)
        self._idle_timeout_seconds = positive_seconds("idle_timeout_seconds", idle_timeout_seconds)
        self._drain_timeout_seconds = positive_seconds(
            "drain_timeout_seconds", drain_timeout_seconds
        )
        self._close_timeout_seconds = positive_seconds(
            "close_timeout_seconds", close_timeout_seconds
        )
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

    @property
    def token(self) -> str | None:
        """The token clients must send (``None``: none), ``$RLMESH_TOKEN`` included."""
        return self._token

    @property
    def insecure_no_auth(self) -> bool:
        return self._insecure_no_auth

    @property
    def tls_cert(self) -> str | None:
        return self._tls_cert

    @property
    def tls_key(self) -> str | None:
        return self._tls_key

    @property
    def tls_client_ca(self) -> str | None:
        return self._tls_client_ca

    @property
    def tls(self) -> bool:
        """Whether the endpoint serves TLS (a certificate and key were given)."""
        return self._tls_cert is not None

    @property
    def metrics_address(self) -> str | None:
        return self._metrics_address

    def replace(self, **changes: Any) -> ServeOptions:
        """A copy with ``changes`` applied (the same keywords as the constructor).

        Example:
            >>> ServeOptions(idle_timeout_seconds=5).replace(token="t").idle_timeout_seconds
            5.0
        """
        current: dict[str, Any] = {name: getattr(self, f"_{name}") for name in _OPTIONS}
        unknown = set(changes) - set(current)
        if unknown:
            raise TypeError(f"ServeOptions has no option {sorted(unknown)[0]!r}")
        current.update(changes)
        new = ServeOptions(**current)
        if "token" not in changes:  # as it is here, not re-read from $RLMESH_TOKEN
            object.__setattr__(new, "_token", self._token)
        return new

    def __repr__(self) -> str:
        shown = [
            f"{name}={getattr(self, name)!r}"
            for name in _OPTIONS
            if name != "token" and getattr(self, name) not in (None, False)
        ]
        if self._token is not None:
            shown.append("token=<set>")  # never the token itself
        return f"ServeOptions({', '.join(shown)})"

    # -- effective values ---------------------------------------------------------------

    def remote_shutdown_allowed(self) -> bool:
        """The option, or ``RLMESH_ALLOW_REMOTE_SHUTDOWN`` turning it on (CFG-2)."""
        env = os.environ.get("RLMESH_ALLOW_REMOTE_SHUTDOWN", "").strip().lower()
        return self._allow_remote_shutdown or env in ("1", "true")

    def drain_seconds(self) -> float:
        return self._drain_timeout_seconds or _DEFAULT_DRAIN_SECONDS

    def close_seconds(self) -> float:
        return self._close_timeout_seconds or _DEFAULT_CLOSE_SECONDS


def _path(name: str, value: str | os.PathLike[str] | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(
            f"{name} must be a path (str or os.PathLike) or None, got {type(value).__name__}"
        )
    text = os.fspath(value)
    if not text:
        return None
    return text
