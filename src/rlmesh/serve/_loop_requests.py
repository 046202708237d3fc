"""What a serve loop answers itself, whatever it serves, and who it answers.

The loop (:mod:`rlmesh.serve._loop`) routes ``Ping``, ``Shutdown``, ``Hello``, ``Attach``,
``Close`` and ``Configure`` here, and every other request to its :class:`Service` (through
``_request`` and ``_serve_one``, which answer for every serve loop alike). A peer
(:class:`_Peer`) is one connection with its protocol session.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .._build import validate_edition
from ..errors import ProtocolException
from ..transport import shm
from ..transport.busypoll import FAN_OUT_CAPABILITY
from ..transport.connection import Connection
from ..wire import frames, handshake, messages as m
from ..wire.session import SERVER, Session
from ._driver import RequestFailed
from ._options import ServeOptions

__all__ = ["LoopRequests", "Service"]

log = logging.getLogger("rlmesh.serve")

_OPS = {
    m.Reset.KIND: "reset",
    m.Step.KIND: "step",
    m.Render.KIND: "render",
    m.Configure.KIND: "configure",
}


def _describe(exc: BaseException) -> str:
    """``"ExcType: text"`` for an error message, even when ``str(exc)`` itself fails."""
    try:
        text = str(exc)
    except Exception:
        text = "<unprintable exception>"
    return f"{type(exc).__name__}: {text}"


class Service(Protocol):
    """What the loop serves: an env (or, later, a model) behind the session protocol."""

    service: str
    component: str
    declared_edition: str | None

    def contract(self) -> dict[str, Any]: ...

    def begin_session(self) -> None: ...

    def end_session(self) -> list[m.EpisodeRecord]: ...

    def handle(self, msg: Any, frame: frames.Frame) -> tuple[Any, list[Any]]:
        """Answer a service request (``Reset``, ``Step``, ``Predict``...): ``(reply, segments)``."""
        ...


class _Peer:
    __slots__ = ("accepted_at", "authenticated", "conn", "held", "replies", "session", "shm_token")

    def __init__(self, conn: Connection, max_frame_bytes: int) -> None:
        self.conn = conn
        self.session = Session(SERVER, max_frame_bytes=max_frame_bytes)
        self.accepted_at = time.monotonic()
        self.shm_token = ""  # this session's secret a ring file must carry (Welcome.capabilities)
        self.replies = 0  # replies sent before it held a session (Ping, refused Shutdown)
        self.authenticated = False  # its Hello carried the endpoint's token (or none was needed)
        self.held = False  # refused, and waiting for its (throttled) answer


def _accepted_at(peer: _Peer) -> float:
    return peer.accepted_at


class LoopRequests:
    """The handlers of the requests every serve loop answers itself (mixed into ``ServeLoop``).

    They reply through the loop's ``_send`` and end sessions through its ``_drop`` and
    ``_end_active``; the attributes below are the loop's.
    """

    service: Service
    options: ServeOptions
    limits: frames.FrameLimits
    fan_out_peer: bool
    on_request: Callable[[], None] | None
    _active: _Peer | None
    _busy_poll: float
    _last_activity: float

    def stop(self, reason: str) -> None:
        raise NotImplementedError  # pragma: no cover - ServeLoop's

    def _send(
        self, peer: _Peer, msg: Any, rid: int, segments: list[Any] | tuple[Any, ...] = ()
    ) -> None:
        raise NotImplementedError  # pragma: no cover - ServeLoop's

    def _drop(self, peer: _Peer) -> None:
        raise NotImplementedError  # pragma: no cover - ServeLoop's

    def _end_active(self, peer: _Peer, *, already_ended: bool = False) -> None:
        raise NotImplementedError  # pragma: no cover - ServeLoop's

    def _protocol_error(self, peer: _Peer, exc: ProtocolException, rid: int = 0) -> None:
        raise NotImplementedError  # pragma: no cover - ServeLoop's

    if TYPE_CHECKING:

        def _pong(self, state: str, sessions: int = 0, limit: int = 0) -> m.Pong: ...  # LoopAuth's

    def _ping(self, peer: _Peer, msg: m.Ping, rid: int) -> None:
        busy = self._active is not None and self._active is not peer
        self._send(peer, self._pong("busy" if busy else "ready"), rid)

    def _attach(self, peer: _Peer, msg: m.Attach, rid: int) -> None:
        # a ring nobody polls is slower than the socket
        ring = (
            None
            if peer.conn.shm is not None or not peer.conn.polling
            else shm.accept(msg.path, peer.conn.sock, peer.shm_token)
        )
        self._send(peer, m.AttachReply(attached=ring is not None), rid)  # on the socket
        if ring is not None:
            peer.conn.shm = ring  # the client switches once it reads the reply

    def _close(self, peer: _Peer, msg: m.Close, rid: int) -> None:
        records = self.service.end_session()
        self._send(peer, m.CloseReply(final_episodes=records), rid)
        self._end_active(peer, already_ended=True)
        self._touch()

    def _configure(self, peer: _Peer, msg: m.Configure, rid: int) -> None:
        """HS-6, for every service alike: an edition that is not one is a fatal error."""
        try:
            edition = validate_edition(msg.edition) if msg.edition.strip() else ""
        except ValueError as exc:
            self._send(
                peer,
                RequestFailed(
                    "INVALID_ACTION", str(exc), op="configure", recoverable=False
                ).to_message(),
                rid,
            )
            self._end_active(peer)
        else:
            self._send(peer, m.ConfigureReply(edition=edition), rid)
        self._touch()

    def _request(self, peer: _Peer, msg: Any, frame: frames.Frame, rid: int) -> None:
        """A request for the service (``Reset``, ``Step``...): the active session's to make."""
        if peer is not self._active:  # pragma: no cover - the state table prevents this
            self._protocol_error(peer, ProtocolException("request outside a session"), rid)
            return
        self._serve_one(peer, self.service, msg, frame, rid)

    def _serve_one(self, peer: _Peer, svc: Any, msg: Any, frame: frames.Frame, rid: int) -> None:
        """Answer a request of the session ``svc`` serves (not one the loop answers itself)."""
        kind = frame.kind
        timeout_ms = getattr(msg, "timeout_ms", 0)
        started = time.perf_counter_ns() if timeout_ms else 0  # timed only with a deadline
        try:
            reply, segments = svc.handle(msg, frame)
            # SES-4: a late result is dropped
            if timeout_ms and (time.perf_counter_ns() - started) / 1e6 > timeout_ms:
                op = _OPS.get(kind, "request")
                what = f"{svc.service}.{op}"  # env.step, model.predict
                raise RequestFailed("TIMEOUT", f"{what} timed out after {timeout_ms}ms", op=op)
        except Exception as exc:
            self._failed(peer, kind, rid, exc)
            return
        self._send(peer, reply, rid, segments)
        self._touch()

    def _failed(self, peer: _Peer, kind: int, rid: int, exc: Exception) -> None:
        """A service request raised: answer with an ``Error``; a fatal one ends the session."""
        if isinstance(exc, RequestFailed):
            self._send(peer, exc.to_message(), rid)
            if not exc.recoverable:  # DELTA-19: a fatal error ends the session
                self._end_active(peer)
            self._touch()
            return
        if isinstance(exc, ProtocolException):
            self._protocol_error(peer, exc, rid)
            return
        # a pathological env or a bug: end this session, keep serving
        op = _OPS.get(kind, "request")
        log.error("%s failed unexpectedly; ending the session", op, exc_info=exc)
        fatal = RequestFailed(
            "INTERNAL", f"{op} failed: {_describe(exc)}", op=op, recoverable=False
        )
        self._send(peer, fatal.to_message(), rid)
        self._end_active(peer)
        self._touch()

    def _touch(self) -> None:
        self._last_activity = time.monotonic()
        if self.on_request is not None:
            self.on_request()

    def _hello(self, peer: _Peer, hello: m.Hello, rid: int) -> None:
        if self._active is not None:
            self._send(
                peer,
                m.Busy(
                    message="environment already has an active session; only one client may be "
                    "connected at a time (close the other client first)"
                ),
                rid,
            )
            self._drop(peer)
            return
        # the client may move the session into shared-memory rings (Attach)
        peer.shm_token, capabilities = shm.offer(peer.conn.sock)
        answer = self._welcome(peer, hello, rid, capabilities)
        if answer is None:
            return
        self.service.begin_session()
        self._active = peer
        peer.conn.limits = self.limits
        # a fanning-out client gathers many endpoints' replies: no spinning for it (HS-8 hint);
        # nor for a TLS one (a spinning read bypasses the TLS socket)
        self.fan_out_peer = hello.capabilities.get(FAN_OUT_CAPABILITY) == "true"
        tls = getattr(peer.conn.sock, "tls", False)
        peer.conn.busy_poll = 0.0 if self.fan_out_peer or tls else self._busy_poll
        self._send(peer, answer, rid)  # Welcome: the session is READY

    def _welcome(
        self, peer: _Peer, hello: m.Hello, rid: int, capabilities: dict[str, str] | None
    ) -> m.Welcome | None:
        """This service's answer to ``hello``: the ``Welcome`` to send once the session is set
        up, or ``None`` when the peer was told it is ``Incompatible`` (and dropped)."""
        svc = self.service
        answer = handshake.answer_hello(
            hello,
            declared=svc.declared_edition,
            service=svc.service,
            component=svc.component,
            session_id=str(uuid.uuid4()),
            contract=svc.contract(),
            capabilities=capabilities,
        )
        if isinstance(answer, m.Incompatible):
            self._send(peer, answer, rid)
            self._drop(peer)
            return None
        return answer

    def _shutdown_request(self, peer: _Peer, msg: m.Shutdown, rid: int) -> None:
        if not self.options.remote_shutdown_allowed():
            self._send(
                peer,
                m.ShutdownReply(
                    accepted=False,
                    message="remote shutdown is disabled for this environment endpoint",
                ),
                rid,
            )
            return
        reason = (msg.reason or "").strip()
        text = f"shutdown accepted: {reason}" if reason else "shutdown accepted"
        self._send(peer, m.ShutdownReply(accepted=True, message=text), rid)
        self.stop(f"remote shutdown: {reason}" if reason else "remote shutdown")
