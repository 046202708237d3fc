"""Shared-memory rings: order, wrap-around, the socket fallback, doorbells, and hostile bytes."""

from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlmesh.errors import ConnectionLost, ProtocolException
from rlmesh.transport import shm
from rlmesh.transport.connection import Connection
from rlmesh.wire import frames, messages as m
from rlmesh.wire.messages import encode_message

pytestmark = pytest.mark.skipif(
    not shm.shm_supported(), reason="shared-memory rings need x86-64 Linux"
)

LIMITS = frames.DEFAULT_LIMITS


TOKEN = "a-session-secret"  # what Welcome.capabilities["shm.token"] carries


@pytest.fixture
def pair():
    path, client = shm.create(capacity=64 * 1024, token=TOKEN)
    server = shm.open_channel(path, token=TOKEN)
    os.unlink(path)
    yield client, server
    client.close()
    server.close()


def frame_of(rid: int, payload: bytes) -> list[object]:
    return encode_message(m.Ping(), rid, [np.frombuffer(payload, np.uint8)] if payload else [])


def nbytes(bufs: list[object]) -> int:
    return sum(memoryview(b).nbytes for b in bufs)  # type: ignore[arg-type]


def test_frames_arrive_in_order_with_their_bytes(pair) -> None:
    client, server = pair
    for rid in range(1, 200):  # far more bytes than the ring holds: positions wrap many times
        payload = bytes([rid % 251]) * (rid * 37 % 3000)
        bufs = frame_of(rid, payload)
        assert client.write(bufs, nbytes(bufs)) is False  # the reader is not asleep
        frame = server.read(LIMITS)
        assert isinstance(frame, frames.Frame) and frame.request_id == rid
        assert (bytes(frame.segments[0]) if frame.segments else b"") == payload
    assert server.read(LIMITS) is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 20_000), min_size=1, max_size=12))
def test_queued_frames_of_any_size_come_back_whole(sizes: list[int]) -> None:
    path, client = shm.create(capacity=64 * 1024, token=TOKEN)
    server = shm.open_channel(path, token=TOKEN)
    os.unlink(path)
    try:
        sent: list[bytes] = []
        for rid, size in enumerate(sizes, 1):
            payload = os.urandom(size)
            bufs = frame_of(rid, payload)
            if client.write(bufs, nbytes(bufs)) is None:  # full: drain what is there first
                break
            sent.append(payload)
        for rid, payload in enumerate(sent, 1):
            frame = server.read(LIMITS)
            assert isinstance(frame, frames.Frame) and frame.request_id == rid
            assert (bytes(frame.segments[0]) if frame.segments else b"") == payload
        assert server.read(LIMITS) is None
    finally:
        client.close()
        server.close()


def test_a_frame_larger_than_the_ring_is_refused_and_a_marker_keeps_order(pair) -> None:
    client, server = pair
    big = frame_of(1, bytes(100_000))
    assert client.write(big, nbytes(big)) is None
    assert client.write_marker() is False
    assert server.read(LIMITS) is shm.MARKER
    assert server.read(LIMITS) is None


def test_a_full_ring_refuses_until_the_reader_catches_up(pair) -> None:
    client, server = pair
    bufs = frame_of(1, bytes(20_000))
    written = 0
    while client.write(bufs, nbytes(bufs)) is not None:
        written += 1
    assert written == 3  # 64 KiB holds three 20 KB frames
    assert isinstance(server.read(LIMITS), frames.Frame)
    assert client.write(bufs, nbytes(bufs)) is False


def test_a_sleeping_reader_is_reported_to_the_writer(pair) -> None:
    client, server = pair
    server.sleeping(True)
    bufs = frame_of(1, b"x")
    assert client.write(bufs, nbytes(bufs)) is True  # ring the doorbell
    server.sleeping(False)
    assert client.write(bufs, nbytes(bufs)) is False


def test_hostile_positions_and_lengths_are_protocol_errors(pair) -> None:
    client, server = pair
    ctl = client._ctl
    ctl[0] = 1 << 40  # the client's write position far past what the ring can hold
    with pytest.raises(ProtocolException, match="positions are inconsistent"):
        server.read(LIMITS)
    ctl[0] = 0
    bufs = frame_of(1, b"abc")
    client.write(bufs, nbytes(bufs))
    client._bytes[4096 : 4096 + 8] = (10**9).to_bytes(8, "little")  # a length past the entry
    with pytest.raises(ProtocolException, match="does not fit"):
        server.read(LIMITS)
    server._ctl[8] = 1 << 50  # the server "read" far beyond what the client wrote
    with pytest.raises(ProtocolException, match="read position is inconsistent"):
        client.write(bufs, nbytes(bufs))


def test_garbage_frame_bytes_fail_the_prefix_check(pair) -> None:
    client, server = pair
    client.write([b"\xff" * 40], 40)
    with pytest.raises(ProtocolException, match="not an rlmesh frame"):
        server.read(LIMITS)


