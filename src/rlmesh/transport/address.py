"""Endpoint addresses (ADR-1..4).

Accepted forms: ``"tcp://host:port"``, ``"host:port"``, ``"[::1]:port"``, a bare
``"port"`` (bind only), ``"unix:///abs/path"`` and ``"unix://relative"`` (resolved
against the cwd). Connecting also accepts ``"http://host:port"``. Keyword helpers
``host=``/``port=``/``path=``/``transport=`` are the alternative to ``address``.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys
from dataclasses import dataclass

__all__ = [
    "Address",
    "is_loopback",
    "looks_like_address",
    "parse_bind_address",
    "parse_connect_address",
    "resolve_address",
]

#: ``host:port`` or ``[v6]:port`` with a numeric port (the host may be anything without a
#: colon, a slash or a space; whether it resolves is the dialer's business).
_HOST_PORT = re.compile(r"^(?:\[[^\]]*\]|[^\s:/\[\]]*):\d+$")


@dataclass(frozen=True)
class Address:
    """A normalized endpoint: ``tcp`` with host and port (``tls``: with TLS on top), or
    ``unix`` with a path."""

    transport: str
    host: str = ""
    port: int = 0
    path: str = ""
    tls: bool = False

    @property
    def url(self) -> str:
        """``tcp://127.0.0.1:5555``, ``tls://host:5555`` or ``unix:///abs/path``."""
        if self.transport == "unix":
            return f"unix://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'tls' if self.tls else 'tcp'}://{host}:{self.port}"

    def __str__(self) -> str:
        return self.url


