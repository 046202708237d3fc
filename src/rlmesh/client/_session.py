"""A client session: handshake, then strictly one reply per request.

Shared by every client class (env and model clients); :meth:`ClientSession.connect`
dials and the session takes the open connection (so ``tests/unit/client`` can hand it
an in-memory one). It owns the connection and its :class:`rlmesh.wire.session.Session`
(which checks every request and reply against the state table, assigns request ids and
discards stale replies after a timeout, SES-3), words connect/handshake failures (CLT-3,
with :mod:`rlmesh.client._dial`),
applies timeouts (CLT-5), maps ``Error`` frames to exceptions through one table (ERR-4), and
turns a fatal error or a lost peer into "this session is over" (DELTA-19).
"""

from __future__ import annotations

import time
from typing import Any, NoReturn

from .._termtext import term_safe
from .._token import resolve_token
from ..errors import (
    CODE_NAMES,
    ConnectFailed,
    ConnectionLost,
    EndpointBusy,
    ProtocolException,
    RequestTimeout,
    SessionClosed,
    exception_for_code,
)
from ..transport import Address, Connection, shm
from ..transport.busypoll import FAN_OUT_CAPABILITY
from ..transport.connection import busy_poll_default
from ..transport.stream import _advance
from ..wire import frames, handshake, messages as m
from ..wire.session import CLIENT, Session
from ._dial import dial_endpoint, refusal

__all__ = [
    "ATTACH_AFTER_REQUESTS",
    "DEFAULT_CONNECT_TIMEOUT_SECONDS",
    "ClientSession",
]

#: A session moves into shared-memory rings before this request (same host only): a
#: probe (connect, reset, close) never pays the ~0.1 ms of setting them up.
ATTACH_AFTER_REQUESTS = 3
_ENDINGS = frozenset({m.Close.KIND, m.Shutdown.KIND})

DEFAULT_CONNECT_TIMEOUT_SECONDS = 10.0  # CLT-5: the native default
_CLOSE_TIMEOUT_SECONDS = 5.0  # CLT-10: a graceful close never waits longer than this
_SLOT_POLL_FIRST_SECONDS = 0.01  # wait_for_slot: first pause before asking again, doubling ...
_SLOT_POLL_MAX_SECONDS = 0.25  # ... up to this