def test_open_channel_only_maps_private_rlmesh_files(tmp_path) -> None:
    with pytest.raises(OSError, match="not an rlmesh"):
        shm.open_channel(str(tmp_path / "x"))
    path, ch = shm.create(capacity=4096, token=TOKEN)
    try:
        os.chmod(path, 0o644)
        with pytest.raises(OSError, match="not private"):
            shm.open_channel(path, token=TOKEN)
        os.chmod(path, 0o600)
        with open(path, "r+b") as f:
            f.seek(4032)
            f.write(b"NOTMAGIC")
        with pytest.raises(OSError, match="unknown layout"):
            shm.open_channel(path, token=TOKEN)
        with pytest.raises(OSError, match="secret"):  # issue 18 defect 7: another session's file
            shm.open_channel(path, token="another-session")
        with pytest.raises(OSError, match="secret"):
            shm.open_channel(path, token="")
        with pytest.raises(OSError, match="not private"):  # owned by someone other than the peer
            shm.open_channel(path, uid=os.getuid() + 1, token=TOKEN)
    finally:
        os.unlink(path)
        ch.close()
    with pytest.raises(OSError):
        shm.open_channel(path, token=TOKEN)  # gone


# -- connections with rings --------------------------------------------------------------


@pytest.fixture
def conns():
    a, b = socket.socketpair()
    path, ring_a = shm.create(capacity=64 * 1024, token=TOKEN)
    ring_b = shm.open_channel(path, token=TOKEN)
    os.unlink(path)
    ca, cb = Connection(a), Connection(b)
    ca.shm, cb.shm = ring_a, ring_b
    ca.busy_poll = cb.busy_poll = 100e-6
    yield ca, cb
    ca.close()
    cb.close()


def test_a_connection_pair_exchanges_small_and_oversized_frames_in_order(conns) -> None:
    client, server = conns
    sizes = [10, 200_000, 30, 70_000, 5]  # 200 KB and 70 KB exceed the 64 KiB ring: socket
    done = threading.Event()
    got: list[tuple[int, int]] = []

    def serve() -> None:
        for _ in sizes:
            frame = server.recv_frame()
            assert frame is not None
            got.append((frame.request_id, frame.segments[0].nbytes))
        done.set()

    t = threading.Thread(target=serve)
    t.start()
    for rid, size in enumerate(sizes, 1):
        client.send(frame_of(rid, bytes(size)))
    t.join(10)
    assert done.is_set()
    assert got == [(rid, size) for rid, size in enumerate(sizes, 1)]


def test_a_sleeping_reader_is_woken_by_the_doorbell(conns, monkeypatch) -> None:
    from rlmesh.transport import connection

    monkeypatch.setattr(
        connection, "_RING_RECHECK_SECONDS", 60.0
    )  # only the doorbell can wake it in time
    client, server = conns

    def answer_late() -> None:
        time.sleep(0.2)  # long past the poll: the client is asleep on its socket
        server.send(frame_of(7, b"late"))

    client.send(frame_of(1, b"q"))
    assert server.recv_frame() is not None
    t = threading.Thread(target=answer_late)
    t.start()
    started = time.monotonic()
    frame = client.recv_frame()
    t.join(5)
    assert frame is not None and frame.request_id == 7 and bytes(frame.segments[0]) == b"late"
    assert time.monotonic() - started < 5


def test_a_timeout_while_waiting_on_a_ring_keeps_the_stream_usable(conns) -> None:
    client, server = conns
    client.sock.settimeout(0.05)
    client.settimeout(0.05)
    with pytest.raises(TimeoutError):
        client.recv_frame()
    server.send(frame_of(3, b"after"))
    frame = client.recv_frame()
    assert frame is not None and frame.request_id == 3


def test_the_peer_closing_is_connection_lost_even_on_a_ring(conns) -> None:
    client, server = conns
    server.close()
    with pytest.raises(ConnectionLost):
        client.recv_frame()


def test_a_corrupt_ring_on_send_is_connection_lost(conns) -> None:
    client, server = conns
    server.shm._ctl[8] = 1 << 50  # type: ignore[union-attr]
    with pytest.raises(ConnectionLost, match="corrupt"):
        client.send(frame_of(1, b"x"))


# -- the negotiation (issue 10 item 5: one home in transport/shm.py) ---------------------------


def test_offer_names_a_fresh_secret_for_a_local_peer_and_the_client_reads_it_back() -> None:
    a, b = socket.socketpair()  # a Unix socket: always a local peer
    try:
        token, caps = shm.offer(a)
        if not shm.shm_supported():
            assert (token, caps) == ("", None)
            return
        assert caps == {"shm": "1", "shm.token": token} and len(token) == 32
        assert shm.offer(a)[0] != token  # one secret per session
        assert shm.offered_token(caps, b) == token
        assert shm.offered_token({"shm.token": token}, b) == ""  # no offer, no rings
        assert shm.offered_token({"shm": "1"}, b) == ""  # an offer without a secret is declined
    finally:
        a.close()
        b.close()


def test_accept_declines_a_file_without_this_sessions_secret_and_leaves_it_alone() -> None:
    if not shm.shm_supported():
        pytest.skip("shared-memory rings are not used on this host")
    a, b = socket.socketpair()
    path, ring = shm.create(token=TOKEN)
    try:
        assert shm.accept(path, a, "") is None
        assert shm.accept("", a, TOKEN) is None
        assert shm.accept(path, a, "another-session") is None
        assert os.path.exists(path)  # declined files are not touched
    finally:
        ring.close()
        shm.discard(path)
        a.close()
        b.close()
