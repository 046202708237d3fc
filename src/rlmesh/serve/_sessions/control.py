"""What a multi-session endpoint's supervisor and its session workers tell each other.

Each worker has one control channel to the supervisor: a unix ``SOCK_SEQPACKET`` pair
(one message per datagram, file descriptors travel with :func:`socket.send_fds`). The
messages are the typed tuples below, pickled (both ends are this package, in processes
the supervisor started). The conversation:

- worker -> supervisor: :class:`Ready` once its env is built (or :class:`Failed`), later
  :class:`ShutdownAsked` when its client sent an allowed remote ``Shutdown``, and with
  metrics on, :class:`Counts` about once a second and when its session ends;
- supervisor -> worker: :class:`Handover` with the accepted client socket and the
  client's ``Hello`` frame (the worker answers it and serves that one session), or
  :class:`Stop` (drain, close the env, exit).

A message of any size travels: one small enough goes as one datagram; a larger one (a
contract with per-element bounds, a ``Hello`` near its 1 MiB limit) goes in an anonymous
memory file whose descriptor travels instead. What arrives is checked before it is
believed: a truncated datagram, bytes that do not unpickle, or anything that is not one of
the messages below is a :class:`ControlError`, never an exception out of the reader's loop.

A closed channel means the other side is gone: a worker that loses its supervisor stops;
a supervisor that loses a worker's channel waits for its process to exit (its sentinel),
then frees its slot.

Besides the channels, the endpoint's processes share one :class:`Board`: each worker
stamps its slot with the time of its session's last request, so every worker can tell
how many sessions are busy (and whether busy polling still pays).
"""

from __future__ import annotations

import mmap
import os
import pickle
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..._spawn.recipe import EnvRecipe
from .._options import ServeOptions

__all__ = [
    "ACTIVE_SECONDS",
    "Board",
    "ControlError",
    "Counts",
    "Failed",
    "Handover",
    "Message",
    "Ready",
    "SessionSpec",
    "ShutdownAsked",
    "Stop",
    "recv",
    "send",
]

#: Largest message sent as one datagram; a larger one travels in a memory file.
INLINE_BYTES = 32 * 1024
#: Largest message at all (a contract that fits a Welcome's 16 MiB header pickles smaller).
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: Most file descriptors one message carries (a memory file and a client socket).
MAX_FDS = 4
_INLINE, _FILE = b"I", b"F"


class ControlError(Exception):
    """A control message that cannot be believed (truncated, undecodable, of no known kind)."""


@dataclass(frozen=True)
class SessionSpec:
    """What every session worker of one endpoint builds and how it serves it (travels to each).

    Attributes:
        recipe: The env each session gets (built once per worker).
        framework: The env's action framework (``"numpy"``, ``"torch"``, ``"jax"``; ``None``: numpy).
        device: Where torch/jax actions are placed.
        options: The endpoint's :class:`~rlmesh.ServeOptions` (the declared edition already resolved).
        close_env: Close each env when its session ends.
    """

    recipe: EnvRecipe
    framework: Any = None
    device: Any = None
    options: ServeOptions = field(default_factory=ServeOptions)
    close_env: bool = True


class Ready(NamedTuple):
    """Worker: my env is built; here is its contract (``EnvContract.to_dict()``)."""

    pid: int
    contract: Mapping[str, Any]


class Failed(NamedTuple):
    """Worker: the env could not be built (``error`` is ``"Type: text"``, ``tail`` the traceback's end)."""

    error: str
    tail: str


class ShutdownAsked(NamedTuple):
    """Worker: my client sent an allowed remote ``Shutdown``: stop the whole endpoint."""

    reason: str


class Counts(NamedTuple):
    """Worker: my session's metrics so far (``Meter.snapshot()``; the supervisor sums them)."""

    values: Mapping[str, Any]


class Handover(NamedTuple):
    """Supervisor: serve this client (its socket travels as the message's one fd)."""

    kind: int
    request_id: int
    header: bytes


class Stop(NamedTuple):
    """Supervisor: drain the request in flight, close the env, exit."""

    reason: str


Message = Ready | Failed | ShutdownAsked | Counts | Handover | Stop


_KINDS = (Ready, Failed, ShutdownAsked, Counts, Handover, Stop)


