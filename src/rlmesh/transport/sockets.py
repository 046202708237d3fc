"""Opening stream sockets: dial an address, listen on one (TCP or Unix; TLS on TCP)."""

from __future__ import annotations

import socket
import time
from typing import Any

from ..errors import TLSError
from . import tls
from .address import Address

__all__ = ["dial", "listen"]


def dial(address: Address, timeout: float | None, *, tls_ca: Any = None) -> Any:
    """Connect a stream socket to ``address`` within ``timeout`` seconds.

    A ``tls://`` address also completes the TLS handshake within the same ``timeout``
    (``tls_ca``: see :func:`rlmesh.transport.tls.client_context`) and returns a
    :class:`~rlmesh.transport.tls.TLSSocket`.

    Raises:
        OSError: the connect failed (the caller words the error).
        TimeoutError: the timeout expired.
        TLSError: the TLS handshake failed (the message names the host and why).
        ValueError: ``tls_ca`` names a file that cannot be read.
    """
    if address.tls:
        ctx = tls.client_context(tls_ca)  # before dialing: a bad CA path is the caller's error
        started = time.monotonic()
        raw = _dial(address, timeout)
        remaining = None if timeout is None else max(timeout - (time.monotonic() - started), 0.001)
        try:
            return tls.handshake_client(raw, address.host, ctx, remaining)
        except TimeoutError:
            raw.close()
            raise
        except OSError as exc:
            raw.close()
            if isinstance(exc, tls._ssl().SSLError):
                raise TLSError(tls.describe_failure(exc, address.host)) from None
            raise
    return _dial(address, timeout)


def _dial(address: Address, timeout: float | None) -> socket.socket:
    if address.transport == "unix":
        return _connect(socket.AF_UNIX, address.path, timeout)
    # Try every resolved address in order, as socket.create_connection does: "localhost"
    # often resolves to ::1 first while the server bound 127.0.0.1 (ADR-2).
    infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)
    deadline = None if timeout is None else time.monotonic() + timeout
    last: OSError | None = None
    for family, _, _, _, target in infos:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        try:
            return _connect(family, target, remaining)
        except OSError as exc:
            last = exc
    raise last if last is not None else TimeoutError("timed out")


def _connect(family: int, target: Any, timeout: float | None) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(target)
    except BaseException:
        sock.close()
        raise
    return sock


def listen(address: Address, backlog: int = socket.SOMAXCONN) -> tuple[socket.socket, Address]:
    """Bind and listen; returns the socket and the resolved address (real port for port 0).

    A stale unix socket file is replaced (ADR-4).

    Raises:
        OSError: bind or listen failed (the caller words the error).
    """
    if address.transport == "unix":
        import os

        if os.path.exists(address.path):
            _remove_stale_socket(address.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(address.path)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        return sock, address
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address.host, address.port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    port = sock.getsockname()[1]
    return sock, Address("tcp", host=address.host, port=port, tls=address.tls)


def _remove_stale_socket(path: str) -> None:
    import os
    import stat

    mode = os.lstat(path).st_mode
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"{path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.2)
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nobody listens: stale
        return
    finally:
        probe.close()
    raise FileExistsError(f"another server is listening on unix://{path}")
