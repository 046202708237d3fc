"""Readiness probes: ``ping`` an endpoint without taking its session (RDY-2, OPP-3).

Public as ``rlmesh.serve.ping`` / ``wait_ready`` / ``Health``; it lives in ``transport``
because a ping is one pre-handshake frame each way, below both clients and servers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .._token import resolve_token
from ..errors import (
    AuthenticationFailed,
    ConnectFailed,
    ConnectionLost,
    ProtocolException,
    RequestTimeout,
    TLSError,
)
from ..wire import frames, messages as m
from ..wire.messages import decode_header, encode_message
from .address import parse_connect_address
from .connection import Connection, dial

__all__ = ["Health", "ping", "wait_ready"]


@dataclass(frozen=True)
class Health:
    """What an endpoint said to a ping.

    Attributes:
        address: The normalized address probed.
        state: ``"ready"`` (its session is free) or ``"busy"`` (a client holds it).
        service: ``"env"`` or ``"model"``.
        generation: The endpoint's protocol generation.
        latency_ms: Round trip of the probe, dial included.
        sessions_in_use: Sessions being served now (0 when withheld, see ``authenticated``).
        session_limit: The most sessions the endpoint serves at once (``sessions=N``; 1 for
            a single-session endpoint; 0 when withheld).
        authenticated: ``None``: the endpoint needs no token (or does not say); ``True``:
            the probe's token was accepted; ``False``: the endpoint needs a token and the
            probe carried none, so it told only its state (the counts are withheld).
    """

    address: str
    state: str
    service: str
    generation: str
    latency_ms: float
    sessions_in_use: int = 0
    session_limit: int = 1
    authenticated: bool | None = None


def ping(
    address: str, *, timeout_seconds: float = 5.0, token: str | None = None, tls_ca: Any = None
) -> Health:
    """Probe an endpoint once. Works before (and without) a handshake.

    Without a token, an endpoint that needs one answers with its state only; with the
    endpoint's ``token`` (``None``: ``$RLMESH_TOKEN``, else none) also its session counts.

    Raises:
        ConnectFailed: nothing answers at ``address`` (or it is not an rlmesh endpoint).
        AuthenticationFailed: the endpoint refused the probe's token.
        TLSError: the TLS handshake of a ``tls://`` address failed.
        RequestTimeout: no answer within ``timeout_seconds``.
    """
    addr = parse_connect_address(address)
    token = resolve_token(token)
    started = time.perf_counter()
    try:
        sock = dial(addr, timeout_seconds, tls_ca=tls_ca)  # tls_ca: read for tls:// only
    except TimeoutError:
        raise RequestTimeout(
            f"no answer from '{addr.url}' within {timeout_seconds:.3f}s",
            timeout_seconds=timeout_seconds,
        ) from None
    except TLSError:
        raise
    except OSError as exc:
        raise ConnectFailed(f"could not connect to '{addr.url}': {exc}") from exc
    conn = Connection(sock, frames.PRE_HANDSHAKE_LIMITS)
    try:
        conn.send(encode_message(m.AuthPing(token=token) if token else m.Ping(), 1))
        frame = conn.recv_frame()
        assert frame is not None
        reply = decode_header(frame)
        counts = m.decode_sessions_pong(frame) if isinstance(reply, m.Pong) else None
    except TimeoutError:
        raise RequestTimeout(
            f"no answer from '{addr.url}' within {timeout_seconds:.3f}s",
            timeout_seconds=timeout_seconds,
        ) from None
    except (ConnectionLost, ProtocolException) as exc:
        raise ConnectFailed(f"'{addr.url}' did not answer like an rlmesh endpoint: {exc}") from exc
    finally:
        conn.close()
    if not isinstance(reply, m.Pong):
        raise ConnectFailed(f"'{addr.url}' answered a ping with {type(reply).__name__}")
    latency = (time.perf_counter() - started) * 1e3
    auth = counts.auth if counts is not None else ""
    if auth == "refused":
        raise AuthenticationFailed(
            f"the endpoint at '{addr.url}' refused the probe's token: it is not this endpoint's; "
            "pass the endpoint's token (token=, RLMESH_TOKEN, --token-file PATH)"
        )
    if auth == "required":  # the endpoint needs a token: the counts are withheld
        return Health(addr.url, reply.state, reply.service, reply.generation, latency, 0, 0, False)
    authenticated = True if auth == "ok" else None
    if counts is not None and counts.limit > 0:  # a multi-session endpoint counts its sessions
        return Health(
            addr.url,
            reply.state,
            reply.service,
            reply.generation,
            latency,
            counts.sessions,
            counts.limit,
            authenticated,
        )
    in_use = (
        1 if reply.state == "busy" else 0
    )  # a single-session endpoint: busy = its one session is taken
    return Health(
        addr.url, reply.state, reply.service, reply.generation, latency, in_use, 1, authenticated
    )


def wait_ready(
    address: str,
    *,
    timeout_seconds: float = 30.0,
    interval_seconds: float = 0.05,
    token: str | None = None,
    tls_ca: Any = None,
) -> Health:
    """Ping until the endpoint answers or ``timeout_seconds`` pass (bounded polling).

    Raises:
        RequestTimeout: the endpoint did not answer in time; the last error is the cause.
        AuthenticationFailed: the endpoint refused the probe's token (not retried).
        TLSError: the TLS handshake failed (not retried: a certificate does not fix itself).
    """
    deadline = time.monotonic() + timeout_seconds
    last: Exception | None = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimeout(
                f"'{address}' was not ready within {timeout_seconds:.3f}s ({last})",
                timeout_seconds=timeout_seconds,
            ) from last
        try:
            return ping(address, timeout_seconds=min(remaining, 5.0), token=token, tls_ca=tls_ca)
        except TLSError:
            raise
        except (ConnectFailed, RequestTimeout) as exc:
            last = exc
        time.sleep(min(interval_seconds, max(deadline - time.monotonic(), 0)))
