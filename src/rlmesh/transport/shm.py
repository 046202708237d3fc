"""Shared-memory frame rings for a client and a server on the same host.

Theory of operation
-------------------
A session's socket costs two system calls and a kernel hand-over per message (on
loopback TCP a ``sendmsg`` alone is ~4 µs). When both ends run on one host they
can instead pass frames through memory they both map: one file in ``/dev/shm``,
created by the client and named in an ``Attach`` request (``0600``, random name,
unlinked as soon as the server has answered), holding two single-producer
single-consumer byte rings::

    offset  what
    0       ring 0 (client -> server): write position  (u64, written by the client)
    64                                 read position   (u64, written by the server)
    128                                reader sleeping (u64, written by the server)
    192     ring 1 (server -> client): write / read / sleeping at 192, 256, 320
            (each an aligned 8-byte word, accessed whole so a reader never sees it torn)
    4032    magic b"RLMESHM1", capacity (u64)
    4096    ring 0 data (capacity bytes), then ring 1 data

An entry is ``u64 length`` followed by one whole frame (prefix and body, exactly
the socket bytes), padded to 8 bytes; positions only grow and wrap modulo the
capacity, data may wrap, a length never does. A length of ``2**64 - 1`` is a
*marker*: the next frame travels on the socket (one too large for the ring, or
sent while the ring is full), which keeps frames in order across both paths.

A reader that finds its ring empty polls it for a short while (no system calls),
then raises its *sleeping* flag, re-checks, and blocks on the socket; a writer
that sees the flag after publishing sends a 24-byte doorbell frame on the socket.
Store-load order between flag and position is enforced with a full fence (an
uncontended lock round trip: a locked instruction on x86-64). The socket also
carries liveness: a dead peer is an EOF there.

Everything read from the ring is validated like socket bytes (positions, lengths,
then the frame prefix against the connection's limits), so a peer that scribbles
on the mapping gets a ``ProtocolException``, never a crash. The rings are used on
x86-64 Linux only (its memory model orders the plain stores used to publish);
elsewhere, and with ``RLMESH_SHM=0``, sessions stay on the socket.
"""

from __future__ import annotations

import mmap
import os
import platform
import secrets
import stat
import struct
import sys
import threading
from typing import Any

import numpy as np

from ..errors import ProtocolException
from ..wire import frames
from ..wire.frames import PREFIX_SIZE, Frame, FrameLimits

__all__ = [
    "DOORBELL_KIND",
    "MARKER",
    "Channel",
    "accept",
    "create",
    "created_by_this_process",
    "discard",
    "is_local_peer",
    "offer",
    "offered_token",
    "open_channel",
    "peer_uid",
    "shm_supported",
]

DOORBELL_KIND = 0x7F  #: kind byte of the doorbell frame (socket only, shm sessions only)
MARKER = object()  #: what :meth:`Channel.read` returns for "the next frame is on the socket"

_HEADER = 4096
_MAGIC = b"RLMESHM1"
_MAGIC_AT = 4032
_TOKEN_AT = 4048  # the session's secret from Welcome.capabilities["shm.token"] (ASCII, <= 48 bytes)
_TOKEN_MAX = _HEADER - _TOKEN_AT
_RING = (
    (0, 8, 16),
    (24, 32, 40),
)  # (write, read, sleeping) u64 word indices of ring 0 and ring 1 (64 bytes apart)
_MARK = (1 << 64) - 1
_U64 = struct.Struct("<Q")
DEFAULT_CAPACITY = (
    256 * 1024
)  # per direction: a 224x224 camera frame fits; bigger frames take the socket
_fence_lock = threading.Lock()


def _fence() -> None:
    """A full memory fence: an uncontended lock round trip is a locked instruction."""
    _fence_lock.acquire()
    _fence_lock.release()


