"""Readiness probes: ``ping`` an endpoint without taking its session (RDY-2, OPP-3).

Public as ``rlmesh.serve.ping`` / ``wait_ready`` / ``Health``; it lives in ``transport``
because a ping is one pre-handshake frame each way, below both clients and servers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..errors import ConnectFailed, ConnectionLost, ProtocolException, RequestTimeout
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
        sessions_in_use: Sessions being served now.
        session_limit: The most sessions the endpoint serves at once (``sessions=N``; 1 for
            a single-session endpoint).
    """

    address: str
    state: str
    service: str
    generation: str
    latency_ms: float
    sessions_in_use: int = 0
    session_limit: int = 1


def ping(address: str, *, timeout_seconds: float = 5.0) -> Health:
    """Probe an endpoint once. Works before (and without) a handshake.

    Raises:
        ConnectFailed: nothing answers at ``address`` (or it is not an rlmesh endpoint).
        RequestTimeout: no answer within ``timeout_seconds``.
    """
    addr = parse_connect_address(address)
    started = time.perf_counter()
    try:
        sock = dial(addr, timeout_seconds)
    except TimeoutError:
        raise RequestTimeout(
            f"no answer from '{addr.url}' within {timeout_seconds:.3f}s",
            timeout_seconds=timeout_seconds,
        ) from None
    except OSError as exc:
        raise ConnectFailed(f"could not connect to '{addr.url}': {exc}") from exc
    conn = Connection(sock, frames.PRE_HANDSHAKE_LIMITS)
    try:
        conn.send(encode_message(m.Ping(), 1))
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
    if counts is not None and counts.limit > 0:  # a multi-session endpoint counts its sessions
        return Health(
            addr.url,
            reply.state,
            reply.service,
            reply.generation,
            latency,
            counts.sessions,
            counts.limit,
        )
    in_use = (
        1 if reply.state == "busy" else 0
    )  # a single-session endpoint: busy = its one session is taken
    return Health(addr.url, reply.state, reply.service, reply.generation, latency, in_use, 1)


def wait_ready(
    address: str, *, timeout_seconds: float = 30.0, interval_seconds: float = 0.05
) -> Health:
    """Ping until the endpoint answers or ``timeout_seconds`` pass (bounded polling).

    Raises:
        RequestTimeout: the endpoint did not answer in time; the last error is the cause.
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
            return ping(address, timeout_seconds=min(remaining, 5.0))
        except (ConnectFailed, RequestTimeout) as exc:
            last = exc
        time.sleep(min(interval_seconds, max(deadline - time.monotonic(), 0)))
