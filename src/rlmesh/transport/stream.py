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
on top; dialing and listening live here too.
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
from .address import Address
from .busypoll import _DONTWAIT, BusyPolling, yield_cpu

__all__ = ["SocketStream", "dial", "listen"]

_PREFIX, _MAGIC, _VERSION, _ALIGN = (
    frames.PREFIX,
    frames.MAGIC,
    frames.VERSION,
    frames.SEGMENT_ALIGN,
)
_U64 = struct.Struct("<Q")
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
        "_end",
        "_outq",
        "_plan",
        "_scratch",
        "_start",
        "_sview",
        "_timeout",
        "backlog",
        "closed",
        "deadline",
        "limits",
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
        self._start = 0  # unread bytes live in scratch[_start:_end]
        self._end = 0
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
        try:
            if self._plan is None:
                if self._start == self._end:
                    # The common case (issue 24): nothing buffered, so a small frame arrives
                    # whole in one read (a plain one when there is no deadline to arm and no
                    # answer to poll for) and is cut out of the scratch in one more call.
                    self._start = self._end = 0
                    if self.deadline is None and not self._sent_at:
                        n = self.sock.recv_into(self._scratch)
                        if not n:
                            raise self._eof()
                        self._end = n
                    else:
                        self._fill()
                    if self._end >= PREFIX_SIZE:
                        frame = self._whole(self._end)
                        if frame is not None:
                            return frame
                while self._end - self._start < PREFIX_SIZE:
                    self._fill()
                start = self._start
                plan = frames.decode_prefix_at(self._scratch, start, self.limits)
                start += PREFIX_SIZE
                self._start = start
                size = plan.body_len
                avail = self._end - start
                if avail >= size:  # the whole body is already here: one copy out of the scratch
                    if size < frames.SMALL_BODY:
                        body = np.frombuffer(self._scratch[start : start + size], np.uint8)
                    else:  # keep the 64-byte alignment promise for larger bodies
                        body = frames.new_body(plan)
                        body[:] = np.frombuffer(self._scratch, np.uint8, size, start)
                    start += size
                    if start == self._end:
                        self._start = self._end = 0
                    else:
                        self._start = start
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

    def _whole(self, n: int) -> Frame | None:
        """The frame at the start of a freshly read scratch holding ``n`` bytes, when it is
        whole and small; else ``None`` (the general path reads it).

        Inlines what :func:`rlmesh.wire.frames.decode_prefix_at` and
        :func:`rlmesh.wire.frames.split_body` check; any doubt about the bytes goes to
        them, so their words stay the errors.
        """
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
            return None
        end = PREFIX_SIZE + size
        body = np.frombuffer(scratch[PREFIX_SIZE:end], np.uint8)
        view = memoryview(body)  # type: ignore[arg-type]
        if count == 1:
            start = hlen + (-hlen % 8)
            if start + 8 > size:
                return None
            (length,) = _U64.unpack_from(view, start)
            pos = start + 8
            pos += -pos % _ALIGN
            if pos + length != size:
                return None
            segments = [body[pos:size]]
        elif count:
            start = hlen + (-hlen % 8)
            pos = start + 8 * count
            if pos > size:
                return None
            segments = []
            for length in (_TABLES.get(count) or _table(count)).unpack_from(view, start):
                pos += -pos % _ALIGN
                if length > size - pos:
                    return None
                segments.append(body[pos : pos + length])
                pos += length
            if pos != size:
                return None
        elif hlen == size:
            segments = []
        else:
            return None
        if end == n:
            self._start = self._end = 0
        else:
            self._start = end
        frame = _new(Frame)
        frame.kind = kind
        frame.request_id = rid
        frame.header = view[:hlen]
        frame.segments = segments
        return frame

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
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._scratch) - self._end < PREFIX_SIZE:
            n = self._end - self._start
            self._scratch[:n] = self._scratch[self._start : self._end]
            self._start, self._end = 0, n
        view = self._sview[self._end :]
        if self.deadline is not None:
            self._arm()
        n = self._poll(view) if self._sent_at else self.sock.recv_into(view)
        if not n:
            raise self._eof()
        self._end += n

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
        self._start += n
        if self._start == self._end:
            self._start = self._end = 0

    def _eof(self) -> ConnectionLost:
        if self.mid_frame:
            return ConnectionLost("the peer closed the connection in the middle of a frame")
        return ConnectionLost("the peer closed the connection")

    @property
    def buffered(self) -> bool:
        """Whether received bytes are waiting in the scratch buffer (a pipelined frame)."""
        return self._end > self._start

    @property
    def mid_frame(self) -> bool:
        """Whether a partially received frame is pending."""
        return self._end > self._start or self._plan is not None

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


def dial(address: Address, timeout: float | None) -> socket.socket:
    """Connect a stream socket to ``address`` within ``timeout`` seconds.

    Raises:
        OSError: the connect failed (the caller words the error).
        TimeoutError: the timeout expired.
    """
    if address.transport == "unix":
        return _connect(socket.AF_UNIX, address.path, timeout)
    # Try every resolved address in order, as socket.create_connection does: "localhost"
    # often resolves to ::1 first while the server bound 127.0.0.1 (ADR-2).
    infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)
    deadline = None if timeout is None else time.monotonic() + timeout
    last: OSError | None = None
    for family, _, _, _, target in infos:
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        try:
            return _connect(family, target, remaining)
        except OSError as exc:
            last = exc
    raise last if last is not None else TimeoutError("timed out")


def _connect(family: int, target: Any, timeout: float | None) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(target)
    except BaseException:
        sock.close()
        raise
    return sock


def listen(address: Address, backlog: int = socket.SOMAXCONN) -> tuple[socket.socket, Address]:
    """Bind and listen; returns the socket and the resolved address (real port for port 0).

    A stale unix socket file is replaced (ADR-4).

    Raises:
        OSError: bind or listen failed (the caller words the error).
    """
    if address.transport == "unix":
        import os

        if os.path.exists(address.path):
            _remove_stale_socket(address.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(address.path)
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        return sock, address
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address.host, address.port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    port = sock.getsockname()[1]
    return sock, Address("tcp", host=address.host, port=port)


def _remove_stale_socket(path: str) -> None:
    import os
    import stat

    mode = os.lstat(path).st_mode
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"{path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.2)
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nobody listens: stale
        return
    finally:
        probe.close()
    raise FileExistsError(f"another server is listening on unix://{path}")
