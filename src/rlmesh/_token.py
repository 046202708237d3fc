"""Endpoint tokens: where one comes from, how one is made, how two are compared.

A token is a shared secret that a server requires at the handshake and a client sends in
its ``Hello`` (docs/security.md). Both sides find it the same way: an explicit value first
(``ServeOptions(token=...)``, ``RemoteEnv(..., token=...)``), else the ``RLMESH_TOKEN``
environment variable; the command lines also read one from a file (``--token-file PATH``),
so it never shows in a process listing. Nothing here ever prints a token.
"""

from __future__ import annotations

import hmac
import os
import secrets
import time
from collections import OrderedDict

__all__ = [
    "FORGET_SECONDS",
    "FREE_FAILURES",
    "MAX_HOSTS",
    "MAX_DELAY_SECONDS",
    "TOKEN_ENV",
    "TLS_CA_ENV",
    "Gate",
    "new_token",
    "read_token_file",
    "refusal_text",
    "resolve_token",
    "throttle_delay",
    "token_matches",
]

#: The environment variable a server and a client read their token from.
TOKEN_ENV = "RLMESH_TOKEN"
#: The environment variable a client reads the CA bundle to trust for ``tls://`` from.
TLS_CA_ENV = "RLMESH_TLS_CA"
#: The longest token accepted (a token travels in the Hello, bounded by the handshake limits).
MAX_TOKEN_BYTES = 4096


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe text): what fleets, sandboxes and runs generate.

    Example:
        >>> len(new_token()) >= 43
        True
    """
    return secrets.token_urlsafe(32)


def check_token(token: object, what: str = "token") -> str | None:
    """``token`` as a str (``None`` or ``""``: no token).

    Raises:
        TypeError: not a str.
        ValueError: longer than :data:`MAX_TOKEN_BYTES`, or with a line break or NUL in it.
    """
    if token is None:
        return None
    if not isinstance(token, str):
        raise TypeError(f"{what} must be a str or None, got {type(token).__name__}")
    if not token:
        return None
    if len(token.encode("utf-8", "surrogatepass")) > MAX_TOKEN_BYTES:
        raise ValueError(f"{what} is longer than {MAX_TOKEN_BYTES} bytes")
    if any(c in token for c in "\r\n\0"):
        raise ValueError(f"{what} contains a line break or a NUL character")
    return token


def resolve_token(token: str | None) -> str | None:
    """The token to use: ``token`` when given, else ``$RLMESH_TOKEN`` (``None``: no token).

    Example:
        >>> resolve_token("s3cret")
        's3cret'
    """
    if token is not None and token != "":
        return check_token(token)
    return check_token(os.environ.get(TOKEN_ENV) or None, f"${TOKEN_ENV}")


def read_token_file(path: str) -> str:
    """The token stored in ``path``: its text without surrounding whitespace (one trailing
    newline is what ``echo`` and editors leave).

    Raises:
        ValueError: the file cannot be read, is empty, or holds more than one line.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_TOKEN_BYTES + 2)
    except OSError as exc:
        raise ValueError(f"cannot read the token file {path!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"the token file {path!r} is not UTF-8 text") from None
    token = text.strip()
    if not token:
        raise ValueError(f"the token file {path!r} is empty; put the token on its first line")
    if "\n" in token or "\r" in token:
        raise ValueError(f"the token file {path!r} holds more than one line; keep only the token")
    checked = check_token(token, f"the token in {path!r}")
    assert checked is not None
    return checked


def token_matches(given: str, expected: str) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time (``hmac.compare_digest``)."""
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


# -- the gate: checking tokens, slowing down who keeps guessing ---------------------------------
#
# Authentication happens once per connection, at the handshake (docs/security.md). A server
# asks the :class:`Gate`; it compares tokens in constant time, counts failures
# (``rlmesh_auth_failures_total``) and says how long a refusal waits: the first
# :data:`FREE_FAILURES` failures from a host are answered at once, later ones one after the
# other, each :func:`throttle_delay` seconds after the previous one for that host. A right token
# is never slowed down. The books are bounded: at most :data:`MAX_HOSTS` hosts, each forgotten
# :data:`FORGET_SECONDS` after its last failure.

HOW_TO_PASS = (
    "pass the endpoint's token: token=... on the client (rlmesh.numpy.RemoteEnv(address, "
    f"token=...)), or set {TOKEN_ENV}, or --token-file PATH on the command line"
)

FREE_FAILURES = 3  # failures from one host answered at once
MAX_DELAY_SECONDS = 16.0  # the longest pause between two refusals to one host
MAX_HOSTS = 1024  # hosts whose failures are remembered (the oldest is forgotten first)
FORGET_SECONDS = 600.0  # a host's failures are forgotten this long after its last one


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


def refusal_text(given: str, *, what: str, throttled: bool, how: str = HOW_TO_PASS) -> str:
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
    return f"authentication failed: {why}; {how}{more}"
