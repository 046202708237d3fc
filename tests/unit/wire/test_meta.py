"""The metadata codec (MET-1): info, options and metadata values, arrays included."""

from __future__ import annotations

import enum
from collections import namedtuple
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlmesh.errors import ProtocolException
from rlmesh.wire import meta
from rlmesh.wire.meta import enc_hook, ext_hook, normalize

ENC = msgspec.msgpack.Encoder(enc_hook=enc_hook)
DEC = msgspec.msgpack.Decoder(ext_hook=ext_hook)


def round_trip(value: Any) -> Any:
    return DEC.decode(ENC.encode(normalize(value)))


plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(st.characters(blacklist_categories=("Cs",)))
    | st.binary(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(plain)
def test_plain_values_survive_exactly(value: Any) -> None:
    out = round_trip(value)
    assert out == value and type(out) is type(value)


@pytest.mark.parametrize(
    "dtype", ["bool", "uint8", "int16", "uint64", "float16", "float32", "float64"]
)
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_numpy_arrays_come_back_as_writable_arrays_of_the_same_dtype_and_shape(
    dtype: str, shape: tuple
) -> None:
    a = (np.arange(int(np.prod(shape))) % 2).astype(dtype).reshape(shape)
    out = round_trip({"a": a})["a"]
    assert out.dtype == a.dtype and out.shape == a.shape and np.array_equal(out, a)
    assert out.flags.writeable


def test_unwrapping_rules() -> None:
    Point = namedtuple("Point", "x y")

    class Color(enum.Enum):
        RED = 1

    value = {"p": Point(1, 2), "t": (1, 2), "c": Color.RED, "s": np.float32(1.5), "big": 2**70}
    assert round_trip(value) == {
        "p": {"x": 1, "y": 2},
        "t": [1, 2],
        "c": 1,
        "s": 1.5,
        "big": float(2**70),
    }


def test_key_order_is_preserved() -> None:
    assert list(round_trip({"z": 1, "a": 2, "m": 3})) == ["z", "a", "m"]


def test_unsupported_values_name_the_path_and_the_remedy() -> None:
    with pytest.raises(
        TypeError, match=r"'object' at \$\.a\.b is not supported.*sanitize_metadata"
    ):
        normalize({"a": {"b": object()}})
    with pytest.raises(TypeError, match="keys must be str"):
        normalize({1: "x"})


@pytest.mark.parametrize(
    "payload",
    [b"", b"\x63\x00", b"\x0b\x01\x02", b"\x0b\x01" + (3).to_bytes(8, "little") + b"\x00"],
)
def test_malformed_array_extensions_raise_ProtocolException(payload: bytes) -> None:
    with pytest.raises(ProtocolException):
        ext_hook(1, memoryview(payload))
    with pytest.raises(ProtocolException, match="unknown msgpack extension"):
        ext_hook(7, memoryview(b""))


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.sampled_from([np.float32(1.5), np.int64(-3), np.bool_(True), np.uint8(7)]),
    st.builds(lambda n: np.arange(n, dtype=np.float32), st.integers(0, 4)),
)
_trees = st.recursive(
    _leaves,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.tuples(kids, kids),
        st.dictionaries(st.text(max_size=3), kids, max_size=3),
    ),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return type(a) is type(b) and np.array_equal(a, b) and a.dtype == b.dtype
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


@given(_trees)
def test_the_fast_walk_normalizes_exactly_as_the_path_carrying_walk(tree: object) -> None:
    """MET-1: ``normalize``'s path-free walk of common shapes gives what the full walk gives."""
    assert _same(meta.normalize(tree), meta._normalize(tree))