def shm_supported() -> bool:
    """Whether rings may be used here: x86-64 Linux with ``/dev/shm``, unless ``RLMESH_SHM=0``."""
    if os.environ.get("RLMESH_SHM", "").strip() == "0":
        return False
    return (
        sys.platform.startswith("linux")
        and platform.machine().lower() in ("x86_64", "amd64")
        and os.path.isdir("/dev/shm")
    )


def is_local_peer(sock: Any) -> bool:
    """Whether the other end of a connected socket is on this host (a Unix socket or loopback)."""
    import ipaddress
    import socket

    if sock.family == getattr(socket, "AF_UNIX", None):
        return True
    try:
        host = sock.getpeername()[0]
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except (OSError, ValueError, IndexError, TypeError):
        return False


def create(capacity: int = DEFAULT_CAPACITY, *, token: str = "") -> tuple[str, Channel]:
    """Create a mapping for one session (client side): ``(path, channel)``.

    ``token`` is the session's secret (``Welcome.capabilities["shm.token"]``); it is written
    into the file so the server can tell the file belongs to this session. The caller
    passes ``path`` to :func:`discard` once the server has answered (accepted or not).
    """
    secret = token.encode("ascii", "replace")[:_TOKEN_MAX]
    capacity = max(4096, capacity - capacity % 4096)
    _remove_stale()
    path = _path(os.getpid(), secrets.token_hex(8))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        # Reserve every page now: a full tmpfs (Docker's default /dev/shm is 64 MiB) must
        # fail here, with ENOSPC, not later as a SIGBUS on a write into the mapping.
        os.posix_fallocate(fd, 0, _HEADER + 2 * capacity)
        mm = mmap.mmap(fd, _HEADER + 2 * capacity)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)
    mm[_MAGIC_AT : _MAGIC_AT + 8] = _MAGIC
    _U64.pack_into(mm, _MAGIC_AT + 8, capacity)
    mm[_TOKEN_AT : _TOKEN_AT + len(secret)] = secret
    return path, Channel(mm, capacity, side=0)


def _path(pid: int, token: str) -> str:
    return f"/dev/shm/rlmesh-{pid}-{token}"


def created_by_this_process(path: str) -> bool:
    """Whether ``path`` names a ring file this process created (its client and server share a GIL)."""
    return path.startswith(_path(os.getpid(), ""))


def discard(path: str) -> None:
    """Unlink a ring file by name, quietly (whoever gets there first wins)."""
    try:
        os.unlink(path)
    except OSError:
        pass


def _remove_stale() -> None:
    """Unlink files of clients that died mid-``Attach`` (``rlmesh-<pid>-*`` of a dead pid)."""
    try:
        names = [n for n in os.listdir("/dev/shm") if n.startswith("rlmesh-")]
    except OSError:
        return
    for name in names[:64]:  # bounded; each new mapping tidies a little
        try:
            pid = int(name.split("-")[1])
            os.kill(pid, 0)
        except ProcessLookupError:
            discard(f"/dev/shm/{name}")
        except (ValueError, IndexError, OSError):
            continue


def peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a local connection, or ``None`` if unknown.

    A Unix socket asks the kernel (``SO_PEERCRED``). A loopback TCP connection looks up
    the peer's end of the connection in ``/proc/net/tcp`` / ``tcp6``, where the kernel
    lists each socket's owner.
    """
    import socket

    try:
        if sock.family == getattr(socket, "AF_UNIX", None):
            if not hasattr(socket, "SO_PEERCRED"):
                return None
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            return int(struct.unpack("3i", creds)[1])
        peer = sock.getpeername()
        local = sock.getsockname()
    except (OSError, ValueError, struct.error):
        return None
    v6 = sock.family == getattr(socket, "AF_INET6", None)
    want_local = _proc_addr(peer[0], peer[1], v6)
    want_remote = _proc_addr(local[0], local[1], v6)
    if want_local is None or want_remote is None:
        return None
    try:
        with open("/proc/net/tcp6" if v6 else "/proc/net/tcp") as f:
            next(f, None)
            for line in f:
                fields = line.split()
                if len(fields) > 7 and fields[1] == want_local and fields[2] == want_remote:
                    return int(fields[7])
    except (OSError, ValueError):
        return None
    return None


def _proc_addr(host: str, port: int, v6: bool) -> str | None:
    """``host:port`` as ``/proc/net/tcp`` prints it (address words in host byte order, hex)."""
    import socket

    try:
        if not v6:
            raw = socket.inet_aton(host)
            return f"{struct.unpack('=I', raw)[0]:08X}:{port:04X}"
        raw = socket.inet_pton(socket.AF_INET6, host.split("%")[0])
        words = struct.unpack("=4I", raw)
        return "".join(f"{w:08X}" for w in words) + f":{port:04X}"
    except (OSError, ValueError, struct.error):
        return None


def open_channel(path: str, *, uid: int | None = None, token: str = "") -> Channel:
    """Map a client's file (server side), checking it is what *this* client created.

    Args:
        path: The file the client named in ``Attach``.
        uid: The connecting peer's uid (:func:`peer_uid`): the file must be owned by it.
            ``None`` (unknown) accepts only files of this process's own uid.
        token: The session's secret: the file must carry it, so a file of another
            session (even of the same user) is never mapped.

    Raises:
        OSError: missing, not the peer's, without this session's secret, or malformed
            (the caller declines the offer and leaves the file alone).
    """
    import hmac

    if not (path.startswith("/dev/shm/rlmesh-") and "/" not in path[len("/dev/shm/") :]):
        raise OSError(f"not an rlmesh shared-memory path: {path!r}")
    if not token:
        raise OSError("no session secret to check the shared-memory file against")
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        owner = os.getuid() if uid is None else uid
        if st.st_uid != owner or st.st_mode & 0o077:
            raise OSError("the shared-memory file is not private to the connecting user")
        if not stat.S_ISREG(st.st_mode):
            raise OSError("the shared-memory file is not a regular file")
        if st.st_size < _HEADER + 2 * 4096:
            raise OSError("the shared-memory file is too small")
        mm = mmap.mmap(fd, st.st_size)
    finally:
        os.close(fd)
    secret = token.encode("ascii", "replace")[:_TOKEN_MAX]
    if not hmac.compare_digest(bytes(mm[_TOKEN_AT : _TOKEN_AT + len(secret)]), secret):
        mm.close()
        raise OSError("the shared-memory file does not carry this session's secret")
    capacity = _U64.unpack_from(mm, _MAGIC_AT + 8)[0]
    if (
        mm[_MAGIC_AT : _MAGIC_AT + 8] != _MAGIC
        or _HEADER + 2 * capacity != len(mm)
        or capacity % 4096
    ):
        mm.close()
        raise OSError("the shared-memory file has an unknown layout")
    return Channel(mm, capacity, side=1)


# -- the negotiation: Welcome offers, Attach asks, the server accepts or declines ------------------

#: ``Welcome.capabilities`` keys: the offer, and the session's secret a ring file must carry.
OFFER_KEY = "shm"
TOKEN_KEY = "shm.token"


def offer(sock: Any) -> tuple[str, dict[str, str] | None]:
    """Server, answering ``Hello``: ``(secret, capabilities)`` when this peer may move into rings.

    Only a peer on this host can map our memory; anyone else gets ``("", None)`` and stays
    on the socket.
    """
    if not (shm_supported() and is_local_peer(sock)):
        return "", None
    token = secrets.token_hex(16)
    return token, {OFFER_KEY: "1", TOKEN_KEY: token}


def offered_token(capabilities: Any, sock: Any) -> str:
    """Client, reading ``Welcome``: the session's secret when rings were offered and work here, else ``""``."""
    token = capabilities.get(TOKEN_KEY, "")
    if capabilities.get(OFFER_KEY) == "1" and token and shm_supported() and is_local_peer(sock):
        return str(token)
    return ""


