"""The framed connection: whole frames over a socket pair, and busy polling (bounded, optional)."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from rlmesh.errors import ConnectionLost
from rlmesh.transport import busypoll
from rlmesh.transport.busypoll import PROBE_EVERY
from rlmesh.transport.connection import Connection, busy_poll_default
from rlmesh.wire import messages as m
from rlmesh.wire.messages import decode_header, encode_message


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    ca, cb = Connection(a), Connection(b)
    yield ca, cb
    ca.close()
    cb.close()


def _ping(rid: int = 1) -> list[object]:
    return encode_message(m.Ping(), rid)


# -- busy_poll_default -------------------------------------------------------------------


@pytest.fixture
def alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polling as in a process that runs no other Python thread: a thread an earlier test left
    running for a moment would switch polling off (by design) and void these checks."""
    from rlmesh.transport import busypoll

    monkeypatch.setattr(busypoll.threading, "active_count", lambda: 1)


def test_busy_poll_default_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(busypoll, "_usable_cpus", lambda: 2)
    monkeypatch.setenv("RLMESH_BUSY_POLL_US", "100")
    assert busy_poll_default() == pytest.approx(100e-6)
    monkeypatch.setenv("RLMESH_BUSY_POLL_US", "0")
    assert busy_poll_default() == 0.0
    monkeypatch.setenv("RLMESH_BUSY_POLL_US", "-5")
    assert busy_poll_default() == 0.0
    monkeypatch.setenv("RLMESH_BUSY_POLL_US", "not a number")
    assert busy_poll_default() == pytest.approx(1000e-6)
    monkeypatch.delenv("RLMESH_BUSY_POLL_US")
    assert busy_poll_default() == pytest.approx(1000e-6)


def test_busy_poll_is_off_on_a_single_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLMESH_BUSY_POLL_US", raising=False)
    monkeypatch.setattr(busypoll, "_usable_cpus", lambda: 1)
    assert busy_poll_default() == 0.0
    monkeypatch.setattr(busypoll, "_usable_cpus", lambda: 1.5)  # a cgroup quota of 1.5 CPUs
    assert busy_poll_default() == 0.0


# -- frames over a socket pair -------------------------------------------------------------


@pytest.mark.parametrize("poll", [0.0, 250e-6])
def test_request_and_reply_round_trip(pair: tuple[Connection, Connection], poll: float) -> None:
    client, server = pair
    client.busy_poll = server.busy_poll = poll
    payload = np.arange(1000, dtype=np.float32)
    for rid in range(1, 6):
        client.send(encode_message(m.Ping(), rid, [payload]))
        frame = server.recv_frame()
        assert frame is not None and frame.request_id == rid
        np.testing.assert_array_equal(frame.segments[0].view(np.float32), payload)
        server.send(encode_message(m.Pong(state="ready"), rid))
        reply = client.recv_frame()
        assert reply is not None and reply.request_id == rid
        assert decode_header(reply) == m.Pong(state="ready")


@pytest.mark.parametrize("timeout", [None, 5.0])
def test_a_late_answer_is_still_read_after_the_poll_gives_up(
    pair: tuple[Connection, Connection], timeout: float | None
) -> None:
    client, server = pair
    client.busy_poll = 100e-6
    client.sock.settimeout(timeout)
    client.settimeout(timeout)

    def answer_late() -> None:
        frame = server.recv_frame()
        assert frame is not None
        time.sleep(0.05)  # 500x the polling cap
        server.send(encode_message(m.Pong(state="ready"), frame.request_id))

    t = threading.Thread(target=answer_late)
    t.start()
    client.send(_ping(7))
    reply = client.recv_frame()
    t.join(5)
    assert reply is not None and reply.request_id == 7


def test_slow_answers_switch_polling_off_and_fast_ones_back_on(
    pair: tuple[Connection, Connection],
    alone: None,
) -> None:
    client, server = pair
    client.busy_poll = 200e-6
    for _ in range(3):
        client.send(_ping())
        assert server.recv_frame() is not None
        time.sleep(0.005)  # the reply is already waiting, but it was "slow" to come
        server.send(_ping())
        assert client.recv_frame() is not None
    assert client._wait >= client.busy_poll  # polling would burn more than it saves: skipped
    for _ in range(60):
        client.send(_ping())
        assert server.recv_frame() is not None
        server.send(_ping())
        assert client.recv_frame() is not None
    assert client._wait < client.busy_poll


def test_a_pair_that_fell_asleep_probes_and_polls_again(
    pair: tuple[Connection, Connection],
    alone: None,
) -> None:
    """Answers timed across a sleep include the wake-ups; a probe that catches one by polling
    turns polling back on at once (the pair would otherwise stay asleep; issue 12)."""
    client, server = pair
    client.busy_poll = 200e-6
    client._wait = 10 * client.busy_poll  # "answers are slow": polling is off
    for _ in range(PROBE_EVERY):
        client.send(_ping())
        assert server.recv_frame() is not None
        server.send(_ping())  # answered before the client reads: a probe catches it at once
        assert client.recv_frame() is not None
    assert (
        client._wait < client.busy_poll
    )  # a plain moving average would still be far above the cap


