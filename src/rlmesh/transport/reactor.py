"""The reactor under a serve loop: readiness, accepting, waking, reaping (no protocol here).

A serve loop is this plus a protocol (``rlmesh.serve._loop``): the :class:`Poller`
says which sockets are ready, :func:`accept_ready` takes what a listener holds,
a :class:`Waker` lets another thread interrupt a wait, and :func:`overdue` names
the connections that outstayed a deadline. Nothing here knows what a frame is.
"""

from __future__ import annotations

import logging
import select
import selectors
import socket
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ["ACCEPT_BATCH", "Poller", "Waker", "accept_ready", "overdue"]

log = logging.getLogger("rlmesh.transport")

ACCEPT_BATCH = 16  # connections taken per listener wake-up; the rest wait for the next one

T = TypeVar("T")


class Poller:
    """Readiness for a handful of sockets: raw epoll on Linux (cheapest per wake-up), else selectors."""

    def __init__(self) -> None:
        self._objs: dict[int, Any] = {}
        self._epoll = select.epoll() if hasattr(select, "epoll") else None
        self._sel = None if self._epoll is not None else selectors.DefaultSelector()

    def register(self, sock: socket.socket, obj: Any) -> None:
        fd = sock.fileno()
        self._objs[fd] = obj
        if self._epoll is not None:
            self._epoll.register(fd, select.EPOLLIN)
        else:
            assert self._sel is not None
            self._sel.register(fd, selectors.EVENT_READ, obj)

    def want_write(self, sock: socket.socket, on: bool) -> None:
        """Also report ``sock`` when it turns writable (a reply is queued for it), or stop."""
        self.watch(sock, True, on)

    def watch(self, sock: Any, read: bool, write: bool) -> None:
        """Report ``sock`` when it turns readable and/or writable (neither: only errors)."""
        fd = sock.fileno()
        obj = self._objs.get(fd)
        if obj is None:
            return
        try:
            if self._epoll is not None:
                events = (select.EPOLLIN if read else 0) | (select.EPOLLOUT if write else 0)
                self._epoll.modify(fd, events)
            else:
                assert self._sel is not None
                events = (selectors.EVENT_READ if read else 0) | (
                    selectors.EVENT_WRITE if write else 0
                )
                if events:
                    self._sel.modify(fd, events, obj)
        except (KeyError, ValueError, OSError):
            pass

    def unregister(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        if self._objs.pop(fd, None) is None:
            return
        try:
            if self._epoll is not None:
                self._epoll.unregister(fd)
            else:
                assert self._sel is not None
                self._sel.unregister(fd)
        except (KeyError, ValueError, OSError):
            pass

    def poll(self, timeout: float) -> list[Any]:
        objs = self._objs
        if self._epoll is not None:
            out = []
            for fd, _ in self._epoll.poll(
                timeout, len(objs)
            ):  # a plain loop: no comprehension call per wake-up
                obj = objs.get(fd)
                if obj is not None:
                    out.append(obj)
            return out
        assert self._sel is not None
        return [key.data for key, _ in self._sel.select(timeout)]

    def close(self) -> None:
        if self._epoll is not None:
            self._epoll.close()
        if self._sel is not None:
            self._sel.close()


class Waker:
    """A socket pair another thread writes to so that a :meth:`Poller.poll` returns at once."""

    def __init__(self) -> None:
        self.reader, self._writer = socket.socketpair()
        self.reader.setblocking(False)
        self._writer.setblocking(False)

    def wake(self) -> None:
        """Interrupt the wait (thread-safe; a full pipe already means "awake")."""
        try:
            self._writer.send(b"\0")
        except OSError:
            pass

    def drain(self) -> None:
        """Swallow the wake-ups (call when the poller reports :attr:`reader`)."""
        try:
            while self.reader.recv(64):
                pass
        except OSError:
            pass

    def close(self) -> None:
        for s in (self.reader, self._writer):
            try:
                s.close()
            except OSError:
                pass


def accept_ready(listener: socket.socket, limit: int = ACCEPT_BATCH) -> list[socket.socket]:
    """Up to ``limit`` connections waiting on a non-blocking listener, set non-blocking.

    An ``accept`` failure such as ``EMFILE`` is logged and ends the batch: the loop keeps
    serving the connections it has.
    """
    out: list[socket.socket] = []
    for _ in range(limit):
        try:
            sock, _addr = listener.accept()
        except (BlockingIOError, InterruptedError):
            break
        except OSError as exc:
            log.warning("accept failed: %s", exc)
            break
        sock.setblocking(False)
        out.append(sock)
    return out


def overdue(items: Iterable[T], since: Callable[[T], float], now: float, seconds: float) -> list[T]:
    """The ``items`` whose ``since(item)`` lies more than ``seconds`` before ``now`` (to reap)."""
    return [item for item in items if now - since(item) > seconds]
