"""The socket stream: one framed, bidirectional stream over a stream socket.

Scatter-gather send, ``recv_into`` receive. This is the only place that turns
``OSError`` into rlmesh exceptions (STYLE "map once, at the boundary"):
``ConnectionLost`` for a dead peer (the ``OSError`` as ``__cause__``),
``socket.timeout`` passed up as ``TimeoutError`` for the caller to word,
``ProtocolException`` from the sans-IO frame layer.

Reading is resumable: the partial prefix or body survives a timeout (or a
non-blocking socket running dry), so the next call continues the same frame and
the stream never desynchronizes. Receiving reads into a per-connection scratch
buffer, so a small frame costs one ``recv_into``; its body is then copied once into
a fresh buffer (a few hundred bytes). A large body is read straight into its own
fresh buffer after the bytes already in the scratch: one copy from the kernel.

:class:`rlmesh.transport.connection.Connection` adds the shared-memory ring adapter
on top; dialing and listening live in :mod:`rlmesh.transport.sockets`.
"""

from __future__ import annotations

import math
import os
import select
import socket
import struct
import time
from collections import deque
from typing import Any

import numpy as np

from ..errors import ConnectionLost
from ..wire import frames
from ..wire.frames import _TABLES, PREFIX_SIZE, Frame, FrameLimits, FramePlan, _table
from .busypoll import _DONTWAIT, BusyPolling, yield_cpu

__all__ = ["SocketStream"]

_PREFIX, _MAGIC, _VERSION, _ALIGN = (
    frames.PREFIX,
    frames.MAGIC,
    frames.VERSION,
    frames.SEGMENT_ALIGN,
)
_U64 = struct.Struct("<Q")
_U8 = np.dtype(np.uint8)
_new = object.__new__
_IOV_MAX = 512  # stay well below the kernel's 1024-iovec limit per sendmsg
_SCRATCH = (
    8 * 1024
)  # one recv_into fetches a whole small frame; large bodies go straight to their buffer


