"""The reactor under the serve loop (issue 10 item 5): poller, waker, accept, reaping; no protocol."""

from __future__ import annotations

import socket
import threading

from rlmesh.transport.reactor import Poller, Waker, accept_ready, overdue


def test_a_Waker_interrupts_a_Poller_wait_from_another_thread() -> None:
    poller, waker = Poller(), Waker()
    poller.register(waker.reader, "wake")
    try:
        threading.Timer(0.05, waker.wake).start()
        assert poller.poll(30.0) == ["wake"]  # returns long before the timeout
        waker.drain()
        assert poller.poll(0.0) == []  # drained: nothing ready any more
    finally:
        poller.unregister(waker.reader)
        poller.close()
        waker.close()


def test_accept_ready_takes_at_most_a_batch_and_returns_non_blocking_sockets() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    clients = [socket.create_connection(listener.getsockname()) for _ in range(3)]
    try:
        poller = Poller()
        poller.register(listener, "listener")
        assert poller.poll(5.0) == ["listener"]
        taken = accept_ready(listener, limit=2)
        assert len(taken) == 2 and all(not s.getblocking() for s in taken)
        rest = []
        for _ in range(50):  # bounded: the third connection is already queued
            rest += accept_ready(listener, limit=2)
            if rest:
                break
            poller.poll(0.1)
        assert len(rest) == 1
        assert accept_ready(listener) == []  # nothing waits: an empty batch, no error
        for s in taken + rest:
            s.close()
        poller.close()
    finally:
        for c in clients:
            c.close()
        listener.close()


def test_a_Poller_reports_writability_only_while_asked() -> None:
    a, b = socket.socketpair()
    poller = Poller()
    try:
        poller.register(a, "a")
        assert poller.poll(0.0) == []
        poller.want_write(a, True)
        assert poller.poll(1.0) == ["a"]  # an empty send buffer is writable
        poller.want_write(a, False)
        assert poller.poll(0.0) == []
        poller.unregister(a)
        poller.unregister(a)  # twice is harmless
    finally:
        poller.close()
        a.close()
        b.close()


def test_overdue_names_only_what_outstayed_the_deadline() -> None:
    accepted = {"old": 0.0, "edge": 70.0, "young": 95.0}
    assert overdue(accepted, accepted.__getitem__, now=100.0, seconds=30.0) == ["old"]