def send(sock: socket.socket, msg: Message, fds: Sequence[int] = ()) -> None:
    """Send one message (with ``fds``, if any), whatever its size.

    Raises:
        OSError: the peer is gone (or, on a non-blocking socket, cannot take it now).
    """
    data = pickle.dumps(msg)
    if len(data) <= INLINE_BYTES:
        if fds:
            socket.send_fds(sock, [_INLINE + data], list(fds))
        else:
            sock.send(_INLINE + data)
        return
    fd = _memory_file(data)
    try:
        socket.send_fds(sock, [_FILE + len(data).to_bytes(8, "little")], [fd, *fds])
    finally:
        os.close(fd)  # the receiver has its own copy of the descriptor now


def recv(sock: socket.socket) -> tuple[Message | None, list[int]]:
    """One message and the fds it carried; ``(None, [])`` when the peer is gone.

    Raises:
        ControlError: what arrived is not a message (the fds it carried are closed).
        BlockingIOError: nothing to read on a non-blocking socket.
    """
    data, fds, flags, _addr = socket.recv_fds(sock, INLINE_BYTES + 64, MAX_FDS)
    if not data:
        _close_all(fds)
        return None, []
    try:
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise ControlError(f"a truncated control message ({len(data)} bytes kept)")
        tag, body = data[:1], data[1:]
        if tag == _FILE:
            if not fds or len(body) != 8:
                raise ControlError("a control message announced a memory file but sent none")
            body = _read_memory_file(fds.pop(0), int.from_bytes(body, "little"))
        elif tag != _INLINE:
            raise ControlError(f"a control message of unknown form {tag!r}")
        try:
            msg = pickle.loads(body)
        except Exception as exc:
            raise ControlError(f"a control message that does not decode: {exc}") from None
        if not isinstance(msg, _KINDS):
            raise ControlError(f"a control message of no known kind ({type(msg).__name__})")
    except ControlError:
        _close_all(fds)
        raise
    return msg, fds


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _memory_file(data: bytes) -> int:
    fd = (
        os.memfd_create("rlmesh-sessions-message")
        if hasattr(os, "memfd_create")
        else _anonymous_file()
    )
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_memory_file(fd: int, size: int) -> bytes:
    try:
        if not 0 < size <= MAX_MESSAGE_BYTES:
            raise ControlError(f"a control message of {size} bytes (at most {MAX_MESSAGE_BYTES})")
        parts = []
        offset = 0
        while offset < size:
            chunk = os.pread(fd, size - offset, offset)
            if not chunk:
                raise ControlError("a control message's memory file is shorter than announced")
            parts.append(chunk)
            offset += len(chunk)
        return b"".join(parts)
    except OSError as exc:
        raise ControlError(f"a control message's memory file cannot be read: {exc}") from None
    finally:
        os.close(fd)


#: A session counts as busy on the activity board while its last request is this recent.
ACTIVE_SECONDS = 0.05


class Board:
    """Per-slot time of each session's last request, shared by the endpoint's processes.

    An anonymous shared mapping (a memfd where the platform has one) of one double per
    slot; the supervisor creates it, every worker maps the same file descriptor.
    """

    def __init__(self, slots: int, fd: int | None = None) -> None:
        if fd is None:
            fd = (
                os.memfd_create("rlmesh-sessions-board")
                if hasattr(os, "memfd_create")
                else _anonymous_file()
            )
            os.ftruncate(fd, 8 * slots)
        self.fd = fd
        self._map = mmap.mmap(fd, 8 * slots)
        self.times = memoryview(self._map).cast("d")

    def __getitem__(self, slot: int) -> float:
        return float(self.times[slot])

    def __setitem__(self, slot: int, value: float) -> None:
        self.times[slot] = value

    def busy(self, now: float) -> int:
        """Sessions whose last request is at most :data:`ACTIVE_SECONDS` old."""
        return sum(1 for t in self.times if now - t < ACTIVE_SECONDS)

    def close(self) -> None:
        self.times.release()
        self._map.close()
        os.close(self.fd)


def _anonymous_file() -> int:  # pragma: no cover - platforms without memfd_create
    import tempfile

    with tempfile.TemporaryFile() as f:
        return os.dup(f.fileno())
