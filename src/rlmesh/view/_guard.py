"""Who may reach the viewer, and how (issue 28; docs/viewer.md "Security").

One function, :func:`refusal`, judges every request before any handler runs (``/ws``
included) and returns why it is refused, or ``None``:

- without a token, the ``Host`` header must name the bound port on ``127.0.0.1``,
  ``[::1]``, ``localhost`` (or the bound loopback address), or a name the user allowed
  (``View(allowed_hosts=...)``): a DNS-rebound name is refused (:func:`accepted_hosts`);
- a request another web site made the browser send is refused (:func:`cross_site`);
- the state-changing routes (``/select``, ``/skip``, ``/control``) and ``/ws`` serve only
  same-origin requests: an ``Origin`` (``null`` included), ``Sec-Fetch-Site`` or
  ``Referer`` naming anything but this page is refused; a request with none of them
  (curl, scripts) is served (:func:`same_origin`);
- with a token (a non-loopback bind, or ``View(token=...)``) every request carries it:
  ``?token=``, or the ``X-RLMesh-Token`` header.

A request is duck-typed (``headers``, ``query``, ``path``: aiohttp's), so nothing here
needs aiohttp.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "accepted_hosts",
    "cross_site",
    "is_loopback",
    "new_token",
    "refusal",
    "same_origin",
    "ssh_hint",
]

#: The routes that change the run (or watch it live): same-origin requests only.
STATE_CHANGING = ("/select", "/skip", "/control", "/ws")


def refusal(request: Any, *, token: str | None, hosts: frozenset[str], port: int) -> str | None:
    """Why ``request`` is refused (the text of its 403), or ``None`` when it may be served.

    ``token``: the viewer's token (``None``: none is needed); ``hosts``: the ``Host``
    headers it answers without one (:func:`accepted_hosts`); ``port``: the bound port.
    """
    if not token and request.headers.get("Host", "").strip().lower() not in hosts:
        return (
            "forbidden: this viewer answers only to its own address (Host "
            f"127.0.0.1:{port}, localhost:{port}, [::1]:{port}); "
            "to reach it under another name, list it in View(allowed_hosts=[...])"
        )
    if cross_site(request):
        return "forbidden: cross-site request"
    if request.path in STATE_CHANGING and not same_origin(request):
        return "forbidden: only this viewer's own page may control the run"
    if token:
        given = request.query.get("token") or request.headers.get("X-RLMesh-Token") or ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            return "forbidden: this viewer needs ?token=... (printed with its URL)"
    return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts local connections.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("::1"), is_loopback("0.0.0.0")
    (True, True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ssh_hint(port: int, environ: dict[str, str] | None = None) -> str | None:
    """The ``ssh -L`` line to reach the page from a laptop when the run is over SSH.

    >>> ssh_hint(8008, {"SSH_CONNECTION": "10.0.0.5 50000 10.0.0.9 22", "USER": "ana"})
    'ssh -L 8008:127.0.0.1:8008 ana@10.0.0.9'
    >>> ssh_hint(8008, {}) is None
    True
    """
    env = os.environ if environ is None else environ
    conn = env.get("SSH_CONNECTION")
    if not conn:
        return None
    parts = conn.split()
    host = parts[2] if len(parts) >= 3 else "<this-host>"
    user = env.get("USER") or env.get("LOGNAME")
    target = f"{user}@{host}" if user else host
    return f"ssh -L {port}:127.0.0.1:{port} {target}"


def accepted_hosts(host: str, port: int, allowed: tuple[str, ...] = ()) -> frozenset[str]:
    """The ``Host`` headers a viewer bound to ``host:port`` answers without a token (lowercase).

    >>> sorted(accepted_hosts("127.0.0.1", 8008, ("box.lan",)))
    ['127.0.0.1:8008', '[::1]:8008', 'box.lan', 'box.lan:8008', 'localhost:8008']
    """
    names = {"127.0.0.1", "localhost", "[::1]"}
    if is_loopback(host):
        names.add(f"[{host}]" if ":" in host else host)
    out = {f"{n.lower()}:{port}" for n in names}
    if port == 80:  # a browser leaves out the default port
        out |= {n.lower() for n in names}
    for name in allowed:
        n = name.strip().lower()
        if not n:
            continue
        out.add(n)
        bare = n.rsplit("]", 1)[-1] if n.startswith("[") else n
        if ":" not in bare:
            out.add(f"{n}:{port}")
    return frozenset(out)


def same_origin(request: Any) -> bool:
    """Whether a request comes from this viewer's own page, or from no page at all (curl).

    ``Origin`` (``null`` included: sandboxed frames, ``file://`` pages), then
    ``Sec-Fetch-Site``, then ``Referer`` must name this page's host and port; a page on
    another localhost port is another origin.
    """
    host = request.headers.get("Host", "").strip().lower()
    origin = request.headers.get("Origin")
    if origin is not None:
        parts = urlsplit(origin.strip().lower())
        return parts.scheme in ("http", "https") and parts.netloc == host
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site.strip().lower() not in ("same-origin", "none"):
        return False
    referer = request.headers.get("Referer")
    if referer:
        parts = urlsplit(referer.strip().lower())
        return parts.scheme in ("http", "https") and parts.netloc == host
    return True


def cross_site(request: Any) -> bool:
    """A request another web site made the browser send (a hidden ``<img>`` hitting ``/skip``, a
    page opening ``ws://127.0.0.1:8008/ws``): refused, so no page can drive or watch a run."""
    if request.headers.get("Sec-Fetch-Site", "") == "cross-site":
        return True
    origin = request.headers.get("Origin")
    if origin and origin != "null":
        return bool(urlsplit(origin).netloc != request.headers.get("Host", ""))
    return False


def new_token() -> str:
    """A fresh random token (a non-loopback bind without ``View(token=...)``)."""
    return secrets.token_urlsafe(16)