class SocketStream(BusyPolling):
    """Frames over one stream socket (blocking, with a timeout, or non-blocking).

    Args:
        sock: A connected stream socket.
        limits: Frame limits applied to every received prefix.
    """

    __slots__ = (
        "_bfill",
        "_body",
        "_outq",
        "_plan",
        "_scratch",
        "_sview",
        "_timeout",
        "backlog",
        "closed",
        "deadline",
        "limits",
        "rend",
        "rpos",
        "sock",
    )

    def __init__(self, sock: socket.socket, limits: FrameLimits = frames.DEFAULT_LIMITS) -> None:
        super().__init__()
        self.sock = sock
        self.limits = limits
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        elif sock.family == getattr(socket, "AF_UNIX", None):
            _grow_buffers(sock)
        self._scratch = bytearray(_SCRATCH)
        self._sview = memoryview(self._scratch)
        #: Unread bytes live in the scratch buffer at ``[rpos, rend)``: ``rend > rpos`` means a
        #: pipelined frame is buffered (plain attributes: the serve loop reads them every step).
        self.rpos = 0
        self.rend = 0
        self._plan: FramePlan | None = None
        self._body: np.ndarray[Any, np.dtype[np.uint8]] | None = None
        self._bfill = 0
        self._timeout: Any = sock.gettimeout()
        self.closed = False
        self._outq: deque[memoryview] = deque()  # bytes post() could not send yet (server side)
        #: Bytes of frames :meth:`post` queued because the peer was not reading (a plain
        #: attribute: the serve loop reads it on every wake-up).
        self.backlog = 0
        # time.monotonic() by which the current request must be answered (client side): every
        # blocking read waits at most until then, however the bytes trickle in
        self.deadline: float | None = None

    # -- sending ------------------------------------------------------------------------

    def _send_socket(
        self, buffers: list[Any], deadline: float | None, nowait: bool = False
    ) -> None:
        sock = self.sock
        bufs = buffers
        try:
            if (
                len(bufs) == 1
            ):  # a small frame: plain send() is cheaper than sendmsg() (TCP: ~0.5 µs)
                try:
                    sent = sock.send(bufs[0])
                except BlockingIOError:
                    sent = 0
                one = bufs[0]
                if sent == (len(one) if type(one) is bytes else _nbytes(one)):
                    if self.busy_poll:
                        self._sent_at = time.perf_counter()
                    return
                bufs = _advance(bufs, sent)
            elif len(bufs) <= _IOV_MAX:  # common case: one sendmsg takes everything
                try:
                    sent = sock.sendmsg(bufs)
                except BlockingIOError:
                    sent = 0
                total = getattr(bufs, "nbytes", None)
                if total is None:
                    total = sum(_nbytes(b) for b in bufs)
                if sent == total:
                    if self.busy_poll:
                        self._sent_at = time.perf_counter()
                    return
                bufs = _advance(bufs, sent)
            while bufs:
                try:
                    sent = sock.sendmsg(bufs[:_IOV_MAX])
                except BlockingIOError:
                    if nowait:
                        raise _Partial(bufs) from None
                    self._wait_writable(deadline)
                    continue
                bufs = _advance(bufs, sent)
            if self.busy_poll:
                self._sent_at = time.perf_counter()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as exc:
            raise ConnectionLost(f"the peer closed the connection ({exc.strerror or exc})") from exc
        except TimeoutError:
            raise
        except OSError as exc:
            raise ConnectionLost(f"sending failed: {exc}") from exc

    def _wait_writable(self, deadline: float | None) -> None:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise ConnectionLost("the peer stopped reading; dropping the connection")
        if not _wait_for(self.sock, True, remaining):
            raise ConnectionLost("the peer stopped reading; dropping the connection")

    # -- sending without blocking (the serve loop) ------------------------------------------

    def _post_socket(self, buffers: list[Any], limit: int) -> bool:
        if not self._outq:
            try:
                self._send_socket(buffers, None, nowait=True)
                return True
            except _Partial as partial:
                rest = partial.rest
        else:
            rest = buffers
        n = sum(_nbytes(b) for b in rest)
        if self.backlog and self.backlog + n > limit:
            return False
        self._outq.append(
            memoryview(b"".join(b if type(b) is bytes else memoryview(b).cast("B") for b in rest))
        )
        self.backlog += n
        self.flush()
        return True

    def flush(self) -> bool:
        """Send what :meth:`post` queued, without blocking; ``True`` when nothing is left.

        Raises:
            ConnectionLost: the peer is gone.
        """
        q = self._outq
        sock = self.sock
        try:
            while q:
                head = q[0]
                try:
                    sent = sock.send(head)
                except BlockingIOError:
                    return False
                self.backlog -= sent
                if sent < len(head):
                    q[0] = head[sent:]
                    return False
                q.popleft()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError) as exc:
            raise ConnectionLost(f"the peer closed the connection ({exc.strerror or exc})") from exc
        except OSError as exc:
            raise ConnectionLost(f"sending failed: {exc}") from exc
        return True

    # -- receiving ----------------------------------------------------------------------

    def _recv_socket(self) -> Frame | None:
        """Read one frame from the socket (``None``: a non-blocking socket ran dry mid-frame).

        The common case (issues 24 and 40) runs here in one frame of Python: nothing is
        buffered, so a small frame arrives whole in one read (a plain one when there is no
        deadline to arm and no answer to poll for) and is cut out of the scratch at once,
        with what :func:`rlmesh.wire.frames.decode_prefix_at` and
        :func:`rlmesh.wire.frames.split_body` check inlined. Anything else, and any doubt
        about the bytes, goes to :meth:`_recv_rest`, whose words stay the errors.
        """
        if self._plan is not None or self.rpos != self.rend:
            return self._recv_rest()
        try:
            self.rpos = self.rend = 0
            if self.deadline is None and not self._sent_at:
                n = self.sock.recv_into(self._scratch)
                if not n:
                    raise self._eof()
                self.rend = n
            else:
                self._fill()
                n = self.rend
        except BlockingIOError:
            return None
        except (TimeoutError, ConnectionLost):
            raise
        except OSError as exc:
            raise ConnectionLost(f"receiving failed: {exc}") from exc
        if n < PREFIX_SIZE:
            return self._recv_rest()
        scratch = self._scratch
        magic, version, kind, rid, hlen, count, size = _PREFIX.unpack_from(scratch, 0)
        limits = self.limits
        if not (
            magic == _MAGIC
            and version == _VERSION
            and count <= limits.max_segments
            and hlen <= limits.max_header_bytes
            and size <= limits.max_frame_bytes
            and size < frames.SMALL_BODY
            and n - PREFIX_SIZE >= size
        ):
            return self._recv_rest()
        end = PREFIX_SIZE + size
        if not count:  # a header and nothing else (a scalar step's request): no body buffer
            if hlen != size:
                return self._recv_rest()
            header: Any = scratch[PREFIX_SIZE:end]  # a copy: the scratch is read into again
            segments = []
        else:
            raw = scratch[PREFIX_SIZE:end]  # a fresh copy the segments view (writable arrays)
            view = memoryview(raw)
            header = view[:hlen]
            start = hlen + (-hlen % 8)
            if count == 1:  # one observation or action leaf: the common case, one array
                if start + 8 > size:
                    return self._recv_rest()
                (length,) = _U64.unpack_from(view, start)
                pos = start + 8
                pos += -pos % _ALIGN
                if pos + length != size:
                    return self._recv_rest()
                segments = [np.frombuffer(raw, _U8, length, pos)]
            else:
                body = np.frombuffer(raw, _U8)
                pos = start + 8 * count
                if pos > size:
                    return self._recv_rest()
                segments = []
                for length in (_TABLES.get(count) or _table(count)).unpack_from(view, start):
                    pos += -pos % _ALIGN
                    if length > size - pos:
                        return self._recv_rest()
                    segments.append(body[pos : pos + length])
                    pos += length
                if pos != size:
                    return self._recv_rest()
        if end == n:
            self.rpos = self.rend = 0
        else:
            self.rpos = end
        frame = _new(Frame)
        frame.kind = kind
        frame.request_id = rid
        frame.header = header
        frame.segments = segments
        return frame

    #: The socket read itself (:meth:`Connection.recv_frame` without the ring adapter's hop),
    #: for a caller that knows the connection has no shared-memory ring: one frame less.
    read_socket = _recv_socket

    def _recv_rest(self) -> Frame | None:
        """The general read: frames split across reads, pipelined, large or malformed."""
        try:
            if self._plan is None:
                while self.rend - self.rpos < PREFIX_SIZE:
                    self._fill()
                start = self.rpos
                plan = frames.decode_prefix_at(self._scratch, start, self.limits)
                start += PREFIX_SIZE
                self.rpos = start
                size = plan.body_len
                avail = self.rend - start
                if avail >= size:  # the whole body is already here: one copy out of the scratch
                    if size < frames.SMALL_BODY:
                        body = np.frombuffer(self._scratch[start : start + size], np.uint8)
                    else:  # keep the 64-byte alignment promise for larger bodies
                        body = frames.new_body(plan)
                        body[:] = np.frombuffer(self._scratch, np.uint8, size, start)
                    start += size
                    if start == self.rend:
                        self.rpos = self.rend = 0
                    else:
                        self.rpos = start
                    return frames.split_body(plan, body)
                body = frames.new_body(plan)
                if avail:
                    body[:avail] = np.frombuffer(self._scratch, np.uint8, avail, start)
                    self._consume(avail)
                self._plan, self._body, self._bfill = plan, body, avail
            plan, pending = self._plan, self._body
            assert pending is not None
            body = pending
            size = plan.body_len
            if self._bfill < size:
                view = memoryview(body)  # type: ignore[arg-type]
                sock = self.sock
                while self._bfill < size:
                    if self.deadline is not None:
                        self._arm()
                    n = sock.recv_into(view[self._bfill :])
                    if not n:
                        raise self._eof()
                    self._bfill += n
        except BlockingIOError:
            return None
        except TimeoutError:
            raise
        except ConnectionLost:
            raise
        except OSError as exc:
            raise ConnectionLost(f"receiving failed: {exc}") from exc
        self._plan = None
        self._body = None
        return frames.split_body(plan, body)

    def _arm(self) -> None:
        """Before a blocking read within a request: never wait past :attr:`deadline`.

        The socket timeout is lowered only once the remaining time is 5 % below it, so a
        request answered promptly costs one clock read and no system call.
        """
        assert self.deadline is not None
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out")
        current = self._timeout
        if current is None or remaining < 0.95 * current:
            self.sock.settimeout(remaining)
            self._timeout = remaining

    def _fill(self) -> None:
        """Read more bytes into the scratch buffer (compacting it first if needed)."""
        if self.rpos == self.rend:
            self.rpos = self.rend = 0
        elif len(self._scratch) - self.rend < PREFIX_SIZE:
            n = self.rend - self.rpos
            self._scratch[:n] = self._scratch[self.rpos : self.rend]
            self.rpos, self.rend = 0, n
        view = self._sview[self.rend :]
        if self.deadline is not None:
            self._arm()
        n = self._poll(view) if self._sent_at else self.sock.recv_into(view)
        if not n:
            raise self._eof()
        self.rend += n

    def _poll(self, view: memoryview) -> int:
        """The first read of an answer: busy-poll (see the class docs), then read normally."""
        pc = time.perf_counter
        sent = self._sent_at
        budget = self._budget()
        if budget:
            sock = self.sock
            if self._timeout is None:  # a blocking fd: ask for this one call not to block

                def read() -> int:
                    return sock.recv_into(view, 0, _DONTWAIT)

            else:  # the fd is already non-blocking; a plain read skips the timeout's poll()
                fd = sock.fileno()

                def read() -> int:
                    return os.readv(fd, [view])

            end = pc() + budget
            n = -1
            while True:
                try:
                    n = read()
                    break
                except BlockingIOError:
                    if pc() > end:
                        break
                    yield_cpu()
            if n >= 0:
                self._answered(pc() - sent, True)
                return n
        n = self.sock.recv_into(view)  # blocks, times out, or raises BlockingIOError when dry
        self._answered(pc() - sent)
        return n

    def _consume(self, n: int) -> None:
        self.rpos += n
        if self.rpos == self.rend:
            self.rpos = self.rend = 0

    def _eof(self) -> ConnectionLost:
        if self.mid_frame:
            return ConnectionLost("the peer closed the connection in the middle of a frame")
        return ConnectionLost("the peer closed the connection")

    @property
    def buffered(self) -> bool:
        """Whether received bytes are waiting in the scratch buffer (a pipelined frame)."""
        return self.rend > self.rpos

    @property
    def mid_frame(self) -> bool:
        """Whether a partially received frame is pending."""
        return self.rend > self.rpos or self._plan is not None

    def settimeout(self, seconds: float | None) -> None:
        """Set the socket timeout (a no-op when unchanged: it costs a syscall)."""
        if seconds != self._timeout:
            self.sock.settimeout(seconds)
            self._timeout = seconds

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    def fileno(self) -> int:
        return self.sock.fileno()


