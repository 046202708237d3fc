"""Who may use an endpoint: the token gate, and the refusal to serve exposed.

Authentication happens once per connection, at the handshake, before the env or the model
sees anything and before shared-memory rings are offered (docs/security.md). The serve
loop asks the :class:`Gate` (:mod:`rlmesh._token`, shared with the openpi bridge): it
compares tokens in constant time, counts failures and throttles hosts that keep guessing.

:func:`check_exposure` is the other half: a server that would bind an address reachable
from other hosts without a token refuses to start (before anything is bound), unless the
opt-out ``insecure_no_auth`` was given.
"""

from __future__ import annotations

import logging
from typing import Any

from .._token import (
    FORGET_SECONDS as FORGET_SECONDS,
    FREE_FAILURES as FREE_FAILURES,
    MAX_DELAY_SECONDS as MAX_DELAY_SECONDS,
    MAX_HOSTS as MAX_HOSTS,
    TOKEN_ENV,
    Gate as Gate,
    refusal_text as refusal_text,
    throttle_delay as throttle_delay,
)
from ..errors import InsecureEndpoint
from ..transport.address import Address, is_loopback

__all__ = [
    "FORGET_SECONDS",
    "FREE_FAILURES",
    "MAX_DELAY_SECONDS",
    "MAX_HOSTS",
    "Gate",
    "check_exposure",
    "peer_label",
    "refusal_text",
    "throttle_delay",
]

log = logging.getLogger("rlmesh.serve")


def peer_label(sock: Any) -> tuple[str, str]:
    """``(host, "host:port")`` of a connection's peer, for the books and the log."""
    try:
        name = sock.getpeername()
    except (OSError, ValueError, TypeError):
        return "unknown", "an unknown peer"
    if isinstance(name, tuple) and len(name) >= 2:
        host = str(name[0])
        return host, (f"[{host}]:{name[1]}" if ":" in host else f"{host}:{name[1]}")
    return "local", "a local client (unix socket)"


def check_exposure(addr: Address, options: Any, *, who: str) -> None:
    """Refuse to serve beyond loopback without a token (before anything is bound).

    Raises:
        InsecureEndpoint: ``addr`` is reachable from other hosts, ``options`` has no token
            and no ``insecure_no_auth``.
    """
    if options.token is not None or options.insecure_no_auth or is_loopback(addr):
        return
    raise InsecureEndpoint(
        f"{who} would serve {addr.url}, which other hosts can reach, without a token: anyone who "
        "can reach the port could drive it. Pass a token (--token-file PATH, "
        f"ServeOptions(token=...), or {TOKEN_ENV}), bind 127.0.0.1 or a unix socket, or opt out "
        "explicitly with --insecure-no-auth (ServeOptions(insecure_no_auth=True))"
    )
