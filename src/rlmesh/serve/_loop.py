"""The serve loop: one thread, one selector, one active session (DESIGN, DELTA-16).

The loop accepts connections, answers ``Ping`` and ``Shutdown`` from anyone,
admits one ``Hello`` at a time into *the* session (a second client is refused
with ``Busy`` at handshake) and runs the session's requests inline: the env is
only ever touched from this thread, with no hop per step. Sockets are
non-blocking and frames are read incrementally, so a client that stalls
mid-frame blocks nobody. Replies never block the loop either: what a peer's
socket does not take at once waits in that connection's queue (bounded by
:data:`SESSION_BACKLOG_BYTES`, :data:`STRANGER_BACKLOG_BYTES` before a handshake)
and goes out when the socket turns writable; a peer that lets the queue overflow
is dropped. Malformed input (or anything else one connection's bytes can make go
wrong) gets an ``Error`` frame and closes that connection only.

The loop is a reactor (``rlmesh.transport.reactor``: poller, waker, accept, reaping)
driving a protocol: each connection's :class:`rlmesh.wire.session.Session` checks
every request and reply against the state table, and one dispatch table routes a
request either to the loop's own handlers (``Ping``, ``Shutdown``, ``Hello``,
``Attach``, ``Close``, ``Configure``: the same for every service) or to the
service's ``handle``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import CODE_NUMBERS, ConnectionLost, ProtocolException
from ..transport.connection import Connection, busy_poll_default
from ..transport.reactor import Poller, Waker, accept_ready, overdue
from ..transport.tls import TLSSocket, server_context
from ..wire import frames, messages as m
from ..wire.session import FrameTooLarge
from ._auth import Gate
from ._driver import RequestFailed, reply_too_large
from ._loop_auth import LoopAuth
from ._loop_requests import (  # _Peer, _accepted_at: the sessions supervisors import them here
    LoopRequests,
    Service as Service,
    _accepted_at as _accepted_at,
    _describe,
    _Peer as _Peer,
)
from ._metrics import DURATION_BOUNDS_NS, Meter, Reports, add_counts, observe_reply
from ._options import ServeOptions

__all__ = ["SESSION_BACKLOG_BYTES", "STRANGER_BACKLOG_BYTES", "ServeLoop", "Service"]

log = logging.getLogger("rlmesh.serve")

#: Bytes of replies that may wait for a slow reader beyond the frame in flight: the
#: active session (a pipelining client), and a connection before its handshake.
SESSION_BACKLOG_BYTES = 1024 * 1024
STRANGER_BACKLOG_BYTES = 64 * 1024
HANDSHAKE_DEADLINE_SECONDS = 30.0  # a connection must say Hello (or go) within this window
#: Requests a connection without a session is answered (a probe sends one Ping per
#: connection); the one after that drops it. Counted in replies, so whether a peer that
#: pipelines Pings and never reads is dropped does not hang on how much the kernel buffers.
MAX_STRANGER_REPLIES = 1024
MAX_PENDING = 64  # connections without a session; the oldest is dropped past this
RING_RECHECK_SECONDS = 0.05  # with shared-memory rings, how often the loop looks at them unasked
READ_ON_SECONDS = 0.002  # how long one busy-polling session may keep the loop from other sockets


_STEP = m.Step.KIND


class ServeLoop(LoopRequests, LoopAuth):
    """Runs a :class:`Service` on a bound listener until :meth:`stop` (thread-safe)."""

    def __init__(
        self,
        listener: socket.socket,
        service: Service,
        options: ServeOptions,
        *,
        limits: frames.FrameLimits | None = None,
    ) -> None:
        self.listener = listener
        self.service = service
        self.options = options
        self.limits = frames.default_limits() if limits is None else limits
        self._listener_lock = threading.Lock()
        self._listener_closed = False
        self.stop_reason: str | None = None
        self._stop = threading.Event()
        self._stopping = False  # the Event's state as a plain attribute: read on every request
        self._waker = Waker()
        self._sel = Poller()
        self._peers: dict[int, _Peer] = {}
        self._active: _Peer | None = None
        self._last_activity = time.monotonic()
        self._idle_timed = False  # an idle timeout is set: requests note the time they came
        self.on_request: Callable[[], None] | None = None
        self.on_teardown: Callable[[], None] | None = None  # called once, as the loop ends
        self._busy_poll = busy_poll_default()
        self.fan_out_peer = (
            False  # the active client steps several endpoints at once (no spinning for it)
        )
        #: The service's straight road for ``Step`` (issue 24): ``step(msg, segments) ->
        #: (reply, segments)``, resolved once; ``None`` sends steps through ``handle``.
        self._step: Callable[[Any, list[Any]], tuple[Any, list[Any]]] | None = getattr(
            service, "step", None
        )
        # Who may come in (docs/security.md): the token gate, and the refusals it holds back
        self._gate = Gate(options.token)
        self._held: list[tuple[float, _Peer, Any, int]] = []
        self._ping_auth = ""  # the Ping being answered: "" (no token needed), "ok", "required"
        # TLS: accepted sockets are wrapped, and shake hands on their first reads
        self._tls_ctx: Any = (
            server_context(options.tls_cert, options.tls_key, options.tls_client_ca)  # type: ignore[arg-type]
            if options.tls
            else None
        )
        # Metrics (``metrics_address``): plain counters, read by a scrape; None: nothing counted
        self._meter: Meter | None = None
        if options.metrics_address is not None:
            lanes = service.contract().get("num_envs", 1)
            self._meter = Meter(
                service.service, lanes if isinstance(lanes, int) and lanes > 0 else 1
            )
        self._reports: Reports | None = None  # a supervisor's: its workers' counts
        # The requests the loop answers itself, whatever the service; every other legal
        # request goes to ``service.handle`` (each service keeps one table of its own).
        # Hello, Ping and Shutdown (what a stranger may send) pass the gate first.
        self._handlers: dict[int, Callable[[_Peer, Any, int], None]] = {
            m.Ping.KIND: self._gate_ping,
            m.Shutdown.KIND: self._gate_shutdown,
            m.Hello.KIND: self._gate_hello,
            m.Attach.KIND: self._attach,
            m.Close.KIND: self._close,
            m.Configure.KIND: self._configure,
        }

    # -- control ------------------------------------------------------------------------

    def stop(self, reason: str) -> None:
        """Ask the loop to stop; the first reason wins (SRV-46)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stopping = True
        self._stop.set()
        self._waker.wake()

    def close_listener(self) -> None:
        """Stop accepting connections now; thread-safe, idempotent.

        ``shutdown()`` calls it when the loop is stuck in an env call past the drain
        budget, so the endpoint refuses new clients at once instead of letting them hang.
        """
        with self._listener_lock:
            if self._listener_closed:
                return
            self._listener_closed = True
        try:
            self.listener.close()
        except OSError:
            pass

    @property
    def in_use(self) -> int:
        """Sessions being served now."""
        return int(self._active is not None)

    def metrics_values(self) -> dict[str, Any]:
        """What a scrape reports (any thread): the counts, the sessions, the refused tokens."""
        meter = self._meter
        values: dict[str, Any] = meter.snapshot() if meter is not None else {}
        if self._reports is not None:
            add_counts(values, self._reports.total())
        values["sessions_active"] = self.in_use
        values["auth_failures"] = self._gate.failures
        return values

    # -- the loop -----------------------------------------------------------------------

    def _start_polling(self) -> Any:
        """Watch the listener and the waker (``run``'s start); returns the waker's end."""
        self.listener.setblocking(False)
        self._sel.register(self.listener, self.listener)
        wake = self._waker.reader
        self._sel.register(wake, wake)
        self._last_activity = time.monotonic()
        return wake

    def _poll_timeout(self, idle: float | None) -> float | None:
        """How long the next poll may wait (1 s at most, less as ``idle`` runs out); ``None``
        once the endpoint has been idle ``idle`` seconds (the loop is stopping)."""
        if idle is None:
            return 1.0
        remaining = idle - (time.monotonic() - self._last_activity)
        if remaining <= 0:
            self.stop("idle timeout")
            return None
        return min(1.0, remaining)

    def run(self) -> None:
        sel = self._sel
        wake = self._start_polling()
        next_tick = self._last_activity + 1.0
        idle = self.options.idle_timeout_seconds
        self._idle_timed = idle is not None
        try:
            self._starting()
            while not self._stopping:
                timeout = self._poll_timeout(idle)
                if timeout is None:
                    break
                active = self._active
                if active is not None and active.conn.shm is not None:
                    # a request published just before the loop raised its flag rang no doorbell
                    timeout = (
                        0.0 if active.conn.shm.pending() else min(timeout, RING_RECHECK_SECONDS)
                    )
                for obj in sel.poll(timeout):
                    if obj is self.listener:
                        self._accept()
                    elif obj is wake:
                        self._waker.drain()
                    elif type(obj) is _Peer:
                        if obj.conn.backlog:
                            self._writable(obj)
                        self._readable(obj)
                    else:  # a subclass's own (the sessions supervisor's workers and relays)
                        self._event(obj)
                    if self._stopping:
                        break
                if self._queued:  # requests held to the end of the round (fused Predicts)
                    self._answer_queued()
                active = self._active
                if active is not None and active.conn.shm is not None and active.conn.shm.pending():
                    self._readable(active)
                peers = self._peers
                if self._ticking or (peers and (len(peers) > 1 or self._active is None)):
                    now = time.monotonic()
                    if now >= next_tick:
                        self._tick(now)
                        next_tick = now + 1.0
        finally:
            self._teardown()

    # -- what a subclass adds to the loop (the env loop adds nothing) ----------------------

    _ticking = False  # _tick every second, even when no connection awaits Hello
    #: Requests answered at the end of the poll round (a subclass's own list; never one here).
    _queued: Sequence[Any] = ()

    def _starting(self) -> None:
        """Before the first poll, inside the loop's ``try`` (its teardown follows a failure)."""

    def _event(self, obj: Any) -> None:  # pragma: no cover - the objects a subclass registers
        raise AssertionError(f"the serve loop polled an object it never registered: {obj!r}")

    def _answer_queued(self) -> None:  # pragma: no cover - a subclass's, if it queues requests
        raise NotImplementedError

    def _tick(self, now: float) -> None:
        """Once a second while connections await ``Hello``: drop those past the deadline."""
        self._release_held()
        pending = [p for p in self._peers.values() if not self._in_session(p)]
        for peer in overdue(pending, _accepted_at, now, HANDSHAKE_DEADLINE_SECONDS):
            self._drop(peer)

    def _accept(self) -> None:
        tls = self._tls_ctx
        for raw in accept_ready(self.listener):
            sock: Any = raw
            if tls is not None:
                try:
                    sock = TLSSocket.accept(raw, tls)
                except OSError as exc:  # reset before it was wrapped: that client only
                    log.info("a TLS client left before its connection was set up (%s)", exc)
                    raw.close()
                    continue
            peer = _Peer(Connection(sock, frames.PRE_HANDSHAKE_LIMITS), self.limits.max_frame_bytes)
            self._peers[sock.fileno()] = peer
            self._sel.register(sock, peer)
            pending = [p for p in self._peers.values() if p is not self._active]
            if len(pending) > MAX_PENDING:
                self._drop(min(pending, key=lambda p: p.accepted_at))

    def _writable(self, peer: _Peer) -> None:
        """Send what waits in a peer's queue; stop watching for writability once it is empty."""
        try:
            done = peer.conn.flush()
        except ConnectionLost:
            self._drop(peer)
            return
        if done:
            self._sel.want_write(peer.conn.sock, False)

    def _readable(self, peer: _Peer) -> None:
        # Handle the frame that arrived, then any further frames already buffered
        # (a client may pipeline); don't pay a syscall to learn the socket is dry.
        # A busy-polling session also reads on, for a bounded while: other
        # connections (a health probe, a second client) wait at most that long.
        conn = peer.conn
        until = time.perf_counter() + READ_ON_SECONDS if conn.busy_poll else 0.0
        step = self._step if peer is self._active else None
        meter = self._meter
        for _ in range(64):
            if conn.closed:
                return
            try:
                frame = conn.read_socket() if conn.shm is None else conn.recv_frame()
            except ConnectionLost:
                self._drop(peer)
                return
            except ProtocolException as exc:
                self._protocol_error(peer, exc)
                return
            # e.g. MemoryError for a body the limits allowed: that peer only
            except Exception as exc:
                log.warning(
                    "reading from a client failed (%s); closing its connection", _describe(exc)
                )
                self._drop(peer)
                return
            if frame is None:
                return
            if meter is not None:  # metrics on: the frame's bytes (prefix, header, payload)
                nbytes = frames.PREFIX_SIZE + len(frame.header)
                for seg in frame.segments:
                    nbytes += seg.nbytes
                meter.rx += nbytes
            try:
                if step is not None and frame.kind == _STEP:
                    self._road(peer, frame, step)
                else:
                    self._dispatch(peer, frame)
            except Exception as exc:  # nothing one connection sends may stop the loop
                log.exception("handling a request failed unexpectedly; closing that connection")
                self._protocol_error(
                    peer, ProtocolException(f"the request could not be handled: {_describe(exc)}")
                )
                return
            if self._stopping:
                return
            if conn.rend <= conn.rpos and not (conn.busy_poll and time.perf_counter() < until):
                break  # nothing buffered; a busy-polling session reads on: its next request is due
            step = self._step if peer is self._active else None
        ch = conn.shm
        if ch is not None and not ch.asleep and not conn.closed:
            ch.sleeping(True)  # from here on the client rings the doorbell; run() rechecks the ring

    def _road(
        self,
        peer: _Peer,
        frame: frames.Frame,
        step: Callable[[Any, list[Any]], tuple[Any, list[Any]]],
    ) -> None:
        """A ``Step`` of the active session, straight through (issue 24).

        What :meth:`_dispatch` and :meth:`_send` do for any request, for the one request
        that comes every step: the session checks it (a ``Step`` is legal only once the
        session is ready), the service answers it, the reply goes out. Every failure
        takes the general path's handlers, so its errors and endings are the same.
        """
        rid = frame.request_id
        session = peer.session
        try:
            msg = session.receive(frame)  # legal in this state, and a valid header
        except ProtocolException as exc:
            self._protocol_error(peer, exc, rid)
            return
        timeout_ms = msg.timeout_ms
        started = time.perf_counter_ns() if timeout_ms else 0  # timed only with a deadline
        try:
            reply, segments = step(msg, frame.segments)
            # SES-4: a late result is dropped
            if timeout_ms and (time.perf_counter_ns() - started) / 1e6 > timeout_ms:
                raise RequestFailed(
                    "TIMEOUT", f"env.step timed out after {timeout_ms}ms", op="step"
                )
        except Exception as exc:
            self._failed(peer, _STEP, rid, exc)
            return
        try:
            buffers = session.send(reply, segments)
        # too large, or not encodable: the general path says so (the state is unchanged)
        except Exception:
            self._send(peer, reply, rid, segments)
            self._touch()
            return
        meter = self._meter
        if meter is not None:  # metrics on: counters, one C bisect, no call
            ns = reply.endpoint_ns
            meter.step_buckets[bisect_left(DURATION_BOUNDS_NS, ns)] += 1
            meter.step_ns += ns
            meter.steps += meter.lanes
            if reply.completed:
                meter.episodes += len(reply.completed)
            meter.tx += buffers.nbytes
        conn = peer.conn
        if conn.shm is None and len(buffers) == 1 and not conn.backlog:
            # the common case: one small frame, nothing queued ahead of it (Connection.post's)
            one = buffers[0]
            try:
                sent = conn.sock.send(one)
            except BlockingIOError:
                sent = 0
            except OSError:
                self._drop(peer)  # the peer is gone
                return
            if sent == len(one):
                if conn.busy_poll:
                    conn.sent_now()
            else:  # the rest waits in the connection's queue
                self._post(peer, [memoryview(one)[sent:]])
        else:
            self._post(peer, buffers)
        if self._idle_timed:  # _touch, inlined
            self._last_activity = time.monotonic()
        if self.on_request is not None:
            self.on_request()

    def _post(self, peer: _Peer, buffers: Any, limit: int = SESSION_BACKLOG_BYTES) -> None:
        """Queue a frame (:meth:`Connection.post`), up to ``limit`` bytes of backlog; drop a
        peer that is gone or stopped reading."""
        conn = peer.conn
        try:
            queued = conn.backlog
            if not conn.post(buffers, limit):
                log.info("a client stopped reading its replies; dropping its connection")
                self._drop(peer)
                return
        except ConnectionLost:
            self._drop(peer)
            return
        if conn.backlog and not queued:
            self._sel.want_write(conn.sock, True)

    # -- dispatch -----------------------------------------------------------------------

    def _dispatch(self, peer: _Peer, frame: frames.Frame) -> None:
        rid = frame.request_id
        try:
            msg = peer.session.receive(frame)  # legal in this state, and a valid header
        except ProtocolException as exc:
            self._protocol_error(peer, exc, rid)
            return
        handler = self._handlers.get(frame.kind)
        if handler is not None:
            handler(peer, msg, rid)
            return
        self._request(peer, msg, frame, rid)

    # -- endings --------------------------------------------------------------------------

    def _in_session(self, peer: _Peer) -> bool:
        """Whether ``peer`` holds a session here (its replies may queue up to the session backlog)."""
        return peer is self._active

    def _send(
        self, peer: _Peer, msg: Any, rid: int, segments: list[Any] | tuple[Any, ...] = ()
    ) -> None:
        """Queue ``msg`` as the answer to the peer's request in flight (``rid``, for the record)."""
        if peer.conn.closed:
            return
        try:
            buffers = peer.session.send(msg, segments)
        except FrameTooLarge as exc:
            self._oversized(peer, msg, rid, exc.nbytes)
            return
        except Exception as exc:  # e.g. a str that is not valid UTF-8 inside an env's info
            if isinstance(msg, m.Error):
                self._end_active(peer)
                return
            failure = RequestFailed(
                "INTERNAL",
                f"the reply could not be encoded: {type(exc).__name__}: {exc}",
                recoverable=False,
            )
            self._send(peer, failure.to_message(), rid)
            self._end_active(peer)
            return
        if self._meter is not None:
            observe_reply(self._meter, msg, buffers.nbytes)
        if self._in_session(peer):
            limit = SESSION_BACKLOG_BYTES
        else:
            limit = STRANGER_BACKLOG_BYTES
            peer.replies += 1
            if peer.replies > MAX_STRANGER_REPLIES:
                log.info("a connection without a session sent too many requests; dropping it")
                self._drop(peer)
                return
        self._post(peer, buffers, limit)

    def _oversized(self, peer: _Peer, msg: Any, rid: int, nbytes: int) -> None:
        """A reply larger than ``max_frame_bytes`` is never sent: a fatal env error says why."""
        failure = reply_too_large(msg, nbytes, self.limits.max_frame_bytes)
        log.error("%s", failure.message)
        self._send(peer, failure.to_message(), rid)
        self._end_active(peer)

    def _protocol_error(self, peer: _Peer, exc: ProtocolException, rid: int = 0) -> None:
        log.info("protocol error from a client, closing its connection: %s", exc)
        self._send(
            peer, m.Error(code=CODE_NUMBERS["PROTOCOL"], message=str(exc), recoverable=False), rid
        )
        self._drop(peer)

    def _end_active(self, peer: _Peer, *, already_ended: bool = False) -> None:
        if peer is self._active:
            if not already_ended:
                self.service.end_session()
            self._active = None
        self._drop(peer)

    def _drop(self, peer: _Peer) -> None:
        if peer is self._active:
            self._active = None
            try:
                self.service.end_session()  # SES-5: an abrupt end truncates active episodes
            except Exception:  # pragma: no cover - bookkeeping only
                log.exception("ending the session failed")
        conn = peer.conn
        if not conn.closed:
            self._sel.unregister(conn.sock)
            self._peers.pop(conn.sock.fileno(), None)
            conn.close()
        else:
            for fd, p in list(self._peers.items()):
                if p is peer:
                    del self._peers[fd]

    def close_unstarted(self) -> None:
        """Release the listener, the wake-up pair and the poller of a loop that never ran."""
        self._teardown()

    def _teardown(self) -> None:
        if self.on_teardown is not None:
            hook, self.on_teardown = self.on_teardown, None
            try:
                hook()
            except Exception:  # pragma: no cover - bookkeeping only
                log.exception("the serve loop's teardown hook failed")
        for peer in list(self._peers.values()):
            self._drop(peer)
        for obj in (self.listener, self._waker.reader):
            self._sel.unregister(obj)
        self._sel.close()
        self.close_listener()
        self._waker.close()