class ClientSession:
    """One connection to an endpoint, from Hello to close.

    The constructor takes a connection that is already open and says Hello over it;
    :meth:`connect` dials an address first (and retries a busy endpoint when asked), so
    every client dials through it, and a test can hand the session an in-memory
    connection instead (``tests/unit/client``).

    The connection is a :class:`rlmesh.transport.Connection`: a framed stream over a
    connected socket (anything with the stream socket methods the connection calls:
    ``send``, ``sendmsg``, ``recv_into``, ``settimeout``/``gettimeout``, ``close``,
    ``family``). The session owns it from here on: it is closed when the handshake fails
    and when the session ends.

    Args:
        conn: The open connection, still on the pre-handshake frame limits.
        service: ``"env"`` or ``"model"``; the server refuses the wrong one.
        declared: The workflow edition this side declares (or ``None`` to float).
        connect_timeout: Bound on dial + handshake (``None`` = 10 s); errors quote it.
        request_timeout: Bound on each request (``None`` = forever).
        noun: How errors name the peer (``"an env"``).
        address: Where ``conn`` goes (errors name it).
        handshake_timeout: Bound on the Hello round trip (``None``: ``connect_timeout``).
        limits: Frame limits once the handshake is done (``None``:
            :func:`rlmesh.wire.frames.default_limits`).
        token: The endpoint's token, sent in the Hello (``None``: ``$RLMESH_TOKEN``, else none).

    Raises:
        AuthenticationFailed: the endpoint refused the token, or its lack of one.
        EndpointBusy: every session of the endpoint is taken (the connection is closed).
        HandshakeError: the endpoint refused this client as incompatible.
        ConnectFailed: the handshake failed (a lost peer, garbage, an ``Error`` reply).
        RequestTimeout: no answer to Hello within ``handshake_timeout``.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        service: str,
        component: str,
        declared: str | None,
        connect_timeout: float | None,
        request_timeout: float | None,
        noun: str,
        address: Address | None = None,
        handshake_timeout: float | None = None,
        limits: frames.FrameLimits | None = None,
        capabilities: dict[str, str] | None = None,
        token: str | None = None,
    ) -> None:
        self.address = address
        self.conn = conn
        self.request_timeout = request_timeout
        self.noun = noun
        # messages name what is at the other end: "remote environment" / "remote model"
        self.peer = "remote model" if service == "model" else "remote environment"
        self.protocol = Session(CLIENT)
        self._closed_reason: str | None = None
        self._attach_after = -1  # requests left before moving to shared-memory rings (-1: never)
        self._timed_out = False  # a request timed out and its reply has not been seen yet
        # an Attach whose reply has not arrived yet: (request id, path, ring); nothing else
        # may be sent until it does, since the reply says which path the next frame takes
        self._pending_attach: tuple[int, str, Any] | None = None
        self._shm_token = ""
        ct = DEFAULT_CONNECT_TIMEOUT_SECONDS if connect_timeout is None else connect_timeout
        if limits is None:
            limits = frames.default_limits()  # RLMESH_MAX_FRAME_BYTES
        token = resolve_token(token)
        reply = self._handshake(
            service,
            component,
            declared,
            ct,
            ct if handshake_timeout is None else handshake_timeout,
            capabilities,
            token,
        )
        refused = refusal(reply, service, noun, self._url)
        if refused is not None:
            conn.close()
            raise refused
        self.welcome: m.Welcome = reply
        conn.limits = limits
        # a client that gathers many endpoints (FAN_OUT_CAPABILITY) waits for each reply
        # without spinning: a round waits for its slowest endpoint anyway, and spinning on
        # one reply takes a core the other endpoints' servers need
        fan_out = (capabilities or {}).get(FAN_OUT_CAPABILITY) == "true"
        tls = getattr(conn.sock, "tls", False)  # a spinning read would bypass the TLS socket
        conn.busy_poll = 0.0 if fan_out or tls else busy_poll_default()
        token = shm.offered_token(reply.capabilities, conn.sock)
        if token:
            self._attach_after = ATTACH_AFTER_REQUESTS
            self._shm_token = token

    @classmethod
    def connect(
        cls,
        address: Address,
        *,
        service: str,
        component: str,
        declared: str | None,
        connect_timeout: float | None,
        request_timeout: float | None,
        noun: str,
        wait_for_slot: bool = False,
        capabilities: dict[str, str] | None = None,
        token: str | None = None,
        tls_ca: Any = None,
    ) -> ClientSession:
        """Dial ``address`` and handshake: an open session (CLT-3, CLT-5).

        Args:
            address: Where to dial.
            wait_for_slot: On ``Busy`` (every session of the endpoint taken), retry until a
                session frees up or ``connect_timeout`` passes, instead of raising
                ``EndpointBusy`` at once.
            token: The endpoint's token (``None``: ``$RLMESH_TOKEN``, else none).
            tls_ca: For a ``tls://`` address: the CA bundle to trust (a path), or an
                ``ssl.SSLContext`` (``None``: ``$RLMESH_TLS_CA``, else the system store).
            service, component, declared, connect_timeout, request_timeout, noun: As for
                the constructor.

        Raises:
            ConnectFailed: nothing accepts connections there, or the handshake failed.
            TLSError: the TLS handshake failed (an untrusted certificate ...).
            RequestTimeout: dial + handshake took longer than ``connect_timeout``.
            EndpointBusy / HandshakeError / AuthenticationFailed: as for the constructor.
        """
        ct = DEFAULT_CONNECT_TIMEOUT_SECONDS if connect_timeout is None else connect_timeout
        limits = frames.default_limits()  # RLMESH_MAX_FRAME_BYTES, checked before dialing
        deadline = time.monotonic() + ct
        pause = _SLOT_POLL_FIRST_SECONDS
        busy: EndpointBusy | None = None  # the last Busy, while waiting for a free session
        while True:
            budget = max(deadline - time.monotonic(), 0.001)
            try:
                conn = dial_endpoint(address, service, noun, ct, budget, tls_ca)
                return cls(
                    conn,
                    service=service,
                    component=component,
                    declared=declared,
                    connect_timeout=ct,
                    request_timeout=request_timeout,
                    noun=noun,
                    address=address,
                    handshake_timeout=budget,
                    limits=limits,
                    capabilities=capabilities,
                    token=token,
                )
            except EndpointBusy as exc:
                left = deadline - time.monotonic()
                if not wait_for_slot:
                    raise
                if left <= 0:
                    raise EndpointBusy(f"{exc} (waited {ct:.3f}s for a free session)") from None
                busy = exc
            except RequestTimeout:
                if busy is None:
                    raise
                # the time ran out during a retry: the endpoint was busy all along
                raise EndpointBusy(f"{busy} (waited {ct:.3f}s for a free session)") from None
            # issue 25: wait for a free session within the connect timeout
            time.sleep(min(pause, left))
            pause = min(pause * 2, _SLOT_POLL_MAX_SECONDS)

    @property
    def _url(self) -> str:
        return self.address.url if self.address is not None else "an open connection"

    def _handshake(
        self,
        service: str,
        component: str,
        declared: str | None,
        ct: float,
        budget: float,
        capabilities: dict[str, str] | None,
        token: str | None = None,
    ) -> Any:
        """Say Hello within ``budget`` seconds and return the reply (the connection closes on failure)."""
        url = self._url
        hello = handshake.make_hello(
            component, declared, service=service, capabilities=capabilities, token=token
        )
        try:
            return self._exchange(hello, timeout=budget)
        except RequestTimeout:
            self.conn.close()
            raise RequestTimeout(
                f"{self.peer} connect timed out after {ct:.3f}s (handshake with {url})",
                timeout_seconds=ct,
            ) from None
        except (ConnectionLost, ProtocolException) as exc:
            self.conn.close()
            raise ConnectFailed(
                f"connected to {self.noun} at '{url}', but the handshake failed ({exc})"
            ) from exc
        except BaseException:
            self.conn.close()
            raise

    # -- requests -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None

    def request(
        self, msg: Any, segments: list[Any] | tuple[Any, ...] = (), *, timeout: float | None = None
    ) -> tuple[Any, frames.Frame]:
        """Send one request and return ``(reply, frame)``.

        Raises:
            SessionClosed: the session is over (closed here, or ended by a fatal error).
            RequestTimeout: no reply within ``timeout`` (the session stays usable).
            ConnectionLost: the peer went away (the session is over).
            EnvironmentException: the request failed server-side (``.recoverable`` says
                whether the session survives).
        """
        self.send(msg, segments, timeout=timeout)
        return self.receive(timeout=timeout)

    def send(
        self, msg: Any, segments: list[Any] | tuple[Any, ...] = (), *, timeout: float | None = None
    ) -> None:
        """The first half of :meth:`request`: send one request and return without its reply.

        Pair it with exactly one :meth:`receive` (issue 26: a trainer sends to many
        endpoints, then gathers). Same errors as :meth:`request` for the sending part.
        """
        if self._closed_reason is not None:
            raise SessionClosed(self._closed_reason)
        if self._pending_attach is not None:
            self._finish_attach(timeout)
        if self._attach_after > 0 and msg.KIND not in _ENDINGS:  # a session about to end stays put
            if self._timed_out:
                self._attach_after = 1  # not while a late reply may still be on its way
            else:
                self._attach_after -= 1
                if not self._attach_after and self.conn.polling:
                    self._attach(timeout)  # rings pay only while polled
        self._send_request(msg, segments, timeout)

    def call(
        self, msg: Any, segments: list[Any] | tuple[Any, ...] = (), *, timeout: float | None = None
    ) -> tuple[Any, frames.Frame]:
        """:meth:`request` on one straight road: the env step's path (issue 24).

        Same contract and errors as :meth:`request`. When nothing is special about this
        request (the session is open, no move into shared-memory rings is due or under
        way) it encodes, writes, reads and decodes in one frame of Python, with the
        socket calls inline; otherwise it is :meth:`send` then :meth:`receive`.
        """
        if (
            self._closed_reason is not None
            or self._pending_attach is not None
            or self._attach_after > 0
        ):
            self.send(msg, segments, timeout=timeout)
            return self.receive(timeout=timeout)
        buffers = self.protocol.send(msg, segments)  # illegal now: raises, nothing is sent
        conn = self.conn
        if timeout != conn._timeout:
            conn.settimeout(timeout)
        if (
            conn.shm is None and len(buffers) == 1
        ):  # one small frame on the socket: as ``post`` does
            one = buffers[0]
            try:
                sent = conn.sock.send(one)
            except OSError as exc:
                self._send_failed(exc, timeout)
            if type(one) is not bytes or sent != len(one):
                self._transmit(buffers, timeout, sent)
            elif conn.busy_poll:
                conn._sent_at = time.perf_counter()
        else:
            self._transmit(buffers, timeout)
        receive = self.protocol.receive
        deadline = None
        if timeout:
            deadline = conn.deadline = time.monotonic() + timeout
        try:
            frame = conn._recv_socket() if conn.shm is None else conn.recv_frame()
            assert frame is not None  # blocking socket
            reply = receive(frame)
            while reply is None:  # a stale reply to a timed-out request (SES-3)
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError("timed out")
                frame = conn.recv_frame()
                assert frame is not None
                reply = receive(frame)
        except (TimeoutError, ConnectionLost, ProtocolException) as exc:
            self._reply_failed(exc, timeout)
        finally:
            conn.deadline = None
        self._timed_out = False
        if isinstance(reply, m.Error):
            self._raise_error(reply)
        return reply, frame

    def receive(self, *, timeout: float | None = None) -> tuple[Any, frames.Frame]:
        """The second half of :meth:`request`: the reply to the request :meth:`send` sent.

        ``timeout`` counts from this call. Same errors as :meth:`request`.
        """
        if self._closed_reason is not None:
            raise SessionClosed(self._closed_reason)
        reply, frame = self._await_reply(timeout)
        if isinstance(reply, m.Error):
            self._raise_error(reply)
        return reply, frame

    def _attach(self, timeout: float | None) -> None:
        """Move the session into shared-memory rings (same host; see ``rlmesh.transport.shm``).

        Done once a session has shown it is more than a probe, so a connect stays cheap. Any
        failure leaves the session on its socket, except a lost connection, which is reported.
        A timeout leaves the session usable: the next request first waits for the answer.
        """
        try:
            path, ring = shm.create(token=self._shm_token)
        except OSError:  # /dev/shm full or read-only: stay on the socket
            return
        try:
            self._send_request(m.Attach(path=path), ())
        except BaseException:
            ring.close()
            shm.discard(path)
            raise
        self._pending_attach = (self.protocol.pending_id, path, ring)
        self._finish_attach(timeout)

    def _finish_attach(self, timeout: float | None) -> None:
        """Wait (within ``timeout``) for the answer to the pending ``Attach`` and apply it.

        Raises:
            RequestTimeout: no answer yet; the session stays usable (nothing was sent).
        """
        assert self._pending_attach is not None
        _rid, path, ring = self._pending_attach
        try:
            reply, _frame = self._await_reply(timeout)
        except RequestTimeout:
            raise
        except BaseException:
            self._pending_attach = None
            ring.close()
            shm.discard(path)
            raise
        self._pending_attach = None
        shm.discard(path)  # mapped by the server or not, the name has served its purpose
        if isinstance(reply, m.AttachReply) and reply.attached:
            self.conn.shm = ring
            return
        ring.close()
        if isinstance(reply, m.Error):
            self._raise_error(reply)

    def fail(self, exc: ProtocolException) -> None:
        """End the session after a reply that did not decode (STYLE: an error freezes the state)."""
        self._end(f"connection closed after a protocol error: {exc}")

    def _exchange(self, msg: Any, *, timeout: float | None) -> Any:
        return self._exchange_frame(msg, (), timeout)[0]

    def _exchange_frame(
        self, msg: Any, segments: list[Any] | tuple[Any, ...], timeout: float | None
    ) -> tuple[Any, frames.Frame]:
        self._send_request(msg, segments, timeout)
        return self._await_reply(timeout)

    def _send_request(
        self, msg: Any, segments: list[Any] | tuple[Any, ...], timeout: float | None = None
    ) -> None:
        buffers = self.protocol.send(msg, segments)  # illegal now: raises, nothing is sent
        conn = self.conn
        if timeout != conn._timeout:  # a syscall: only when it changes
            conn.settimeout(timeout)
        self._transmit(buffers, timeout)

    def _transmit(self, buffers: list[Any], timeout: float | None, sent: int = 0) -> None:
        """Send a frame's ``buffers`` (the first ``sent`` bytes already went out)."""
        try:
            self.conn.send(_advance(buffers, sent) if sent else buffers)
        except TimeoutError:
            raise self._send_timed_out(timeout) from None
        except ConnectionLost as exc:
            self._end(f"connection closed: {exc}")
            raise
        except BaseException:
            self._end("the connection broke while a request was being sent")
            raise

    def _send_failed(self, exc: OSError, timeout: float | None) -> NoReturn:
        """The socket refused a frame :meth:`call` wrote directly: word it as :meth:`_transmit` does."""
        if isinstance(exc, TimeoutError):
            raise self._send_timed_out(timeout) from None
        if isinstance(exc, (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)):
            lost = ConnectionLost(f"the peer closed the connection ({exc.strerror or exc})")
        else:
            lost = ConnectionLost(f"sending failed: {exc}")
        self._end(f"connection closed: {lost}")
        raise lost from exc

    def _send_timed_out(self, timeout: float | None) -> RequestTimeout:
        """End the session (a frame may be half sent) and word the timeout."""
        self._end("the connection broke: a request could not be sent before the timeout")
        return RequestTimeout(
            f"{self.peer} call timed out after {timeout or 0:.3f}s while sending",
            timeout_seconds=timeout,
        )

    def _await_reply(self, timeout: float | None) -> tuple[Any, frames.Frame]:
        """The reply to the request in flight; replies to older (timed-out) ones are discarded.

        ``timeout`` bounds the whole wait, however slowly the bytes or how many stale
        replies arrive (SES-3, CLT-5).
        """
        conn = self.conn
        receive = self.protocol.receive
        if timeout != conn._timeout:
            conn.settimeout(timeout)
        deadline = None if not timeout else time.monotonic() + timeout
        conn.deadline = deadline
        try:
            while True:
                frame = conn.recv_frame()
                assert frame is not None  # blocking socket
                reply = receive(frame)  # None: a stale reply to a timed-out request (SES-3)
                if reply is not None:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError("timed out")
        except (TimeoutError, ConnectionLost, ProtocolException) as exc:
            self._reply_failed(exc, timeout)
        finally:
            conn.deadline = None
        self._timed_out = False
        return reply, frame

    def _reply_failed(self, exc: BaseException, timeout: float | None) -> NoReturn:
        """A reply could not be read: a timeout leaves the session usable, the rest end it."""
        if isinstance(exc, TimeoutError):
            self._timed_out = True
            raise RequestTimeout(
                f"{self.peer} call timed out after {timeout or 0:.3f}s", timeout_seconds=timeout
            ) from None
        if isinstance(exc, ConnectionLost):
            self._end(f"connection closed: {exc}")
        else:
            self._end(f"connection closed after a protocol error: {exc}")
        raise exc

    def _raise_error(self, err: m.Error) -> None:
        code = CODE_NAMES.get(err.code, "UNSPECIFIED")
        text = term_safe(err.message)  # the peer's words end up on a terminal, one line (issue 28)
        if code == "PROTOCOL":
            self._end(f"connection closed: the server reported a protocol error: {text}")
            raise ProtocolException(text)
        exc = exception_for_code(code, text, op=term_safe(err.op), recoverable=err.recoverable)
        if not err.recoverable:  # DELTA-19 / DEC-7: the server ended the session
            self._end(f"connection closed: the session ended after a fatal env error: {exc}")
        raise exc

    # -- ending -----------------------------------------------------------------------------

    def _end(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
        self.protocol.break_()
        self._drop_pending_attach()
        self.conn.close()

    def _drop_pending_attach(self) -> None:
        """Release the mapping of an ``Attach`` whose answer never came (the session is ending)."""
        pending, self._pending_attach = self._pending_attach, None
        if pending is not None:
            _rid, path, ring = pending
            ring.close()
            shm.discard(path)

    def close(self, reason: str = "") -> list[m.EpisodeRecord]:
        """Graceful Close round trip (bounded), then detach; idempotent (CLT-10)."""
        if self._closed_reason is not None:
            self.conn.close()
            return []
        records: list[m.EpisodeRecord] = []
        timeout = min(self.request_timeout or _CLOSE_TIMEOUT_SECONDS, _CLOSE_TIMEOUT_SECONDS)
        try:
            reply, _ = self.request(m.Close(reason=reason), timeout=timeout)
            records = list(reply.final_episodes)
        except Exception:
            pass  # detach locally instead of raising (CLT-10)
        self._closed_reason = "not connected: this client was closed; create a new one to reconnect"
        self.protocol.close()
        self._drop_pending_attach()
        self.conn.close()
        return records

    def shutdown(self, reason: str) -> bool:
        """Ask the endpoint owner to stop serving; closes locally when accepted (CLT-11)."""
        reply, _ = self.request(m.Shutdown(reason=reason), timeout=self.request_timeout)
        if reply.accepted:
            self._closed_reason = "not connected: the endpoint was shut down"
            self.protocol.close()
            self.conn.close()
        return bool(reply.accepted)

    def detach(self) -> None:
        """Close the socket without a Close round trip."""
        self._end("not connected: this client was closed; create a new one to reconnect")