def test_probes_that_catch_nothing_back_off(alone: None) -> None:
    """A peer that really is slow: each probe that times out doubles the gap to the next."""
    policy = busypoll.BusyPolling()
    policy.busy_poll = 100e-6
    policy._wait = 1.0  # answers take far longer than the cap
    probes = []
    for i in range(PROBE_EVERY + 2 * PROBE_EVERY + 4 * PROBE_EVERY):
        if policy._budget():
            probes.append(i)
        policy._answered(0.01, caught=False)  # the probe (if any) caught nothing
    assert probes == [PROBE_EVERY - 1, 3 * PROBE_EVERY - 1, 7 * PROBE_EVERY - 1]
    assert policy._wait >= policy.busy_poll


def test_a_timeout_still_applies_while_polling(pair: tuple[Connection, Connection]) -> None:
    client, server = pair
    client.busy_poll = 250e-6
    client.sock.settimeout(0.05)
    client.settimeout(0.05)
    client.send(_ping())
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        client.recv_frame()  # nobody answers
    assert time.monotonic() - started < 2.0
    server.send(_ping(1))  # the stream is intact: the late answer is read whole
    frame = client.recv_frame()
    assert frame is not None and frame.request_id == 1


def test_a_non_blocking_socket_reports_dry_after_polling(
    pair: tuple[Connection, Connection],
) -> None:
    client, server = pair
    server.sock.setblocking(False)
    server.settimeout(0.0)
    server.busy_poll = 100e-6
    server.send(_ping())  # arms the poll for the next read
    assert client.recv_frame() is not None
    assert server.recv_frame() is None  # nothing came within the poll: "call again when readable"
    client.send(_ping(3))
    deadline = time.monotonic() + 5
    frame = None
    while frame is None and time.monotonic() < deadline:
        frame = server.recv_frame()
    assert frame is not None and frame.request_id == 3


def test_the_peer_closing_during_a_poll_is_connection_lost(
    pair: tuple[Connection, Connection],
) -> None:
    client, server = pair
    client.busy_poll = 250e-6
    client.send(_ping())
    server.close()
    with pytest.raises(ConnectionLost):
        client.recv_frame()


# -- issue 18 defect 2: post() never blocks --------------------------------------------------


def test_post_never_blocks_queues_in_order_and_refuses_past_its_bound() -> None:
    """A peer that does not read: post() queues what the kernel does not take, keeps frames
    in order, and answers False (drop that peer) once the queue would pass its bound."""
    a, b = socket.socketpair()
    a.setblocking(False)
    writer, reader = Connection(a), Connection(b)
    payload = np.arange(64 * 1024, dtype=np.uint8)
    accepted = 0
    for rid in range(1, 1_000):  # bounded: the kernel buffer fills within a few dozen frames
        if not writer.post(encode_message(m.ResetReply(obs=[]), rid, [payload]), 256 * 1024):
            break
        accepted += 1
    else:
        raise AssertionError("post() never reported a peer that does not read")
    assert writer.backlog > 0
    b.settimeout(10)
    got: list[tuple[int, bool]] = []

    def read_all() -> None:
        for _ in range(accepted):
            frame = reader.recv_frame()
            assert frame is not None
            got.append((frame.request_id, bool(np.array_equal(frame.segments[0], payload))))

    t = threading.Thread(target=read_all, daemon=True)
    t.start()
    for _ in range(100_000):  # bounded: the reader drains the queue as the writer flushes it
        if writer.flush():
            break
        time.sleep(0.0005)
    t.join(10)
    assert writer.backlog == 0
    assert got == [(rid, True) for rid in range(1, accepted + 1)]  # every accepted frame, in order
    writer.close()
    reader.close()


def test_a_request_deadline_bounds_a_trickled_frame(pair: tuple[Connection, Connection]) -> None:
    """Issue 18 defect 5: the deadline covers the whole frame, however slowly it arrives."""
    client, server = pair
    data = b"".join(
        bytes(x) for x in encode_message(m.Pong(state="ready", generation="g" * 100), 1)
    )
    client.settimeout(0.5)
    client.deadline = time.monotonic() + 0.5
    stop = threading.Event()
    sent: list[int] = []

    def trickle() -> None:
        for byte in data:  # ~0.1 s per byte: the frame would take ~15 s
            if stop.wait(0.1):
                return
            server.sock.sendall(bytes([byte]))
            sent.append(1)

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        with pytest.raises(TimeoutError):
            client.recv_frame()
        assert len(sent) < len(data)  # gave up while the frame was still trickling in
    finally:
        stop.set()
        t.join(5)
