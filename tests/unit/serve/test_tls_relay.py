"""The sessions supervisor's TLS relay: bytes both ways, intact, and the poller told only of changes."""

from __future__ import annotations

import socket
from typing import Any

from rlmesh.serve._tls_relay import Relays, TLSRelay


class _Plain:
    """A socket pair's end standing in for the handshaken TLS socket (nothing held decrypted)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)

    def pending(self) -> int:
        return 0


class _Poller:
    def __init__(self) -> None:
        self.watched: list[tuple[int, bool, bool]] = []

    def register(self, sock: Any, obj: Any) -> None:
        pass

    def unregister(self, sock: Any) -> None:
        pass

    def watch(self, sock: Any, read: bool, write: bool) -> None:
        self.watched.append((sock.fileno(), read, write))


def _drain(sock: socket.socket) -> bytes:
    out = bytearray()
    for _ in range(10_000):
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            break
        out += chunk
    return bytes(out)


def test_the_relay_carries_both_ways_and_tells_the_poller_only_what_changed() -> None:
    client, tls_end = socket.socketpair()
    worker, inner = socket.socketpair()
    client.setblocking(False)
    worker.setblocking(False)
    poller = _Poller()
    relays = Relays(poller)
    relay = TLSRelay(_Plain(tls_end), inner)
    relays.add(relay)
    try:
        for i in range(5):  # small request, small reply: the common step
            client.sendall(b"step%d" % i)
            relays.pump(relay)
            assert _drain(worker) == b"step%d" % i
            worker.sendall(b"reply%d" % i)
            relays.pump(relay)
            assert _drain(client) == b"reply%d" % i
        assert poller.watched == []  # read both sides, write neither: as registered

        # a worker that does not read: the client's bytes wait in the relay, which stops
        # reading the client and waits for the worker's side to turn writable
        sent = bytearray()
        for n in range(10_000):
            try:
                sent += bytes([n % 251]) * client.send(bytes([n % 251]) * 65536)
            except BlockingIOError:
                relays.pump(relay)
                if relay._in.pending:
                    break
        assert poller.watched == [(tls_end.fileno(), False, False), (inner.fileno(), True, True)]
        got = bytearray()
        for _ in range(10_000):  # the worker reads again: everything arrives, in order
            got += _drain(worker)
            relays.pump(relay)
            if len(got) == len(sent) and not relay._in.pending:
                break
        assert bytes(got) == bytes(sent)
        assert poller.watched[-2:] == [
            (tls_end.fileno(), True, False),
            (inner.fileno(), True, False),
        ]
    finally:
        relays.close()
        client.close()
        worker.close()
