"""rlmesh.Tensor (TEN-1..7): validated, immutable, zero-copy exports, copying imports."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rlmesh import Tensor


def test_construction_copies_and_validates_the_byte_length() -> None:
    raw = bytearray(np.arange(6, dtype=np.float32).tobytes())
    t = Tensor(raw, [2, 3], "float32")
    raw[:4] = b"\xff\xff\xff\xff"  # the tensor owns a copy
    assert np.asarray(t)[0, 0] == 0.0
    assert (t.shape, t.dtype, t.ndim, t.size, t.nbytes, t.strides, t.device) == (
        [2, 3],
        "float32",
        2,
        6,
        24,
        [12, 4],
        "cpu",
    )
    assert repr(t) == "Tensor(dtype='float32', shape=[2, 3], bytes=24)"
    with pytest.raises(
        ValueError, match="tensor byte length mismatch: expected 24 bytes for shape"
    ):
        Tensor(b"\x00" * 23, [2, 3], "float32")
    with pytest.raises(ValueError, match="unsupported tensor dtype"):
        Tensor(b"", [0], "complex64")
    with pytest.raises(TypeError, match="bytes-like"):
        Tensor(3.0, [1], "float64")


def test_storage_is_64_byte_aligned_and_read_only() -> None:
    t = Tensor(bytes(40), [5], "float64")
    view = np.asarray(t)
    assert view.ctypes.data % 64 == 0
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[0] = 1.0
    assert t.buffer.readonly and t.buffer.format == "d"


def test_numpy_views_share_memory_and_copies_do_not() -> None:
    t = Tensor(np.arange(4, dtype=np.int64).tobytes(), [4], "int64")
    assert np.shares_memory(np.asarray(t), np.asarray(t))
    copy = np.array(t, copy=True)
    assert copy.flags.writeable and not np.shares_memory(copy, np.asarray(t))
    assert np.asarray(t, dtype=np.float64).dtype == np.float64


def test_reshape_copy_tobytes_and_equality() -> None:
    t = Tensor(np.arange(6, dtype=np.uint8).tobytes(), [6], np.uint8)
    r = t.reshape([2, -1])
    assert r.shape == [2, 3] and np.shares_memory(np.asarray(r), np.asarray(t))
    assert t.is_contiguous() and r.is_contiguous()
    assert not Tensor._wrap(
        np.arange(6, dtype=np.uint8).reshape(2, 3).T
    ).is_contiguous()  # a strided view
    with pytest.raises(ValueError, match="cannot reshape"):
        t.reshape([4, -1])
    with pytest.raises(ValueError, match="at most one -1"):
        t.reshape([-1, -1])
    assert t.copy() == t and not np.shares_memory(np.asarray(t.copy()), np.asarray(t))
    assert t.tobytes() == bytes(range(6))
    assert pickle.loads(pickle.dumps(t)) == t


def test_dlpack_round_trip_copies_on_import() -> None:
    t = Tensor(np.arange(3, dtype=np.float32).tobytes(), [3], "float32")
    assert t.__dlpack_device__() == (1, 0)
    back = np.from_dlpack(t)
    assert np.array_equal(back, [0, 1, 2])
    imported = Tensor.from_dlpack(np.arange(3, dtype=np.int16))
    assert imported.dtype == "int16" and imported.shape == [3]
    with pytest.raises(BufferError, match="stream must be None"):
        t.__dlpack__(stream=1)
    with pytest.raises(BufferError, match="CPU device"):
        t.__dlpack__(dl_device=(2, 0))
