"""Golden bytes: the exact frames docs/protocol.md shows (any wire change shows up here)."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.wire import PREFIX_SIZE, decode_header, decode_prefix, messages as m, split_body
from rlmesh.wire.messages import encode_message

PEER = m.PeerInfo(
    component="rlmesh-env",
    package_version="0.1.0",
    language="python",
    language_version="3.11.7",
    os="linux",
    os_version="6.1",
    arch="x86_64",
)
OBS = np.array([0.5, -0.25, 0.125, 1.0], dtype="<f4")

GOLDEN = [
    (
        "hello",
        m.Hello(generation="rlmesh-py-v1", peer=PEER, editions=["2026.06"], preferred="2026.06"),
        1,
        [],
        "524d0101010000005700000000000000570000000000000096ac726c6d6573682d70792d763199aa726c6d6573"
        "682d656e76a5302e312e30a6707974686f6ea6332e31312e37a56c696e7578a3362e31a67838365f3634808091"
        "a7323032362e3036a7323032362e303680a3656e76",
    ),
    (
        "step_request",
        m.Step(action=[1]),
        2,
        [],
        "524d010302000000060000000000000006000000000000009491018000c3",
    ),
    (
        "step_reply",
        m.StepReply(obs=[], reward=1.0),
        2,
        [OBS],
        "524d018502000000100000000100000050000000000000009790cb3ff0000000000000c2c2c09000"
        + "1000000000000000"
        + "00" * 40
        + "0000003f000080be0000003e0000803f",
    ),
]


def _bytes(bufs: list[object]) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) if not isinstance(b, bytes) else b for b in bufs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "msg", "rid", "segments", "hexdump"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_message_encodes_to_the_documented_bytes(name, msg, rid, segments, hexdump):
    assert _bytes(encode_message(msg, rid, segments)).hex() == hexdump


@pytest.mark.parametrize(("name", "msg", "rid", "segments", "hexdump"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_documented_bytes_decode_to_the_message(name, msg, rid, segments, hexdump):
    raw = bytes.fromhex(hexdump)
    plan = decode_prefix(raw[:PREFIX_SIZE])
    assert plan.request_id == rid
    body = np.frombuffer(bytearray(raw[PREFIX_SIZE:]), dtype=np.uint8)
    frame = split_body(plan, body)
    assert decode_header(frame) == msg
    assert [bytes(s) for s in frame.segments] == [s.tobytes() for s in segments]


def test_docs_show_the_golden_bytes():
    """docs/protocol.md section 11 carries the same prefixes (kept in sync by hand)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "protocol.md").read_text()
    for prefix in ("524d0101 01000000 57000000", "524d0103 02000000 06000000", "524d0185 02000000 10000000"):
        assert prefix in text
