"""``rlmesh.Tensor``: the immutable transport tensor of the dependency-free clients (TEN-1..7).

A ``Tensor`` is a validated container (dtype, shape, C-contiguous little-endian
storage), not an array library: no math, slicing or broadcasting. It exports its
memory without copying (``numpy.asarray(t)``, ``t.buffer``, DLPack) and copies on
import (the constructor, :meth:`Tensor.from_dlpack`).

Internally the storage is a read-only numpy array; tensors decoded off the wire
are views of the frame buffer they arrived in, so the plain clients pay no copy
beyond the one from the kernel.

>>> t = Tensor(bytes(24), [2, 3], "float32")
>>> t
Tensor(dtype='float32', shape=[2, 3], bytes=24)
>>> import numpy as np
>>> np.asarray(t).shape
(2, 3)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._dtypes import dtype_name, np_dtype

__all__ = ["Tensor"]

_ALIGN = 64  # storage allocated here is 64-byte aligned (TEN-1), so XLA/DLPack can share it


def aligned_empty(nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A fresh writable uint8 buffer of ``nbytes`` whose data pointer is 64-byte aligned."""
    raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN
    return raw[offset : offset + nbytes]


class Tensor:
    """An immutable, validated transport tensor.

    Args:
        buffer: ``bytes`` or any object with the buffer protocol or ``tobytes()``;
            its bytes are copied into fresh aligned storage.
        shape: The tensor shape (non-negative ints).
        dtype: One of the twelve rlmesh dtypes (name, numpy dtype, ...).

    Raises:
        TypeError: ``buffer`` exposes no bytes.
        ValueError: byte length does not match ``shape`` and ``dtype``, or unknown dtype.
        OverflowError: the element count overflows.
    """

    __slots__ = ("__weakref__", "_a")

    _a: np.ndarray[Any, Any]

    def __init__(self, buffer: Any, shape: Sequence[int], dtype: Any) -> None:
        try:
            name = dtype_name(dtype)
        except ValueError as exc:
            raise ValueError(f"unsupported tensor dtype {dtype!r}: {exc}") from None
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims):
            raise ValueError(f"tensor shape must be non-negative, got {dims}")
        numel = math.prod(dims)
        dt = np_dtype(name)
        if numel > sys.maxsize // max(dt.itemsize, 1):
            raise OverflowError(f"tensor element count overflows for shape {dims}")
        try:
            src = memoryview(buffer).cast("B")
        except TypeError:
            tobytes = getattr(buffer, "tobytes", None)
            if tobytes is None:
                raise TypeError(
                    f"Tensor buffer must be bytes-like or have tobytes(), got {type(buffer).__name__}"
                ) from None
            src = memoryview(tobytes()).cast("B")
        expected = numel * dt.itemsize
        if src.nbytes != expected:
            raise ValueError(
                f"tensor byte length mismatch: expected {expected} bytes for shape {dims} "
                f"and dtype '{name}', got {src.nbytes}"
            )
        storage = aligned_empty(expected)
        storage[:] = np.frombuffer(src, dtype=np.uint8)
        arr = storage.view(dt).reshape(dims)
        arr.flags.writeable = False
        self._a = arr

    @classmethod
    def _wrap(cls, array: np.ndarray[Any, Any]) -> Tensor:
        """Adopt a C-contiguous little-endian array without copying (internal)."""
        self = object.__new__(cls)
        view = array.view()
        view.flags.writeable = False
        self._a = view
        return self

    @classmethod
    def from_dlpack(cls, obj: Any) -> Tensor:
        """Import any DLPack producer (or capsule) as a Tensor; always copies (TEN-6).

        Raises:
            TypeError: ``obj`` has no ``__dlpack__`` and is not a DLPack capsule, or
                the capsule was already consumed (CNF2-B6).
            ValueError: the data is not on the CPU (only CPU tensors import).
        """
        source: Any
        if type(obj).__name__ == "PyCapsule":
            device = _capsule_device(obj)
            source = _CapsuleHolder(obj)
        else:
            if not callable(getattr(obj, "__dlpack__", None)):
                raise TypeError(
                    f"Tensor.from_dlpack needs an object with __dlpack__ (a DLPack producer) or a DLPack "
                    f"capsule, got {type(obj).__name__}"
                )
            probe = getattr(obj, "__dlpack_device__", None)
            device = int(probe()[0]) if callable(probe) else _DL_CPU
            source = obj
        if device != _DL_CPU:
            raise ValueError(
                f"Tensor.from_dlpack imports only CPU data; this producer is on DLPack device type {device} "
                "-- move it to the CPU first (e.g. .cpu())"
            )
        try:
            arr = np.from_dlpack(source)
        except BufferError as exc:  # numpy's word for "not a CPU buffer it can read"
            raise ValueError(f"Tensor.from_dlpack imports only CPU data: {exc}") from None
        except (AttributeError, RuntimeError, ValueError) as exc:
            raise TypeError(
                f"Tensor.from_dlpack could not import {type(obj).__name__}: {exc}"
            ) from None
        name = dtype_name(arr.dtype)
        return cls._wrap(_aligned_copy(np.asarray(arr, dtype=np_dtype(name))))

    # -- properties -----------------------------------------------------------------

    @property
    def shape(self) -> list[int]:
        return list(self._a.shape)

    @property
    def dtype(self) -> str:
        return dtype_name(self._a.dtype)

    @property
    def ndim(self) -> int:
        return self._a.ndim

    @property
    def size(self) -> int:
        return int(self._a.size)

    @property
    def nbytes(self) -> int:
        return int(self._a.nbytes)

    @property
    def strides(self) -> list[int]:
        return list(self._a.strides)

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def buffer(self) -> memoryview:
        """A read-only N-D typed memoryview of the storage (zero-copy, TEN-3).

        Formats are exactly ``? b B h H i I q Q e f d`` (int64 is ``q``, uint64 is
        ``Q`` on every platform); shape and C-order strides match the tensor.
        """
        return _typed_view(self._a)

    # -- methods --------------------------------------------------------------------

    def is_contiguous(self) -> bool:
        return bool(self._a.flags.c_contiguous)

    def reshape(self, shape: Sequence[int]) -> Tensor:
        """A view with a new shape (at most one ``-1``); numel must match."""
        dims = [int(d) for d in shape]
        if dims.count(-1) > 1:
            raise ValueError("reshape accepts at most one -1 dimension")
        known = math.prod(d for d in dims if d != -1)
        if -1 in dims:
            if known == 0 or self._a.size % known:
                raise ValueError(f"cannot reshape tensor of {self._a.size} elements into {dims}")
            dims[dims.index(-1)] = self._a.size // known
        if math.prod(dims) != self._a.size:
            raise ValueError(f"cannot reshape tensor of {self._a.size} elements into {dims}")
        return Tensor._wrap(self._a.reshape(dims))

    def copy(self) -> Tensor:
        """A tensor with fresh storage."""
        return Tensor._wrap(_aligned_copy(self._a))

    def tobytes(self) -> bytes:
        """The C-order bytes (a copy)."""
        return self._a.tobytes()

    def numpy(self) -> np.ndarray[Any, Any]:
        """A writable numpy copy (same as ``rlmesh.numpy.asarray``)."""
        out: np.ndarray[Any, Any] = self._a.copy()
        return out

    def tolist(self) -> Any:
        return self._a.tolist()

    # -- interop --------------------------------------------------------------------

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        a = self._a
        if dtype is not None and np.dtype(dtype) != a.dtype:
            if copy is False:
                raise ValueError("a dtype conversion needs a copy, but copy=False was requested")
            return a.astype(dtype)
        if copy:
            out: np.ndarray[Any, Any] = a.copy()
            return out
        return a

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return self._a.__array_interface__

    def __buffer__(self, flags: int) -> memoryview:  # Python >= 3.12 buffer protocol
        if flags & 0x1:  # PyBUF_WRITABLE
            raise BufferError("rlmesh.Tensor is read-only")
        return _typed_view(self._a)

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        if stream is not None:
            raise BufferError("rlmesh.Tensor lives on the CPU; stream must be None")
        if dl_device is not None and tuple(dl_device) != (1, 0):
            raise BufferError(
                f"rlmesh.Tensor can only export to the CPU device (1, 0), got {dl_device}"
            )
        src = _aligned_copy(self._a) if copy else self._a
        if copy:
            src.flags.writeable = True
        kwargs: dict[str, Any] = {}
        if max_version is not None:
            kwargs["max_version"] = max_version
        try:
            return src.__dlpack__(**kwargs)
        except (TypeError, BufferError):
            # numpy < 2.1 cannot flag a read-only export: hand out a private copy instead.
            return _aligned_copy(self._a).__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tensor):
            return NotImplemented
        return (
            self._a.dtype == other._a.dtype
            and self._a.shape == other._a.shape
            and bool(np.array_equal(self._a, other._a))
        )

    __hash__ = None  # type: ignore[assignment]

    def _scalar(self) -> Any:
        if self._a.size != 1:
            raise TypeError(
                f"only one-element tensors convert to Python scalars, got shape {self.shape}"
            )
        return self._a.reshape(()).item()

    def __float__(self) -> float:
        return float(self._scalar())

    def __int__(self) -> int:
        return int(self._scalar())

    def __index__(self) -> int:
        if self._a.dtype.kind not in "iub":
            raise TypeError(f"a {self.dtype} tensor cannot be used as an index")
        return int(self._scalar())

    def __getitem__(self, key: Any) -> Any:
        raise TypeError(
            "rlmesh.Tensor does not support indexing; convert it with rlmesh.numpy.asarray(t) "
            "(or numpy.asarray(t)), or use a flavour whose values are arrays: rlmesh.numpy.RemoteEnv, "
            "or rlmesh.gymnasium.RemoteEnv for Gymnasium tools"
        )

    def __iter__(self) -> Any:
        raise TypeError(
            "rlmesh.Tensor is not iterable; convert it with rlmesh.numpy.asarray(t), or use "
            "rlmesh.numpy.RemoteEnv / rlmesh.gymnasium.RemoteEnv, whose values are numpy arrays"
        )

    def __len__(self) -> int:
        if self._a.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return int(self._a.shape[0])

    def __repr__(self) -> str:
        return f"Tensor(dtype='{self.dtype}', shape={self.shape}, bytes={self.nbytes})"

    def __reduce__(self) -> Any:
        return (Tensor, (self._a.tobytes(), self.shape, self.dtype))


