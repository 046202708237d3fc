"""Dialing an endpoint: timeouts checked, a dial's failures and a handshake's refusals worded.

What :meth:`rlmesh.client._session.ClientSession.connect` and the constructor it calls
say when an endpoint cannot be reached or does not take this client (CLT-3, CLT-5).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .._termtext import term_safe
from ..errors import (
    AuthenticationFailed,
    ConnectFailed,
    EndpointBusy,
    HandshakeError,
    RequestTimeout,
    TLSError,
)
from ..transport import Address, Connection, dial
from ..wire import frames, messages as m

__all__ = ["DIAL_KEYWORDS", "check_timeout", "dial_endpoint", "dial_keywords", "refusal"]


#: The keywords with which a client dials one endpoint (``RemoteEnv``'s, but ``address`` and
#: ``wait_for_slot``): what a wrapper that owns such a client passes through as given.
DIAL_KEYWORDS = (
    "host",
    "port",
    "path",
    "transport",
    "connect_timeout_seconds",
    "request_timeout_seconds",
    "workflow_edition",
    "token",
    "tls_ca",
)


def dial_keywords(given: Mapping[str, Any]) -> dict[str, Any]:
    """The dial keywords among a wrapper's constructor ``locals()`` (those it takes)."""
    return {name: given[name] for name in DIAL_KEYWORDS if name in given}


def check_timeout(name: str, value: float | None) -> float | None:
    """CLT-5: ``None``/``0`` = wait forever; negative or non-finite -> ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a non-negative finite float or None, got {type(value).__name__}"
        )
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative finite float or None")
    return float(value) or None


def dial_endpoint(
    address: Address, service: str, noun: str, ct: float, budget: float, tls_ca: Any = None
) -> Connection:
    """Dial ``address`` within ``budget`` seconds: a connection on the pre-handshake limits."""
    url = address.url
    server = "ModelServer" if service == "model" else "EnvServer"
    peer = "remote model" if service == "model" else "remote environment"
    try:
        sock = dial(address, budget, tls_ca=tls_ca) if address.tls else dial(address, budget)
    except TimeoutError:
        raise RequestTimeout(
            f"{peer} connect timed out after {ct:.3f}s (dialing {url}); is the {server} running and reachable?",
            timeout_seconds=ct,
        ) from None
    except TLSError:
        raise  # it names the host and what failed
    except OSError as exc:
        raise ConnectFailed(
            f"could not connect to {noun} at '{url}'; is the {server} running? ({exc})"
        ) from exc
    return Connection(sock, frames.PRE_HANDSHAKE_LIMITS)


def refusal(reply: Any, service: str, noun: str, url: str) -> Exception | None:
    """The error a handshake reply stands for (``Busy``, ``Incompatible``, ``Error``), or ``None``."""
    if isinstance(reply, m.Busy):
        return EndpointBusy(f"{noun} at '{url}' is busy: {term_safe(reply.message)}")
    if isinstance(reply, m.Incompatible):
        if getattr(reply, "reason", "") == m.UNAUTHENTICATED:
            server = "model server" if service == "model" else "env server"
            return AuthenticationFailed(
                f"the {server} at '{url}' refused this client: {term_safe(reply.message)}"
            )
        return HandshakeError(f"handshake failed: {term_safe(reply.message)}")
    if isinstance(reply, m.Error):
        return ConnectFailed(
            f"connected to {noun} at '{url}', but the handshake failed ({term_safe(reply.message)})"
        )
    return None
