"""Bounded nesting in the one decoder of peer bytes (issue 18, defect 1; DESIGN "bounded nesting").

``decode_header`` is the single choke point every received header passes (socket and
ring, server and client, env and model service), so these tests attack it directly with
every message kind: whatever the nesting, only ``ProtocolException`` comes out.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlmesh.errors import ProtocolException
from rlmesh.wire import messages as m
from rlmesh.wire.frames import Frame
from rlmesh.wire.messages import MAX_HEADER_DEPTH, decode_header
from rlmesh.wire.meta import MAX_METADATA_DEPTH, normalize


def frame(kind: int, header: bytes) -> Frame:
    return Frame(kind, 1, memoryview(header), [])


def arrays(depth: int, inner: bytes = b"\xc0") -> bytes:
    return b"\x91" * depth + inner


def maps(depth: int) -> bytes:
    return b"\x81\xa1k" * depth + b"\xc0"


@pytest.mark.parametrize("kind", sorted(m.KINDS))
@pytest.mark.parametrize("depth", [MAX_HEADER_DEPTH + 1, 1_100, 100_000])
def test_a_trailing_nesting_bomb_in_any_message_kind_is_a_protocol_error(kind, depth):
    """Readers skip unknown trailing fields (docs/protocol.md section 3); skipping a bomb
    used to raise RecursionError. Every kind, every depth: ProtocolException only."""
    fields = len(m.KINDS[kind].__struct_fields__)
    header = bytes([0x90 + fields + 1]) + b"\xc0" * fields + arrays(depth)
    with pytest.raises(ProtocolException):
        decode_header(frame(kind, header))


@pytest.mark.parametrize(
    "kind,prefix,suffix",
    [
        (m.Reset.KIND, b"\x95\x90", b"\x90\x90\x00"),  # Reset.options
        (m.ResetReply.KIND, b"\x93\x90", b"\x00"),  # ResetReply.info
        (m.StepReply.KIND, b"\x97\x90\x00\xc2\xc2", b"\x90\x00"),  # StepReply.info
        (m.Step.KIND, b"\x94\x91", b"\x80\x00\xc3"),  # Step.action leaf
        (m.Predict.KIND, b"\x92\x91", b"\x00"),  # Predict.obs leaf (model service)
    ],
)
@pytest.mark.parametrize("nest", [arrays, maps])
def test_any_typed_fields_are_bounded(kind, prefix, suffix, nest):
    deep = prefix + nest(MAX_HEADER_DEPTH + 5) + suffix
    with pytest.raises(ProtocolException, match="nests deeper than 128"):
        decode_header(frame(kind, deep))
    ok = prefix + nest(MAX_METADATA_DEPTH) + suffix  # the metadata limit is well inside
    decode_header(frame(kind, ok))


def test_the_header_limit_is_exact():
    # Ping header [token, x] with x nested (a trailing field Ping does not know): total
    # depth = 1 (header) + levels
    at_limit = b"\x92\xa0" + arrays(MAX_HEADER_DEPTH - 1)
    assert decode_header(frame(m.Ping.KIND, at_limit)) == m.AuthPing()
    with pytest.raises(ProtocolException, match="nests deeper"):
        decode_header(frame(m.Ping.KIND, b"\x92\xa0" + arrays(MAX_HEADER_DEPTH)))


def test_a_large_flat_header_is_not_mistaken_for_a_deep_one():
    """Container-like bytes inside floats and strings trip the cheap filter; the exact
    measure then accepts the header (a big elementwise contract, say)."""
    rng = np.random.default_rng(0)
    bounds = rng.standard_normal(50_000).tolist()  # float bytes hit 0x80-0x9f often
    contract = {"observation_space": {"kind": "box", "details": {"low": bounds, "high": bounds}}}
    welcome = m.Welcome(
        generation="g",
        peer=m.PeerInfo(),
        editions=["2026.06"],
        preferred=None,
        selected="2026.06",
        session_id="s",
        contract=contract,
    )
    header = m._ENCODER.encode(welcome)
    assert decode_header(frame(m.Welcome.KIND, header)).contract == contract


def test_hostile_ext_payloads_and_garbage_are_protocol_errors():
    for header in (
        b"\x93\x90\xc7\x02\x01\xff\xff\x00",  # ndarray ext with an unknown dtype code
        b"\x93\x90\xc7\x02\x07\x01\x00",  # an unknown extension type
        b"\x93\x90\xdd\xff\xff\xff\xff",  # an array declaring 4 billion items
        b"\x93\x90\xdb\xff\xff\xff\xff",  # a str declaring 4 GiB
        b"\xc1",  # a reserved byte
    ):
        with pytest.raises(ProtocolException):
            decode_header(frame(m.ResetReply.KIND, header))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(m.KINDS)), st.binary(max_size=400), st.integers(0, 3_000))
def test_no_bytes_make_decode_header_raise_anything_but_ProtocolException(kind, tail, depth):
    header = (
        bytes([0x90 + min(15, len(m.KINDS[kind].__struct_fields__) + 1)]) + arrays(depth) + tail
    )
    try:
        decode_header(frame(kind, header))
    except ProtocolException:
        pass


def test_metadata_deeper_than_the_limit_is_refused_when_sent():
    value: object = 0
    for _ in range(MAX_METADATA_DEPTH):
        value = [value]
    normalize(value)
    with pytest.raises(TypeError, match="deeper than 64"):
        normalize({"x": value})
    cyclic: dict[str, object] = {}
    cyclic["self"] = cyclic
    with pytest.raises(TypeError, match="contains itself"):
        normalize(cyclic)


def test_msgspec_still_raises_RecursionError_on_its_own():
    """The guard is needed: the library alone lets RecursionError out (so it is caught here)."""
    with pytest.raises(RecursionError):
        msgspec.msgpack.decode(arrays(100_000))