class _Partial(Exception):
    """A non-blocking send stopped early: ``rest`` is what the kernel did not take."""

    def __init__(self, rest: list[Any]) -> None:
        super().__init__()
        self.rest = rest


def _wait_for(sock: socket.socket, writable: bool, seconds: float | None) -> bool:
    """Whether ``sock`` became readable (or writable) within ``seconds``.

    ``poll()`` where the platform has it (no ``FD_SETSIZE`` cap on descriptor numbers),
    else ``select()``.
    """
    if not hasattr(select, "poll"):  # pragma: no cover - Windows
        ready = (
            select.select([], [sock], [], seconds)
            if writable
            else select.select([sock], [], [], seconds)
        )
        return bool(ready[1] if writable else ready[0])
    poller = select.poll()
    poller.register(
        sock.fileno(),
        (select.POLLOUT if writable else select.POLLIN) | select.POLLERR | select.POLLHUP,
    )
    timeout_ms = None if seconds is None else max(0, math.ceil(seconds * 1000))
    return bool(poller.poll(timeout_ms))


_UNIX_BUFFER_BYTES = 4 * 1024 * 1024


def _grow_buffers(sock: socket.socket) -> None:
    """Let a whole camera frame sit in a Unix socket's buffer, so a send never waits on the reader.

    The default (~208 KiB, counted with per-chunk overhead) makes a 150 KB frame stall the
    sender mid-frame until the reader drains it (bench_image.py). The kernel caps the value
    at ``net.core.wmem_max`` unless the process may force it; both are fine.
    """
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, _UNIX_BUFFER_BYTES)
        except OSError:
            pass


def _advance(bufs: list[Any], sent: int) -> list[Any]:
    """Drop ``sent`` bytes from the front of a buffer list (partial ``sendmsg``)."""
    i = 0
    while i < len(bufs):
        n = _nbytes(bufs[i])
        if sent < n:
            if sent:
                head = memoryview(bufs[i]).cast("B")[sent:]
                return [head, *bufs[i + 1 :]]
            return bufs[i:]
        sent -= n
        i += 1
    return []


def _nbytes(buf: Any) -> int:
    tp = type(buf)
    if tp is bytes or tp is bytearray:
        return len(buf)
    if tp is np.ndarray:
        return int(buf.nbytes)
    return memoryview(buf).nbytes
