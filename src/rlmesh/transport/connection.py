"""A session's connection: the socket stream plus the shared-memory ring adapter.

:class:`Connection` is what clients and the serve loop hold. The layers, each in its
own module:

- the socket stream (:mod:`rlmesh.transport.stream`): frames over a stream socket;
- the busy-poll policy (:mod:`rlmesh.transport.busypoll`): whether, and how long, the
  first read of an answer spins instead of sleeping;
- the ring adapter (here): once a handshake agreed on shared-memory rings
  (:mod:`rlmesh.transport.shm`), frames go through the rings and the socket carries only
  doorbells, frames too large for a ring, and the end of the connection.

The layers are one class hierarchy, not objects calling each other: a step pays no
extra hop for the split.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from typing import Any

from ..errors import ConnectionLost, ProtocolException
from ..wire import frames
from ..wire.frames import Frame, FrameLimits
from .busypoll import busy_poll_default, yield_cpu
from .shm import DOORBELL_KIND, MARKER, Channel, doorbell
from .sockets import dial, listen
from .stream import SocketStream, _advance, _nbytes, _wait_for

__all__ = ["SHM_STALL_SECONDS", "Connection", "busy_poll_default", "dial", "listen"]

_DOORBELL = doorbell()
_WOKEN = Frame(DOORBELL_KIND, 0, memoryview(b""), [])  # "look at the ring again"
_RING_RECHECK_SECONDS = 0.05
SHM_STALL_SECONDS = 10.0  # a peer that leaves its ring full this long is treated as gone


class Connection(SocketStream):
    """One framed, bidirectional stream, through shared-memory rings once agreed.

    Busy polling (``busy_poll`` seconds, 0 = off; :mod:`rlmesh.transport.busypoll`)
    applies to the ring as to the socket. Shared-memory rings (``shm``, see
    :mod:`rlmesh.transport.shm`): once a handshake agreed on them, frames go through the
    rings and the socket carries only doorbells, frames too large for a ring, and the
    end of the connection.

    Args:
        sock: A connected stream socket.
        limits: Frame limits applied to every received prefix.
    """

    __slots__ = ("_await_socket", "_stash", "shm")

    def __init__(self, sock: socket.socket, limits: FrameLimits = frames.DEFAULT_LIMITS) -> None:
        super().__init__(sock, limits)
        self.shm: Channel | None = None  # set after a handshake that agreed on shared-memory rings
        self._await_socket = False  # a ring marker was read: the next frame comes on the socket
        self._stash: deque[Frame] = deque()  # socket frames that arrived ahead of their marker

    # -- sending ------------------------------------------------------------------------

    def send(self, buffers: list[Any], *, deadline: float | None = None) -> None:
        """Send one frame's buffers, in order: through the shared-memory ring when the
        session has one (a frame that does not fit goes on the socket behind a marker),
        else with as few ``sendmsg`` calls as the kernel allows.

        On a non-blocking socket, waits for writability until ``deadline``
        (``time.monotonic()`` seconds); a peer that stops reading past it is
        treated as lost.

        Raises:
            ConnectionLost: the peer is gone (or stalled past the deadline).
            TimeoutError: a blocking socket's timeout expired mid-send.
        """
        ch = self.shm
        if ch is None:
            self._send_socket(buffers, deadline)
            return
        nbytes = getattr(buffers, "nbytes", None)
        if nbytes is None:
            nbytes = sum(_nbytes(b) for b in buffers)
        try:
            asleep = ch.write(buffers, nbytes)
        except ProtocolException as exc:  # the peer corrupted its ring: this connection is over
            raise ConnectionLost(f"the shared-memory ring is corrupt: {exc}") from exc
        if asleep is None:  # too big for the ring, or the ring is full: the socket, in order
            self._marker(ch, deadline)
            self._send_socket(buffers, deadline)
        elif asleep:
            self._send_socket([_DOORBELL], deadline)
        if self.busy_poll:
            self._sent_at = time.perf_counter()

    def _marker(self, ch: Channel, deadline: float | None) -> None:
        limit = time.monotonic() + (
            SHM_STALL_SECONDS if deadline is None else max(0.0, deadline - time.monotonic())
        )
        while True:  # bounded: the reader frees space or we give up
            try:
                if ch.write_marker() is not None:
                    return
            except ProtocolException as exc:
                raise ConnectionLost(f"the shared-memory ring is corrupt: {exc}") from exc
            if time.monotonic() > limit:
                raise ConnectionLost(
                    "the peer stopped reading its shared-memory ring; dropping the connection"
                )
            time.sleep(0.0001)

    # -- sending without blocking (the serve loop) ------------------------------------------

    def post(self, buffers: list[Any], limit: int) -> bool:
        """Send one frame without ever blocking (a non-blocking socket).

        What the kernel does not take now is copied into a per-connection queue that
        :meth:`flush` drains when the socket turns writable; frames stay in order. A
        shared-memory session writes its ring; a ring too full even for a marker means
        the peer stopped reading it.

        Returns:
            ``False`` when the queue would grow past ``limit`` bytes beyond the frame in
            flight: the peer is not reading and the caller drops it.

        Raises:
            ConnectionLost: the peer is gone (or left its ring full).
        """
        ch = self.shm
        if ch is None:
            if len(buffers) == 1 and not self.backlog:
                # The common case (issue 24): one small frame, nothing queued ahead of it.
                one = buffers[0]
                try:
                    sent = self.sock.send(one)
                except BlockingIOError:
                    sent = 0
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as exc:
                    raise ConnectionLost(
                        f"the peer closed the connection ({exc.strerror or exc})"
                    ) from exc
                except OSError as exc:
                    raise ConnectionLost(f"sending failed: {exc}") from exc
                if type(one) is bytes and sent == len(one):
                    if self.busy_poll:
                        self._sent_at = time.perf_counter()
                    return True
                return self._post_socket(_advance(buffers, sent), limit)
            return self._post_socket(buffers, limit)
        # the shared-memory ring
        nbytes = getattr(buffers, "nbytes", None)
        if nbytes is None:
            nbytes = sum(_nbytes(b) for b in buffers)
        try:
            asleep = ch.write(buffers, nbytes)
            if asleep is None:  # too big for the ring, or the ring is full: the socket, in order
                if ch.write_marker() is None:
                    raise ConnectionLost(
                        "the peer stopped reading its shared-memory ring; dropping the connection"
                    )
                asleep = None
        except ProtocolException as exc:
            raise ConnectionLost(f"the shared-memory ring is corrupt: {exc}") from exc
        if asleep is None:
            ok = self._post_socket(buffers, limit)
        elif asleep:
            ok = self._post_socket([_DOORBELL], limit)
        else:
            ok = True
        if self.busy_poll:
            self._sent_at = time.perf_counter()
        return ok

    # -- receiving ----------------------------------------------------------------------

    def recv_frame(self) -> Frame | None:
        """Receive one whole frame.

        Returns ``None`` only on a non-blocking socket that ran dry mid-frame
        (call again when readable; progress is kept).

        Raises:
            ConnectionLost: EOF or a socket error.
            TimeoutError: the socket timeout expired (progress is kept).
            ProtocolException: the bytes are not a valid frame.
        """
        ch = self.shm
        if ch is None:
            return self._recv_socket()
        return self._recv_shm(ch)

    def _recv_shm(self, ch: Channel) -> Frame | None:
        """The shared-memory read: ring first, a short poll, then sleep on the socket."""
        pc = time.perf_counter
        sent, self._sent_at = self._sent_at, 0.0  # the socket below must not busy-poll again
        polled = caught = False
        try:
            for _ in range(1_000_000):  # bounded: every pass reads, polls or waits on the socket
                if self._await_socket:
                    frame = self._socket_data()
                    if frame is None:
                        self._sent_at = sent
                        return None
                    self._await_socket = False
                    break
                got = ch.read(self.limits)
                if got is MARKER:
                    self._await_socket = True
                    continue
                if got is not None:
                    frame = got  # type: ignore[assignment]
                    break
                if sent and not polled:
                    polled = True
                    budget = self._budget()
                    if budget:
                        end = pc() + budget
                        pending = ch.pending
                        while not pending() and pc() < end:
                            yield_cpu()  # a no-op when nothing else wants this CPU
                        if pending():
                            caught = True
                            continue
                if not ch.asleep:
                    ch.sleeping(True)
                    if ch.pending():
                        continue
                frame = self._socket_wait()
                if frame is None:
                    self._sent_at = sent
                    return None  # non-blocking and dry: the flag stays up, a doorbell will come
                if frame.kind != DOORBELL_KIND:
                    self._stash.append(frame)  # its marker is already in the ring
            else:  # pragma: no cover - the loop always exits through a read
                raise ConnectionLost("the shared-memory ring made no progress")
        except BaseException:
            if ch.asleep:
                ch.sleeping(False)
            self._sent_at = sent
            raise
        if ch.asleep:
            ch.sleeping(False)
        if sent:
            self._answered(pc() - sent, caught)
        return frame

    def _socket_data(self) -> Frame | None:
        """The frame a ring marker announced: stashed already, or the next non-doorbell one."""
        if self._stash:
            return self._stash.popleft()
        for _ in range(1_000_000):  # bounded: doorbells are 24-byte frames the peer sent
            frame = self._recv_socket()
            if frame is None or frame.kind != DOORBELL_KIND:
                return frame
        raise ConnectionLost("the peer sent nothing but doorbells")  # pragma: no cover

    def _socket_wait(self) -> Frame | None:
        """Block on the socket for a doorbell or a frame, rechecking the ring every 50 ms."""
        if self._timeout == 0.0 or self.mid_frame:
            return self._recv_socket()  # non-blocking (the serve loop waits in epoll), or mid-frame
        ch = self.shm
        assert ch is not None
        deadline = self.deadline
        if deadline is None and self._timeout is not None:
            deadline = time.monotonic() + self._timeout
        while True:
            wait = _RING_RECHECK_SECONDS
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    raise TimeoutError("timed out")
            if _wait_for(self.sock, False, wait):
                return self._recv_socket()
            if ch.pending():  # a lost doorbell: never more than one recheck late
                return _WOKEN

    def close(self) -> None:
        if self.closed:
            return
        if self.shm is not None:
            self.shm.close()
        super().close()
