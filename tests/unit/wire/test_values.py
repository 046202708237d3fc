"""The space-directed codec: every space kind, scalar and batched, round-trips through frame bytes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rlmesh.errors import ProtocolException
from rlmesh.spaces._spec import SpaceSpec
from rlmesh.spaces._values import compile_encoder
from rlmesh.wire import (
    PREFIX_SIZE,
    ValueCodec,
    decode_header,
    decode_prefix,
    messages as m,
    new_body,
    split_body,
)
from rlmesh.wire.messages import encode_message
from strategies import space_specs, values_for


def wire_round_trip(spec: SpaceSpec, value: Any, lanes: int | None) -> Any:
    """encode -> frame bytes -> decode, exactly as a server and client do."""
    canonical = compile_encoder(spec, lanes=lanes)(value)
    codec = ValueCodec(spec, lanes)
    scalars, segments = codec.split(canonical)
    raw = b"".join(
        bytes(memoryview(b).cast("B"))
        for b in encode_message(m.ResetReply(obs=scalars), 9, segments)
    )
    plan = decode_prefix(raw[:PREFIX_SIZE])
    body = new_body(plan)  # what a transport fills with recv_into
    body[:] = np.frombuffer(raw, np.uint8, offset=PREFIX_SIZE)
    frame = split_body(plan, body)
    msg = decode_header(frame)
    return ValueCodec(spec, lanes).join(msg.obs, frame.segments)


def assert_identical(expected: Any, actual: Any, path: str = "$") -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected), (
            path
        )  # declared key order
        for k in expected:
            assert_identical(expected[k], actual[k], f"{path}.{k}")
    elif isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected), path
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_identical(e, a, f"{path}[{i}]")
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), path
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, path
        assert actual.tobytes() == expected.tobytes(), path  # bit-exact, NaN-free by construction
        assert actual.flags.writeable, path
    else:
        assert type(actual) is type(expected) and actual == expected, path


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_every_space_kind_round_trips_scalar(data: st.DataObject) -> None:
    spec = data.draw(space_specs(max_depth=2))
    value = data.draw(values_for(spec))
    expected = compile_encoder(spec)(value)
    assert_identical(expected, wire_round_trip(spec, value, None))


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data(), st.integers(1, 4))
def test_every_space_kind_round_trips_batched(data: st.DataObject, lanes: int) -> None:
    spec = data.draw(space_specs(max_depth=2))
    value = data.draw(values_for(spec, lanes=lanes))
    expected = compile_encoder(spec, lanes=lanes)(value)
    assert_identical(expected, wire_round_trip(spec, value, lanes))


def test_image_observation_decodes_to_writable_views_of_one_buffer() -> None:
    spec = SpaceSpec._dict(
        {
            "image": SpaceSpec._box((224, 224, 3), "uint8", 0, 255),
            "state": SpaceSpec._box((16,), "float32"),
        }
    )
    value = {"image": np.full((224, 224, 3), 7, np.uint8), "state": np.arange(16, dtype=np.float32)}
    out = wire_round_trip(spec, value, None)
    assert out["image"].flags.writeable and out["state"].flags.writeable
    assert out["image"].base is out["state"].base or np.shares_memory(
        out["image"].base, out["state"].base
    )
    assert out["image"].ctypes.data % 64 == 0 and out["state"].ctypes.data % 64 == 0


def test_dict_leaves_follow_declared_key_order_not_sorted_order() -> None:
    spec = SpaceSpec._dict({"z": SpaceSpec._discrete(5), "a": SpaceSpec._text(8, 0)})
    codec = ValueCodec(spec)
    scalars, segments = codec.split({"z": 3, "a": "hi"})
    assert scalars == [3, "hi"] and segments == []


@pytest.mark.parametrize(
    ("scalars", "segments", "match"),
    [
        ([], [], "needs 1 scalars and 1 segments"),
        ([1], [np.zeros(3, np.uint8)], "segment carries 3 bytes"),
        (["x"], [np.zeros(16, np.uint8)], "expected an integer"),
        ([True], [np.zeros(16, np.uint8)], "expected an integer"),
    ],
)
def test_join_rejects_malformed_values_with_ProtocolException(scalars, segments, match) -> None:
    spec = SpaceSpec._tuple([SpaceSpec._box((4,), "float32"), SpaceSpec._discrete(3)])
    with pytest.raises(ProtocolException, match=match):
        ValueCodec(spec).join(scalars, segments)


def test_bool_segments_must_hold_only_zero_and_one() -> None:
    spec = SpaceSpec._box((3,), "bool")
    with pytest.raises(ProtocolException, match="bool segment"):
        ValueCodec(spec).join([], [np.array([0, 1, 2], np.uint8)])


def test_batched_text_needs_one_string_per_lane() -> None:
    spec = SpaceSpec._text(5)
    with pytest.raises(ProtocolException, match="list of 2 strings"):
        ValueCodec(spec, 2).join([["a"]], [])
