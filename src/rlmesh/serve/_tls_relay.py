"""TLS for a multi-session endpoint: the supervisor keeps each TLS session and relays its bytes.

A session worker serves a client whose connection the supervisor accepted and handed over
(``SCM_RIGHTS``); a TLS connection cannot be handed over that way (its keys live in the
supervisor's ``ssl`` object). So for a ``tls://`` endpoint the supervisor hands the worker
one end of a fresh unix socket pair instead, and a :class:`TLSRelay` in the supervisor's
serve loop carries the plaintext between the TLS connection and the other end: the client
speaks TLS to the endpoint, the worker speaks the protocol on the pair, and neither knows
about the relay. Each step crosses the supervisor once each way (what that costs:
docs/performance.md); a same-host client may still move into shared-memory rings, which
the worker offers as it would on any local connection.

No buffer grows without bound: a direction with bytes waiting for its destination stops
reading its source until they are out (the kernel's buffers and TCP flow control hold the
rest).
"""

from __future__ import annotations

import logging
import socket
from typing import Any

__all__ = ["Relays", "TLSRelay"]

log = logging.getLogger("rlmesh.serve")

_CHUNK = 256 * 1024  # bytes read per call (a camera frame or two)


class _Way:
    """One direction: read ``src``, write ``dst``; ``pending`` waits for ``dst``."""

    __slots__ = ("dst", "pending", "src")

    def __init__(self, src: Any, dst: Any) -> None:
        self.src = src
        self.dst = dst
        self.pending = memoryview(b"")

    def move(self) -> bool:
        """Move what can move now; ``False`` when the source ended (or either side failed)."""
        for _ in range(1024):  # bounded: each pass moves a chunk or stops
            if self.pending:
                try:
                    sent = self.dst.send(self.pending)
                except BlockingIOError:
                    return True
                except OSError:
                    return False
                self.pending = self.pending[sent:]
                if self.pending:
                    return True  # the destination is full: wait until it can take more
            try:
                data = self.src.recv(_CHUNK)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            self.pending = memoryview(data)
        return True


class TLSRelay:
    """The bytes of one TLS client and its session worker, both ways (see the module docstring).

    Args:
        tls: The client's connection (a :class:`~rlmesh.transport.tls.TLSSocket`, handshaken).
        inner: The supervisor's end of the unix socket pair whose other end the worker has.
    """

    __slots__ = ("_in", "_out", "_waiting", "closed", "inner", "tls")

    def __init__(self, tls: Any, inner: socket.socket) -> None:
        inner.setblocking(False)
        self.tls = tls
        self.inner = inner
        self._in = _Way(tls, inner)  # client -> worker
        self._out = _Way(inner, tls)  # worker -> client
        self._waiting = (False, False)  # what the poller watches: both read, neither write
        self.closed = False

    def fds(self) -> tuple[Any, Any]:
        """The two sockets the serve loop watches for this relay."""
        return self.tls, self.inner

    def pump(self) -> bool:
        """Move everything that can move now, both ways; ``False`` when the relay is over."""
        if self.closed:
            return False
        alive = self._in.move() and self._out.move()
        if alive and not self._in.pending and not self._out.pending and self.tls.pending():
            # the TLS object holds decrypted bytes the descriptor no longer shows
            alive = self._in.move()
        return alive

    def watch(self, poller: Any) -> None:
        """Tell ``poller`` what to wait for: a side with bytes waiting for it, to turn writable;
        a source whose bytes wait for their destination is not read until they are out (so
        a client that stops reading can never make the loop spin). Unchanged, the poller
        is not told again (most pumps: two system calls saved)."""
        waiting = (bool(self._in.pending), bool(self._out.pending))
        if waiting == self._waiting:
            return
        self._waiting = waiting
        poller.watch(self.tls, not self._in.pending, bool(self._out.pending))
        poller.watch(self.inner, not self._out.pending, bool(self._in.pending))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for s in (self.tls, self.inner):
            try:
                s.close()
            except OSError:
                pass


class Relays:
    """The TLS sessions a supervisor carries, each watched on its poller until it ends."""

    def __init__(self, poller: Any) -> None:
        self._poller = poller
        self._live: set[TLSRelay] = set()

    def add(self, relay: TLSRelay) -> None:
        """Carry a handed-over TLS session's bytes from here on."""
        self._live.add(relay)
        for end in relay.fds():
            self._poller.register(end, relay)
        self.pump(relay)

    def pump(self, relay: TLSRelay) -> None:
        """Move what can move now; a relay with either side ended is over (unwatched, closed)."""
        if relay.pump():
            relay.watch(self._poller)
        else:
            self._end(relay)

    def close(self) -> None:
        """End every relay (the supervisor's teardown)."""
        for relay in list(self._live):
            self._end(relay)

    def _end(self, relay: TLSRelay) -> None:
        self._live.discard(relay)
        for end in relay.fds():
            self._poller.unregister(end)
        relay.close()
