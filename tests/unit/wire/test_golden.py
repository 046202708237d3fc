"""Golden bytes: the shared vectors in tests/vectors/frames.txt (any wire change shows up here).

The same file is read by the Rust crate's ``rust/tests/golden.rs``, so the Python
reference and the Rust implementation cannot drift apart (issue 17). The messages
behind each vector live in ``tests/vectors/golden_messages.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlmesh.wire import PREFIX_SIZE, decode_header, decode_prefix, messages as m, split_body
from rlmesh.wire.messages import encode_message

ROOT = Path(__file__).resolve().parents[3]
VECTORS = ROOT / "tests" / "vectors"


def _load_messages() -> Any:
    spec = importlib.util.spec_from_file_location("golden_messages", VECTORS / "golden_messages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("golden_messages", module)
    spec.loader.exec_module(module)
    return module


def _load_frames() -> dict[str, tuple[int, str]]:
    out: dict[str, tuple[int, str]] = {}
    for line in (VECTORS / "frames.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, rid, hexdump = line.split()
        assert name not in out, f"duplicate vector {name}"
        out[name] = (int(rid), hexdump)
    return out


GOLDEN: dict[str, tuple[Any, int, list[Any]]] = _load_messages().GOLDEN
FRAMES = _load_frames()

#: The three frames docs/protocol.md section 11 shows, byte for byte: the vector file
#: may grow, but these never change without a new protocol generation.
DOCUMENTED = {
    "hello": "524d0101010000005700000000000000570000000000000096ac726c6d6573682d70792d763199aa726c6d6573"
    "682d656e76a5302e312e30a6707974686f6ea6332e31312e37a56c696e7578a3362e31a67838365f3634808091"
    "a7323032362e3036a7323032362e303680a3656e76",
    "step_request": "524d010302000000060000000000000006000000000000009491018000c3",
    "step_reply": "524d018502000000100000000100000050000000000000009790cb3ff0000000000000c2c2c09000"
    + "1000000000000000"
    + "00" * 40
    + "0000003f000080be0000003e0000803f",
}


def _bytes(bufs: list[object]) -> bytes:
    return b"".join(bytes(memoryview(b).cast("B")) if not isinstance(b, bytes) else b for b in bufs)  # type: ignore[arg-type]


def _eq(a: Any, b: Any) -> bool:
    """Structural equality that compares numpy arrays (inside info dicts) by dtype, shape and bytes."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.tobytes() == b.tobytes()
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_eq(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b))
    if hasattr(a, "__struct_fields__") and type(a) is type(b):
        return all(_eq(getattr(a, f), getattr(b, f)) for f in a.__struct_fields__)
    return type(a) is type(b) and a == b


def test_every_vector_has_its_message_and_every_message_its_vector() -> None:
    assert set(FRAMES) == set(GOLDEN)


def test_the_documented_frames_keep_their_exact_bytes() -> None:
    for name, hexdump in DOCUMENTED.items():
        assert FRAMES[name] == (GOLDEN[name][1], hexdump)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_message_encodes_to_the_shared_vector(name: str) -> None:
    msg, rid, segments = GOLDEN[name]
    assert FRAMES[name][0] == rid
    assert _bytes(encode_message(msg, rid, segments)).hex() == FRAMES[name][1]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_shared_vector_decodes_to_the_message(name: str) -> None:
    msg, rid, segments = GOLDEN[name]
    raw = bytes.fromhex(FRAMES[name][1])
    plan = decode_prefix(raw[:PREFIX_SIZE])
    assert plan.request_id == rid
    body = np.frombuffer(bytearray(raw[PREFIX_SIZE:]), dtype=np.uint8)
    frame = split_body(plan, body)
    if isinstance(msg, m.SessionsPong):  # a Pong's trailing fields are read apart
        assert _eq(
            m.decode_sessions_pong(frame),
            m.AuthPong(**{f: getattr(msg, f) for f in msg.__struct_fields__}),
        )
    elif isinstance(
        msg, (m.Hello, m.Incompatible, m.Shutdown, m.Ping)
    ):  # decoded with the trailing field
        received = decode_header(frame)
        assert all(_eq(getattr(received, f), getattr(msg, f)) for f in msg.__struct_fields__)
    else:
        assert _eq(decode_header(frame), msg)
    assert [bytes(s) for s in frame.segments] == [
        np.ascontiguousarray(s).tobytes() for s in segments
    ]


def test_docs_show_the_golden_bytes() -> None:
    """docs/protocol.md section 11 carries the same prefixes (kept in sync by hand)."""
    text = (ROOT / "docs" / "protocol.md").read_text()
    for prefix in (
        "524d0101 01000000 57000000",
        "524d0103 02000000 06000000",
        "524d0185 02000000 10000000",
    ):
        assert prefix in text
