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

A closed channel means the other side is gone: a worker that loses its supervisor stops;
a supervisor that loses a worker frees its slot.

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
    "CTRL_SEND_SECONDS",
    "Board",
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

#: Largest control message (a Hello header is bounded by ``PRE_HANDSHAKE_LIMITS``).
CTRL_BYTES = 256 * 1024
#: How long the supervisor waits for a worker to take a control message.
CTRL_SEND_SECONDS = 5.0


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


def send(sock: socket.socket, msg: Message, fds: Sequence[int] = ()) -> None:
    """Send one message (with ``fds``, if any). Raises ``OSError`` when the peer is gone."""
    data = pickle.dumps(msg)
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def recv(sock: socket.socket) -> tuple[Message | None, list[int]]:
    """One message and the fds it carried; ``(None, [])`` when the peer is gone."""
    data, fds, _flags, _addr = socket.recv_fds(sock, CTRL_BYTES, 4)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    msg: Message = pickle.loads(data)
    return msg, fds


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
