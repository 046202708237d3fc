"""Transports: addresses, a framed stream connection, dialing and listening."""

from .address import (
    Address as Address,
    parse_bind_address as parse_bind_address,
    parse_connect_address as parse_connect_address,
    resolve_address as resolve_address,
)
from .connection import Connection as Connection, dial as dial, listen as listen

__all__ = ["Address", "Connection", "dial", "listen", "parse_bind_address", "parse_connect_address", "resolve_address"]
