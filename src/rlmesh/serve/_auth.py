"""Who may use an endpoint: the token gate, its throttle, and the refusal to serve exposed.

Authentication happens once per connection, at the handshake, before the env or the model
sees anything and before shared-memory rings are offered (docs/security.md). The serve
loop asks the :class:`Gate`; the gate compares tokens in constant time, counts failures
(``rlmesh_auth_failures_total``) and says how long a refusal waits: the first
:data:`FREE_FAILURES` failures from a host are answered at once, later ones one after the
other, each :func:`throttle_delay` seconds after the previous one for that host. A right
token is never slowed down. The books are bounded: at most :data:`MAX_HOSTS` hosts, each
forgotten :data:`FORGET_SECONDS` after its last failure.

:func:`check_exposure` is the other half: a server that would bind an address reachable
from other hosts without a token refuses to start (before anything is bound), unless the
opt-out ``insecure_no_auth`` was given.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

from .._token import TOKEN_ENV, token_matches
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
    "throttle_delay",
]

log = logging.getLogger("rlmesh.serve")

FREE_FAILURES = 3  # failures from one host answered at once
MAX_DELAY_SECONDS = 16.0  # the longest pause between two refusals to one host
MAX_HOSTS = 1024  # hosts whose failures are remembered (the oldest is forgotten first)
FORGET_SECONDS = 600.0  # a host's failures are forgotten this long after its last one

HOW_TO_PASS = (
    "pass the endpoint's token: token=... on the client (rlmesh.numpy.RemoteEnv(address, "
    f"token=...)), or set {TOKEN_ENV}, or --token-file PATH on the command line"
)


def throttle_delay(failures: int) -> float:
    """Seconds between refusals to a host with ``failures`` failures so far (0: answer at once).

    Example:
        >>> [throttle_delay(n) for n in (1, 3, 4, 5, 6, 9)]
        [0.0, 0.0, 1.0, 2.0, 4.0, 16.0]
    """
    if failures <= FREE_FAILURES:
        return 0.0
    return min(2.0 ** (failures - FREE_FAILURES - 1), MAX_DELAY_SECONDS)


class _Strikes:
    __slots__ = ("count", "last", "next_at")

    def __init__(self) -> None:
        self.count = 0
        self.last = 0.0
        self.next_at = 0.0  # time.monotonic() before which no further refusal goes out


class Gate:
    """The token check of one endpoint (``token`` ``None``: everyone is let in).

    Attributes:
        failures: Refused tokens so far (missing or wrong): ``rlmesh_auth_failures_total``.
    """

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.failures = 0
        self._hosts: OrderedDict[str, _Strikes] = OrderedDict()

    def admits(self, given: str) -> bool:
        """Whether ``given`` opens this endpoint (constant time; any token when none is set)."""
        token = self.token
        return token is None or token_matches(given, token)

    def refused(self, host: str, now: float | None = None) -> tuple[float, int]:
        """Record a refused token from ``host``: ``(seconds to wait before answering, failures
        from that host so far)``."""
        self.failures += 1
        now = time.monotonic() if now is None else now
        hosts = self._hosts
        strikes = hosts.get(host)
        if strikes is None or now - strikes.last > FORGET_SECONDS:
            strikes = _Strikes()
        hosts[host] = strikes
        hosts.move_to_end(host)
        while len(hosts) > MAX_HOSTS:
            hosts.popitem(last=False)
        strikes.count += 1
        strikes.last = now
        step = throttle_delay(strikes.count)
        if not step:
            return 0.0, strikes.count
        due = max(now, strikes.next_at) + step  # refusals to one host go out one after the other
        strikes.next_at = due
        return due - now, strikes.count

    @property
    def tracked_hosts(self) -> int:
        """Hosts whose failures are remembered now (bounded by :data:`MAX_HOSTS`)."""
        return len(self._hosts)


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


def refusal_text(given: str, *, what: str, throttled: bool) -> str:
    """The message a refused client reads (never the token): which side, why, what to do."""
    why = (
        f"this {what} needs a token and the client sent none"
        if not given
        else f"the token the client sent is not this {what}'s"
    )
    more = (
        "; repeated failures from your address are answered more and more slowly"
        if throttled
        else ""
    )
    return f"authentication failed: {why}; {HOW_TO_PASS}{more}"


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