def _aligned_copy(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    storage = aligned_empty(a.nbytes)
    out: np.ndarray[Any, Any] = storage.view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _typed_view(a: np.ndarray[Any, Any]) -> memoryview:
    """``a.data`` with 8-byte integers exported as long long (``q``/``Q``), not ``l``/``L`` (CNF2-A10)."""
    if a.dtype.kind in "iu" and a.dtype.itemsize == 8:
        a = a.view(np.longlong if a.dtype.kind == "i" else np.ulonglong)
    return a.data


_DL_CPU = 1  # DLDeviceType kDLCPU


def _capsule_device(capsule: Any) -> int:
    """The DLPack device type of an unconsumed capsule; a consumed one is a TypeError."""
    import ctypes

    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.argtypes, is_valid.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_int
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.argtypes, get_pointer.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_void_p
    word = ctypes.sizeof(ctypes.c_void_p)
    # DLManagedTensor starts with DLTensor{void* data; DLDevice device}; the versioned struct
    # puts {version, manager_ctx, deleter, flags} (4 words) before its DLTensor.
    for name, offset in ((b"dltensor", word), (b"dltensor_versioned", 8 + 2 * word + 8 + word)):
        if is_valid(capsule, name):
            base = get_pointer(capsule, name)
            return int(ctypes.c_int32.from_address(base + offset).value)
    raise TypeError(
        "Tensor.from_dlpack got a DLPack capsule that was already consumed (a capsule imports once); "
        "ask the producer for a fresh one"
    )


class _CapsuleHolder:
    """Present a raw DLPack capsule to ``numpy.from_dlpack``."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)
