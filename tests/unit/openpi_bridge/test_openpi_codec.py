"""The openpi wire's packing (``rlmesh.openpi._codec``): round trips and hostile bytes.

Byte equality with ``openpi-client`` itself is pinned against the real peer in
``tests/integration/openpi_bridge/test_openpi_peer.py``; here the codec alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from conftest import require

require("msgpack", "the rlmesh[openpi] extra")

from rlmesh.errors import ProtocolException  # noqa: E402
from rlmesh.openpi import packb, unpackb  # noqa: E402

DTYPES = ["uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
          "float32", "float64", "bool", ">i4", ">f8"]  # fmt: skip

arrays = st.sampled_from(DTYPES).flatmap(
    lambda d: hnp.arrays(
        np.dtype(d), hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    )
)
leaves = st.one_of(
    arrays,
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


@settings(max_examples=200)
@given(values)
def test_every_value_round_trips(value: Any) -> None:
    assert same(value, unpackb(packb(value)))


@given(arrays)
def test_arrays_come_back_with_their_dtype_shape_and_bytes_even_when_strided(a: Any) -> None:
    strided = a[..., ::2] if a.ndim else a
    out = unpackb(packb(strided))
    assert out.dtype.str == strided.dtype.str and out.shape == strided.shape
    assert out.tobytes() == strided.tobytes()


def test_numpy_scalars_come_back_as_numpy_scalars() -> None:
    for x in (np.float32(1.5), np.int64(-3), np.bool_(True), np.uint8(7)):
        out = unpackb(packb(x))
        assert type(out) is type(x) and out == x


def test_object_void_and_complex_values_are_refused_when_packing() -> None:
    with pytest.raises(ValueError, match="cannot carry"):
        packb(np.array([object()], dtype=object))
    with pytest.raises(ValueError, match="cannot carry"):
        packb(np.zeros(2, np.complex64))
    with pytest.raises(TypeError, match="cannot carry a value of type set"):
        packb({1, 2})


def _array_map(**fields: Any) -> bytes:
    import msgpack

    doc = {b"__ndarray__": True, b"data": b"\x00" * 8, b"dtype": "<f4", b"shape": [2]}
    doc.update({k.encode(): v for k, v in fields.items()})
    return msgpack.packb(doc)


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (b"", "not a valid openpi message"),
        (b"\xc1", "not a valid openpi message"),
        (b"\x92\x01", "not a valid openpi message"),  # truncated array
        (_array_map(shape=[3]), "do not fill"),
        (_array_map(shape=[-2]), "shape must be"),
        (_array_map(shape="2"), "shape must be"),
        (_array_map(dtype="|O"), "not accepted"),
        (_array_map(dtype="|V8", shape=[1]), "not accepted"),
        (_array_map(dtype="no such dtype"), "unknown dtype"),
        (_array_map(dtype=7), "dtype must be a string"),
        (_array_map(data="text"), "data must be bytes"),
        (b"\x91" * 100_000 + b"\x00", "not a valid openpi message"),  # nested far too deep
    ],
)
def test_hostile_bytes_raise_ProtocolException_only(raw: bytes, words: str) -> None:
    with pytest.raises(ProtocolException, match=words):
        unpackb(raw)


def test_received_arrays_are_read_only_views_as_in_openpi() -> None:
    out = unpackb(packb(np.arange(4, dtype=np.float32)))
    assert not out.flags.writeable
