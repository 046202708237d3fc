"""Transports: addresses, a framed stream connection, dialing and listening.

Modules, bottom up: ``address`` (URLs), ``busypoll`` (the busy-poll policy),
``sockets`` (dial, listen), ``stream`` (frames over a socket), ``shm`` (shared-memory rings and their
negotiation), ``connection`` (the stream plus the ring adapter: what sessions hold),
``reactor`` (poller, waker, accept and reaping under the serve loop).
"""

from .address import (
    Address as Address,
    parse_bind_address as parse_bind_address,
    parse_connect_address as parse_connect_address,
    resolve_address as resolve_address,
)
from .connection import Connection as Connection, dial as dial, listen as listen

__all__ = [
    "Address",
    "Connection",
    "dial",
    "listen",
    "parse_bind_address",
    "parse_connect_address",
    "resolve_address",
]