def _port(value: object, raw: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"port must be an int, got {type(value).__name__}")
    try:
        port = int(value)
    except ValueError:
        raise ValueError(f"invalid address: {raw!r} has an invalid port {value!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"invalid address: port {port} is out of range 0..65535")
    return port


def _unix(path: str, raw: str) -> Address:
    if sys.platform == "win32":
        raise ValueError(
            f"invalid address: {raw!r}: unix sockets are unavailable on Windows; use tcp://host:port"
        )
    if not path:
        raise ValueError(f"invalid address: {raw!r} names no socket path")
    return Address("unix", path=os.path.abspath(path))


def _split_host_port(rest: str, raw: str, *, bind: bool) -> Address:
    if rest.startswith("["):
        host, sep, tail = rest[1:].partition("]")
        if not sep or not tail.startswith(":"):
            raise ValueError(f"invalid address: {raw!r}; expected [ipv6]:port")
        port_s = tail[1:]
    elif rest.count(":") == 1:
        host, _, port_s = rest.partition(":")
    elif ":" not in rest and bind and rest.isdigit():
        host, port_s = "", rest
    else:
        raise ValueError(
            f"invalid address: {raw!r}; expected host:port, tcp://host:port or unix:///path"
        )
    host = host.strip()
    if bind and host in ("", "localhost"):
        host = "127.0.0.1"  # ADR-2
    if not bind and not host:
        raise ValueError(f"invalid address: {raw!r} needs a host")
    if not port_s:
        raise ValueError(f"invalid address: {raw!r} needs a port")
    return Address("tcp", host=host, port=_port(port_s, raw))


def _parse(address: str, *, bind: bool) -> Address:
    if not isinstance(address, str):
        raise TypeError(f"address must be a str, got {type(address).__name__}")
    raw = address
    address = address.strip()
    if not address:
        raise ValueError("invalid address: the address is empty")
    scheme, sep, rest = address.partition("://")
    if not sep:
        return _split_host_port(address, raw, bind=bind)
    scheme = scheme.lower()
    if scheme == "unix":
        return _unix(rest, raw)
    if scheme == "tcp" or (scheme == "http" and not bind):
        return _split_host_port(rest.rstrip("/"), raw, bind=bind)
    if scheme == "tls":
        addr = _split_host_port(rest.rstrip("/"), raw, bind=bind)
        return Address("tcp", host=addr.host, port=addr.port, tls=True)
    if scheme == "https":
        raise ValueError(f"invalid address: {raw!r}: https:// is reserved for control-plane URLs")
    raise ValueError(f"invalid address: unsupported address scheme '{scheme}' in {raw!r}")


def parse_bind_address(address: str) -> Address:
    """Parse an address to bind; a bare port or empty host binds 127.0.0.1 (ADR-2)."""
    return _parse(address, bind=True)


def parse_connect_address(address: str) -> Address:
    """Parse an address to dial (needs a host and a port, or a unix path)."""
    return _parse(address, bind=False)


def resolve_address(
    address: str | None,
    *,
    host: str | None = None,
    port: int | None = None,
    path: str | None = None,
    transport: str | None = None,
    bind: bool,
) -> Address:
    """Combine ``address`` or the keyword helpers into one :class:`Address` (ADR-3).

    Raises:
        ValueError: conflicting or missing parts.
        TypeError: a port that is not an int.
    """
    helpers = host is not None or port is not None or path is not None or transport is not None
    if address is not None:
        if helpers:
            raise ValueError(
                "pass either address or the host/port/path/transport helpers, not both"
            )
        return parse_bind_address(address) if bind else parse_connect_address(address)
    if transport is not None and transport not in ("tcp", "unix"):
        raise ValueError(f"transport must be 'tcp' or 'unix', got {transport!r}")
    if path is not None:
        if host is not None or port is not None:
            raise ValueError("path excludes host and port")
        if transport == "tcp":
            raise ValueError("path needs transport='unix'")
        return _unix(path, path)
    if transport == "unix":
        raise ValueError("transport='unix' needs path=")
    if port is not None:
        if isinstance(port, bool) or not isinstance(port, int):
            raise TypeError(f"port must be an int, got {type(port).__name__}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {port}")
    if bind:
        h = (host or "").strip()
        return Address("tcp", host="127.0.0.1" if h in ("", "localhost") else h, port=port or 0)
    if not helpers:
        raise ValueError("address or host/port is required")
    if port is None:
        raise ValueError("port is required when connecting with host/path helpers")
    h = (host or "127.0.0.1").strip()
    return Address("tcp", host=h or "127.0.0.1", port=port)


def looks_like_address(text: str) -> bool:
    """Whether ``text`` is spelled as an endpoint address, valid or not.

    A ``scheme://...`` (``tcp://``, ``unix://``, ...), a ``host:port`` or ``[v6]:port``
    with a numeric port, or a bare port. A string of none of these shapes can never be
    dialed, so callers may read it as something else (a Gymnasium id such as
    ``"CartPole-v1"``, ``"ALE/Pong-v5"`` or ``"module:EnvId"``); one of these shapes is
    always an address, so ``"localhost:5555"`` is never taken for an id.

    >>> [looks_like_address(s) for s in ("localhost:5555", "tcp://h:1", "unix:///tmp/s", "[::1]:80")]
    [True, True, True, True]
    >>> [looks_like_address(s) for s in ("CartPole-v1", "ALE/Pong-v5", "metaworld:Meta-World/MT1")]
    [False, False, False]
    """
    s = text.strip()
    return "://" in s or s.isdigit() or bool(_HOST_PORT.match(s))


def is_loopback(address: Address) -> bool:
    """Whether ``address`` is reachable only from this host: a unix socket, or a TCP host
    that is (or resolves only to) a loopback address. A name that does not resolve counts
    as reachable from elsewhere (the cautious answer; binding it fails anyway).

    Example:
        >>> is_loopback(parse_bind_address("127.0.0.1:0")), is_loopback(parse_bind_address("0.0.0.0:0"))
        (True, False)
    """
    if address.transport == "unix":
        return True
    host = address.host.strip("[]").split("%")[0]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    try:
        return bool(addresses) and all(
            ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses
        )
    except ValueError:
        return False
