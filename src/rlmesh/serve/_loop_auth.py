"""The serve loop's gate: the three requests a stranger may send, checked against the token.

Before its ``Hello`` a connection may send ``Hello``, ``Ping`` and ``Shutdown`` (the state
table); the loop routes all three through here, so every loop (one session, the sessions
supervisor, a session worker, the model loops) checks the same way before its own handler
runs:

- ``Hello``: the token it carries must open the :class:`~rlmesh.serve._auth.Gate`, else
  the client gets ``Incompatible(reason="unauthenticated")`` (``AuthenticationFailed``) and
  the connection closes; the service, the env and the shared-memory offer never see it.
- ``Ping``: answered without a token with the health state only (``ready``/``busy``, the
  protocol generation and the service); the session counts need the token. A wrong token
  is a failure like a wrong ``Hello``.
- ``Shutdown`` before a ``Hello``: needs the token (a session's own was checked at its
  ``Hello``).

Every refusal is logged with the peer and counted; repeated failures from one host are
answered later and later (the gate's throttle), the connection held meanwhile, never a
thread or the loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._build import PROTOCOL_GENERATION
from ..wire import messages as m
from ._auth import FREE_FAILURES, Gate, peer_label, refusal_text
from ._loop_requests import _Peer

__all__ = ["HELD_MAX", "LoopAuth"]

log = logging.getLogger("rlmesh.serve")

HELD_MAX = 64  # refusals waiting for their time at once; past this a refused peer is just dropped
_HELD_LONGEST = 30.0  # a refusal due later than this is not worth holding a socket for


class LoopAuth:
    """The gate's handlers (mixed into ``ServeLoop``; the attributes are the loop's)."""

    service: Any
    _gate: Gate
    _held: list[tuple[float, _Peer, Any, int]]
    _ping_auth: str

    if TYPE_CHECKING:  # the loop's and LoopRequests' (earlier in the method order)

        def _send(self, peer: _Peer, msg: Any, rid: int, segments: Any = ()) -> None: ...

        def _drop(self, peer: _Peer) -> None: ...

        def _hello(self, peer: _Peer, hello: m.Hello, rid: int) -> None: ...

        def _ping(self, peer: _Peer, msg: m.Ping, rid: int) -> None: ...

        def _shutdown_request(self, peer: _Peer, msg: m.Shutdown, rid: int) -> None: ...

    # -- the three gated requests ------------------------------------------------------------

    def _gate_hello(self, peer: _Peer, hello: m.AuthHello, rid: int) -> None:
        if peer.held:  # it already waits for its refusal: nothing more from it
            self._drop(peer)
            return
        if not self._gate.admits(hello.token):
            self._refuse_token(peer, hello.token, rid, _refusal, "a Hello")
            return
        peer.authenticated = True
        self._hello(peer, hello, rid)

    def _gate_ping(self, peer: _Peer, msg: m.AuthPing, rid: int) -> None:
        if peer.held:
            self._drop(peer)
            return
        gate = self._gate
        if gate.token is None:
            auth = ""
        elif peer.authenticated or (msg.token and gate.admits(msg.token)):
            auth = "ok"
        elif msg.token:  # a guess: a failure like a wrong Hello, and nothing told
            self._refuse_token(peer, msg.token, rid, self._refused_pong, "a Ping")
            return
        else:
            auth = "required"
        self._ping_auth = auth
        try:
            self._ping(peer, msg, rid)
        finally:
            self._ping_auth = ""

    def _gate_shutdown(self, peer: _Peer, msg: m.AuthShutdown, rid: int) -> None:
        if peer.held:
            self._drop(peer)
            return
        if not peer.authenticated and not self._gate.admits(msg.token):
            self._refuse_token(peer, msg.token, rid, _refused_shutdown, "a Shutdown")
            return
        self._shutdown_request(peer, msg, rid)

    def _pong(self, state: str, sessions: int = 0, limit: int = 0) -> m.Pong:
        """The answer to the ``Ping`` being handled: ``limit`` 0 reports no session counts;
        an unauthenticated probe of an endpoint that needs a token gets none either."""
        auth = self._ping_auth
        service = self.service.service
        if not auth:
            if not limit:
                return m.Pong(state=state, generation=PROTOCOL_GENERATION, service=service)
            # positional: the wire's field order (state, generation, service, sessions, limit)
            return m.SessionsPong(state, PROTOCOL_GENERATION, service, sessions, limit)
        if auth != "ok":
            sessions = limit = 0
        return m.AuthPong(state, PROTOCOL_GENERATION, service, sessions, limit, auth)

    # -- refusals ------------------------------------------------------------------------------

    def _refused_pong(self, text: str) -> m.AuthPong:
        """A Ping's refusal: no state, no counts, and no words (a guess is told nothing)."""
        return m.AuthPong(
            state="", generation=PROTOCOL_GENERATION, service=self.service.service, auth="refused"
        )

    def _refuse_token(
        self, peer: _Peer, given: str, rid: int, answer: Callable[[str], Any], what: str
    ) -> None:
        """Count and log a refused token; answer now, or hold the answer while the host is
        throttled. ``answer`` builds the reply from the refusal's text."""
        host, label = peer_label(peer.conn.sock)
        delay, count = self._gate.refused(host)
        noun = "model endpoint" if self.service.service == "model" else "endpoint"
        reply = answer(refusal_text(given, what=noun, throttled=delay > 0))
        if count <= FREE_FAILURES or not count & (count - 1):  # the first few, then 8, 16, 32 ...
            log.warning(
                "authentication failed: %s sent %s with %s; refused (the endpoint keeps serving)%s",
                label,
                what,
                "no token" if not given else "a wrong token",
                f"; {count} failures from {host} so far, answered {delay:.0f} s late"
                if delay
                else "",
            )
        if not delay:
            self._send(peer, reply, rid)
            self._drop(peer)
            return
        if delay > _HELD_LONGEST or len(self._held) >= HELD_MAX:
            self._drop(peer)  # not worth a socket: no answer at all
            return
        peer.held = True
        self._held.append((time.monotonic() + delay, peer, reply, rid))

    def _release_held(self) -> None:
        """Send the refusals whose time has come (the loop calls this about once a second)."""
        held = self._held
        if not held:
            return
        now = time.monotonic()
        waiting: list[tuple[float, _Peer, Any, int]] = []
        for item in held:
            due, peer, reply, rid = item
            if peer.conn.closed:
                continue
            if due <= now:
                self._send(peer, reply, rid)
                self._drop(peer)
            else:
                waiting.append(item)
        self._held = waiting


def _refusal(text: str) -> m.Refusal:
    """A Hello's refusal (the client raises ``AuthenticationFailed`` with ``text``)."""
    return m.Refusal(
        message=text, generation=PROTOCOL_GENERATION, editions=[], reason=m.UNAUTHENTICATED
    )


def _refused_shutdown(text: str) -> m.ShutdownReply:
    return m.ShutdownReply(accepted=False, message=text)
