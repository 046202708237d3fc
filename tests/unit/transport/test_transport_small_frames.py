"""The one-read path for small frames (issue 24): same frames, same errors as the general path."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import numpy as np
import pytest

from rlmesh.errors import ProtocolException
from rlmesh.transport.connection import Connection
from rlmesh.wire import frames
from rlmesh.wire.frames import FrameLimits


@pytest.fixture
def pair() -> Iterator[tuple[Connection, Connection]]:
    a, b = socket.socketpair()
    ca, cb = Connection(a), Connection(b)
    yield ca, cb
    ca.close()
    cb.close()


def _raw(buffers: list[object]) -> bytes:
    return b"".join(
        bytes(memoryview(b).cast("B")) if not isinstance(b, bytes) else b for b in buffers
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [0, 1, 2, 4])
def test_small_frames_arrive_whole(pair: tuple[Connection, Connection], count: int) -> None:
    a, b = pair
    segs = [np.arange(k + 1, dtype=np.float64) for k in range(count)]
    a.send(frames.encode_frame(5, 9, b"\x91\x01", segs))
    frame = b.recv_frame()
    assert frame is not None and (frame.kind, frame.request_id, bytes(frame.header)) == (
        5,
        9,
        b"\x91\x01",
    )
    assert [s.view(np.float64).tolist() for s in frame.segments] == [s.tolist() for s in segs]
    assert not b.buffered


def test_two_frames_in_one_read_are_both_delivered(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    one = _raw(frames.encode_frame(5, 1, b"\x90", [np.zeros(3, np.uint8)]))
    two = _raw(frames.encode_frame(6, 2, b"\x90"))
    a.sock.sendall(one + two)
    first = b.recv_frame()
    assert first is not None and first.request_id == 1 and b.buffered
    second = b.recv_frame()
    assert second is not None and second.request_id == 2 and not b.buffered


def test_a_corrupt_segment_table_is_the_general_paths_error(
    pair: tuple[Connection, Connection],
) -> None:
    a, b = pair
    raw = bytearray(
        _raw(frames.encode_frame(5, 1, b"\x90", [np.zeros(8, np.uint8), np.zeros(8, np.uint8)]))
    )
    struct.pack_into(
        "<Q", raw, frames.PREFIX_SIZE + 8, 10_000
    )  # the first segment's length runs past the body
    a.sock.sendall(bytes(raw))
    with pytest.raises(ProtocolException, match="runs past the frame body"):
        b.recv_frame()


def test_limits_still_apply_to_small_frames(pair: tuple[Connection, Connection]) -> None:
    a, b = pair
    b.limits = FrameLimits(max_frame_bytes=1024, max_header_bytes=1024, max_segments=0)
    a.send(frames.encode_frame(5, 1, b"\x90", [np.zeros(8, np.uint8)]))
    with pytest.raises(ProtocolException, match="segments"):
        b.recv_frame()