def accept(path: str, sock: Any, token: str) -> Channel | None:
    """Server, answering ``Attach``: the client's rings at ``path``, when they can be mapped here.

    Only a file owned by the connecting peer's uid and carrying this session's secret is
    mapped (and then unlinked); anything else is declined (``None``) and left alone.
    """
    if not path or not token or not shm_supported() or not is_local_peer(sock):
        return None
    if created_by_this_process(path):
        return None  # a client in this very process: its thread and ours share one GIL, sockets do better
    uid = peer_uid(sock)
    if uid is None:
        return None  # cannot tell who connected: stay on the socket
    try:
        ring = open_channel(path, uid=uid, token=token)
    except (OSError, ValueError):  # another host's /dev/shm (a container, a tunnel): the socket
        return None
    discard(path)  # mapped: the name is no longer needed (the client discards it too)
    return ring


class Channel:
    """One side's view of a session mapping: it writes one ring and reads the other.

    Args:
        mm: The mapping.
        capacity: Bytes of each ring.
        side: 0 for the client (writes ring 0), 1 for the server (writes ring 1).
    """

    __slots__ = (
        "_bytes",
        "_cap",
        "_ctl",
        "_mm",
        "_rpos",
        "_rx",
        "_rx_data",
        "_tx",
        "_tx_data",
        "_wpos",
        "asleep",
        "closed",
    )

    def __init__(self, mm: mmap.mmap, capacity: int, *, side: int) -> None:
        self._mm = mm
        self._cap = capacity
        self._bytes = memoryview(mm)
        # Positions and flags are aligned u64 words accessed whole through a "Q" view:
        # one 8-byte load or store each, never torn (struct packs byte by byte).
        self._ctl = self._bytes[:_HEADER].cast("Q")
        self._tx, self._rx = (_RING[0], _RING[1]) if side == 0 else (_RING[1], _RING[0])
        self._tx_data = _HEADER + (0 if side == 0 else capacity)
        self._rx_data = _HEADER + (capacity if side == 0 else 0)
        self._wpos: int = self._ctl[self._tx[0]]  # ours: the peer never writes it
        self._rpos: int = self._ctl[self._rx[1]]
        self.asleep = False  # our "sleeping" flag is up
        self.closed = False

    # -- writing ------------------------------------------------------------------------

    def write(self, buffers: list[Any], nbytes: int) -> bool | None:
        """Publish one frame; ``None`` when it does not fit now (send a marker and use the socket).

        Returns whether the reader is asleep (the caller rings the doorbell).
        """
        need = 8 + nbytes + (-nbytes % 8)
        w = self._wpos
        cap = self._cap
        used = w - self._ctl[self._tx[1]]
        if not 0 <= used <= cap:
            raise ProtocolException(
                f"the peer's read position is inconsistent ({used} bytes in use)"
            )
        if need > cap - used:
            return None
        out = self._bytes
        base = self._tx_data
        pos = w % cap
        _U64.pack_into(out, base + pos, nbytes)  # not yet published: no reader looks here
        pos += 8
        for buf in buffers:
            src = buf if type(buf) is bytes else memoryview(buf).cast("B")
            n = len(src)
            if pos + n <= cap:
                out[base + pos : base + pos + n] = src
                pos += n
            else:  # wraps: two copies
                first = cap - pos
                out[base + pos : base + cap] = src[:first]
                out[base : base + n - first] = src[first:]
                pos = n - first
        return self._publish(w + need)

    def write_marker(self) -> bool | None:
        """Say "the next frame is on the socket"; ``None`` when even 8 bytes do not fit."""
        w = self._wpos
        used = w - self._ctl[self._tx[1]]
        if not 0 <= used <= self._cap:
            raise ProtocolException(
                f"the peer's read position is inconsistent ({used} bytes in use)"
            )
        if self._cap - used < 8:
            return None
        _U64.pack_into(self._bytes, self._tx_data + w % self._cap, _MARK)
        return self._publish(w + 8)

    def _publish(self, wpos: int) -> bool:
        # x86-64 keeps stores in order: the bytes are visible before the position. The
        # fence orders the position store before the load of the reader's flag (the
        # reader fences its flag store before loading the position): no lost doorbell.
        self._ctl[self._tx[0]] = wpos
        self._wpos = wpos
        _fence()
        return self._ctl[self._tx[2]] != 0

    # -- reading ------------------------------------------------------------------------

    def pending(self) -> bool:
        """Whether an entry waits in the ring we read."""
        return self._ctl[self._rx[0]] != self._rpos

    def read(self, limits: FrameLimits) -> Frame | object | None:
        """The next entry: a :class:`Frame` (a fresh body the caller owns), :data:`MARKER`, or ``None``.

        Raises:
            ProtocolException: the peer's positions, lengths or frame bytes are invalid.
        """
        w = self._ctl[self._rx[0]]
        r = self._rpos
        if w == r:
            return None
        cap = self._cap
        if not 0 < w - r <= cap or w % 8:
            raise ProtocolException(f"shared-memory ring positions are inconsistent ({r} -> {w})")
        mem = self._bytes
        base = self._rx_data
        pos = r % cap
        length = _U64.unpack_from(mem, base + pos)[0]
        if length == _MARK:
            self._consume(r + 8)
            return MARKER
        need = 8 + length + (-length % 8)
        if length < PREFIX_SIZE or need > w - r:
            raise ProtocolException(
                f"shared-memory entry of {length} bytes does not fit what was published"
            )
        pos = (pos + 8) % cap
        if pos + PREFIX_SIZE <= cap:
            plan = frames.decode_prefix_at(mem, base + pos, limits)
        else:
            plan = frames.decode_prefix(
                self._copy_out(np.empty(PREFIX_SIZE, np.uint8), pos).tobytes(), limits
            )
        n = plan.body_len
        if PREFIX_SIZE + n != length:
            raise ProtocolException(
                f"frame of {n} body bytes in a {length}-byte shared-memory entry"
            )
        start = (pos + PREFIX_SIZE) % cap
        if n < frames.SMALL_BODY and start + n <= cap:  # the common case: one small copy
            body = np.frombuffer(bytearray(mem[base + start : base + start + n]), np.uint8)
        else:  # a fresh buffer, 64-byte aligned when large (frames.new_body)
            body = self._copy_out(frames.new_body(plan), start)
        self._consume(r + need)
        return frames.split_body(plan, body)

    def _copy_out(self, dst: np.ndarray[Any, Any], pos: int) -> np.ndarray[Any, Any]:
        """Fill ``dst`` from the ring we read, starting at ring offset ``pos`` (wrapping)."""
        base, cap, mem = self._rx_data, self._cap, self._bytes
        n = dst.size
        first = min(n, cap - pos)
        dst[:first] = mem[base + pos : base + pos + first]
        if first < n:
            dst[first:] = mem[base : base + n - first]
        return dst

    def _consume(self, rpos: int) -> None:
        self._rpos = rpos
        self._ctl[self._rx[1]] = rpos

    def sleeping(self, on: bool) -> None:
        """Raise or lower our "about to block on the socket" flag (a fence follows)."""
        self._ctl[self._rx[2]] = 1 if on else 0
        self.asleep = on
        _fence()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._ctl.release()
        self._bytes.release()
        try:
            self._mm.close()
        except BufferError:  # a stray export still holds the mapping: the GC unmaps it later
            pass


def doorbell() -> bytes:
    """The 24-byte doorbell frame: wakes a reader blocked on the socket."""
    return frames.PREFIX.pack(frames.MAGIC, frames.VERSION, DOORBELL_KIND, 0, 0, 0, 0)
