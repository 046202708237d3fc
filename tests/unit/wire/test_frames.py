"""Frames: layout invariants, limits checked before allocation, and a decoder fuzz."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rlmesh.errors import ProtocolException
from rlmesh.wire import frames, messages as m
from rlmesh.wire.frames import PREFIX_SIZE, FrameLimits, decode_prefix, encode_frame, split_body
from rlmesh.wire.messages import decode_header, encode_message


def raw_frame(bufs: list[object]) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) if not isinstance(b, bytes) else b for b in bufs)  # type: ignore[arg-type]


def parse(data: bytes, limits: FrameLimits = frames.DEFAULT_LIMITS) -> list[frames.Frame]:
    """A sans-IO reader over a byte string: what a transport does, minus the socket."""
    out: list[frames.Frame] = []
    pos = 0
    while pos < len(data):  # bounded: every iteration consumes at least PREFIX_SIZE bytes
        if len(data) - pos < PREFIX_SIZE:
            raise ProtocolException("truncated prefix")
        plan = decode_prefix(data[pos : pos + PREFIX_SIZE], limits)
        pos += PREFIX_SIZE
        if len(data) - pos < plan.body_len:
            raise ProtocolException("truncated body")
        body = frames.new_body(plan)
        body[:] = np.frombuffer(data, np.uint8, plan.body_len, pos)
        pos += plan.body_len
        frame = split_body(plan, body)
        decode_header(frame)
        out.append(frame)
    return out


@pytest.mark.parametrize(("size", "align"), [(3, 16), (frames.SMALL_BODY, 64)])
def test_segments_are_aligned_and_large_leaves_are_passed_through(size: int, align: int) -> None:
    segs = [np.arange(size, dtype=np.uint8), np.ones(5, np.float64)]
    bufs = encode_frame(0x85, 1, b"\x90", segs)
    if size > frames.INLINE_MAX:  # a large leaf is the caller's memory, never copied
        assert any(b is segs[0] for b in bufs)
    else:  # a tiny frame is one buffer
        assert len(bufs) == 1
    raw = raw_frame(bufs)
    plan = decode_prefix(raw[:PREFIX_SIZE])
    body = frames.new_body(plan)
    body[:] = np.frombuffer(raw, np.uint8, offset=PREFIX_SIZE)
    frame = split_body(plan, body)
    assert [s.ctypes.data % align for s in frame.segments] == [0, 0]
    assert bytes(frame.segments[1]) == segs[1].tobytes()


@pytest.mark.parametrize("n", [0, 1, frames.INLINE_MAX, frames.INLINE_MAX + 1, 5000])
def test_one_leaf_frames_round_trip_inlined_or_not(n: int) -> None:
    leaf = np.arange(n, dtype=np.uint8)
    bufs = encode_frame(0x85, 9, b"\x91\x01", [leaf])
    assert bufs.nbytes == sum(memoryview(b).nbytes for b in bufs)
    assert (len(bufs) == 1) == (bufs.nbytes - PREFIX_SIZE <= frames.INLINE_MAX)
    if n > frames.INLINE_MAX:
        assert bufs[-1] is leaf  # a large leaf is never copied
    raw = raw_frame(bufs)
    plan = decode_prefix(raw[:PREFIX_SIZE])
    frame = split_body(plan, np.frombuffer(bytearray(raw[PREFIX_SIZE:]), np.uint8))
    assert frame.request_id == 9 and bytes(frame.header) == b"\x91\x01"
    assert bytes(frame.segments[0]) == leaf.tobytes()


def test_frame_without_segments_is_prefix_plus_header() -> None:
    raw = raw_frame(encode_frame(7, 5, b"\x90"))
    assert len(raw) == PREFIX_SIZE + 1
    assert struct.unpack_from("<2sBBIIIQ", raw) == (b"RM", 1, 7, 5, 1, 0, 1)


@pytest.mark.parametrize(
    ("prefix", "match"),
    [
        (b"XX" + bytes(22), "not an rlmesh frame"),
        (struct.pack("<2sBBIIIQ", b"RM", 9, 1, 0, 1, 0, 1), "unsupported frame version 9"),
        (
            struct.pack("<2sBBIIIQ", b"RM", 1, 1, 0, 2**31, 0, 2**31),
            "header of 2147483648 bytes exceeds",
        ),
        (struct.pack("<2sBBIIIQ", b"RM", 1, 1, 0, 1, 2**20, 2**24), "segments; the limit is 4096"),
        (
            struct.pack("<2sBBIIIQ", b"RM", 1, 1, 0, 1, 0, 2**40),
            "body of 1099511627776 bytes exceeds",
        ),
        (struct.pack("<2sBBIIIQ", b"RM", 1, 1, 0, 8, 2, 4), "shorter than its header and table"),
    ],
)
def test_bad_prefixes_raise_ProtocolException_before_any_allocation(
    prefix: bytes, match: str
) -> None:
    with pytest.raises(ProtocolException, match=match):
        decode_prefix(prefix)


def test_pre_handshake_limits_refuse_segments_and_large_bodies() -> None:
    big = raw_frame(encode_frame(1, 1, b"\x90", [np.zeros(10, np.uint8)]))
    with pytest.raises(ProtocolException, match="limit is 0"):
        decode_prefix(big[:PREFIX_SIZE], frames.PRE_HANDSHAKE_LIMITS)


def test_segment_table_must_match_the_body_exactly() -> None:
    raw = bytearray(raw_frame(encode_frame(0x85, 1, b"\x90", [np.zeros(8, np.uint8)])))
    struct.pack_into("<Q", raw, PREFIX_SIZE + 8, 9)  # claim one byte more than sent
    with pytest.raises(ProtocolException):
        parse(bytes(raw))


def valid_frames() -> list[bytes]:
    peer = m.PeerInfo(component="fuzz")
    msgs = [
        encode_message(m.Hello(generation="rlmesh-py-v1", peer=peer, editions=["2026.06"]), 1),
        encode_message(
            m.Step(action=[1, "x"], episode_ids={0: "id"}), 2, [np.arange(40, dtype=np.float32)]
        ),
        encode_message(
            m.StepReply(obs=[], info={"a": np.arange(3)}), 2, [np.zeros(100, np.uint8)] * 3
        ),
        encode_message(m.Reset(seeds=[1, None], options={"k": [1, 2.5, "s"]}), 3),
        encode_message(m.Error(code=10, message="boom", recoverable=False), 4),
    ]
    return [raw_frame(b) for b in msgs]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    base = bytearray(draw(st.sampled_from(valid_frames())))
    how = draw(st.sampled_from(["flip", "truncate", "inflate", "splice", "random"]))
    if how == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(base) - 1))
            base[i] ^= 1 << draw(st.integers(0, 7))
    elif how == "truncate":
        base = base[: draw(st.integers(0, len(base) - 1))]
    elif how == "inflate":
        field = draw(st.sampled_from([8, 12, 16]))
        fmt = "<Q" if field == 16 else "<I"
        struct.pack_into(fmt, base, field, draw(st.integers(0, 2**32 - 1)))
    elif how == "splice":
        i = draw(st.integers(0, len(base)))
        base[i:i] = draw(st.binary(min_size=1, max_size=64))
    else:
        base = bytearray(draw(st.binary(max_size=256)))
    return bytes(base)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_decoder_fuzz_only_raises_ProtocolException_and_respects_the_limit(data: bytes) -> None:
    limits = FrameLimits(max_frame_bytes=4096, max_header_bytes=4096, max_segments=16)
    allocated: list[int] = []
    real_new_body = frames.new_body

    def spy(plan: frames.FramePlan) -> np.ndarray:
        allocated.append(plan.body_len)
        return real_new_body(plan)

    frames.new_body = spy  # type: ignore[assignment]
    try:
        parse(data, limits)
    except ProtocolException:
        pass
    finally:
        frames.new_body = real_new_body  # type: ignore[assignment]
    assert all(n <= limits.max_frame_bytes for n in allocated)


LAYERS = {
    # package: modules it must never import (DESIGN "Imports point downward")
    "wire": ("socket", "select", "selectors", "rlmesh.transport", "rlmesh.serve", "rlmesh.client"),
    "spaces": ("socket", "rlmesh.wire", "rlmesh.transport", "rlmesh.serve", "rlmesh.client"),
    "adapters": ("socket", "rlmesh.transport", "rlmesh.serve", "rlmesh.client", "rlmesh.wire"),
}


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_layers_import_only_downward(package: str) -> None:
    """wire is sans-IO, spaces know nothing of the wire, adapters nothing of transports."""
    import ast
    from pathlib import Path

    from srctree import parse, walk

    root = Path(__file__).resolve().parents[3] / "src" / "rlmesh"
    forbidden = LAYERS[package]
    for path in sorted((root / package).rglob("*.py")):
        for node in walk(parse(path)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # resolve "..x" relative to rlmesh/<package>/...
                    parts = ["rlmesh", *path.relative_to(root).parts[:-1]]
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                names = [base]
            for name in names:
                assert not any(name == f or name.startswith(f + ".") for f in forbidden), (
                    f"{path}: imports {name}"
                )
