"""The metadata codec: info dicts, reset options and env metadata as msgpack values (MET-1).

Accepted values, after unwrapping (``_asdict`` for namedtuples, ``item()`` for
numpy scalars, ``.value`` (else ``.name``) for enums): ``None``, ``bool``,
``int``, ``float``, ``str``, ``bytes``, mappings with ``str`` keys, lists and
tuples (tuples become lists), and numpy arrays. Arrays travel as msgpack
extension type 1 and come back as writable arrays of the same dtype and shape
(DESIGN: "numpy arrays inside them travel as an extension type and come back as
arrays"); object arrays become lists. Ints beyond 64 bits become floats (MET-1).
Anything else raises ``TypeError`` pointing at :func:`rlmesh.sanitize_metadata`.

Ext type 1 payload: ``u8 dtype code | u8 ndim | ndim x u64 LE dims | raw LE bytes``.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np

from .._dtypes import DTYPE_CODES, dtype_name, np_dtype
from ..errors import ProtocolException
from ..spaces._peers import scalar_base

__all__ = ["EXT_NDARRAY", "MAX_METADATA_DEPTH", "ext_hook", "normalize", "normalize_info"]

#: Deepest nesting of lists and maps inside one metadata value (info dict, reset options,
#: env metadata). Deeper values (or a dict that contains itself) raise ``TypeError`` when
#: sent; a receiver refuses any header nested deeper than ``messages.MAX_HEADER_DEPTH``.
MAX_METADATA_DEPTH = 64

EXT_NDARRAY = 1
_CODE_TO_NAME = {v: k for k, v in DTYPE_CODES.items()}
_I64_MIN, _U64_MAX = -(2**63), 2**64 - 1
_SCALARS = (str, bool, float, bytes, type(None))


def _unsupported(value: Any, path: str) -> TypeError:
    where = f" at {path}" if path else ""
    return TypeError(
        f"value of type '{type(value).__name__}'{where} is not supported in RLMesh metadata; "
        "pass the dict through rlmesh.sanitize_metadata(...) to stringify unsupported values"
    )


def normalize(value: Any, path: str = "$", depth: int = 0) -> Any:
    """Convert a metadata/info value to codec-ready plain data (MET-1), strictly.

    Raises:
        TypeError: a value or key the codec cannot carry, or nesting deeper than
            :data:`MAX_METADATA_DEPTH`; the message names the path.
    """
    try:
        return _plain(value, depth)  # the common shapes, without building paths
    except _Slow:
        return _normalize(value, path, depth)  # anything else, or an error worded with its path


_FLAT = frozenset({str, bool, float, type(None)})


def normalize_info(info: Any) -> Any:
    """:func:`normalize` for a step's ``info``, which is sent at once: a dict that is plain
    already (``str`` keys, ``str``/``bool``/``float``/``None`` values, as most envs' info
    dicts are) is returned as it is, without a copy.

    >>> info = {"success": 0.0, "near_object": 0.25}
    >>> normalize_info(info) is info
    True
    """
    if type(info) is dict:
        flat = _FLAT
        for k, v in info.items():
            if type(k) is not str or type(v) not in flat:
                break
        else:
            return info
    return normalize(info)


class _Slow(Exception):
    """:func:`_plain` met a value it leaves to :func:`_normalize`."""


def _plain(value: Any, depth: int) -> Any:
    """:func:`normalize` for plain dicts (str keys), lists, scalars and numeric arrays."""
    tp = type(value)
    if tp in _SCALARS:
        return value
    if tp is int:
        if _I64_MIN <= value <= _U64_MAX:
            return value
        raise _Slow
    if depth >= MAX_METADATA_DEPTH:
        raise _Slow
    if tp is dict or (tp is not list and isinstance(value, Mapping)):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                raise _Slow
            out[k] = _plain(v, depth + 1)
        return out
    if tp is list or tp is tuple:
        return [_plain(v, depth + 1) for v in value]
    if tp is np.ndarray:
        if value.dtype.name in DTYPE_CODES:
            return value
        raise _Slow
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return _plain(value.item(), depth)
    raise _Slow


def _normalize(value: Any, path: str = "$", depth: int = 0) -> Any:
    tp = type(value)
    if tp in _SCALARS:
        return value
    if tp is int:
        return value if _I64_MIN <= value <= _U64_MAX else float(value)
    if depth >= MAX_METADATA_DEPTH and (
        tp is dict or tp is list or isinstance(value, (Mapping, tuple))
    ):
        raise TypeError(
            f"metadata nests deeper than {MAX_METADATA_DEPTH} levels at {path[:200]}"
            f"{'...' if len(path) > 200 else ''} (or contains itself); flatten it before sending"
        )
    if tp is dict or isinstance(value, Mapping):
        inner = depth + 1
        out: dict[str, Any] = {}
        for k, v in value.items():
            if type(k) is not str:
                if isinstance(k, str):
                    k = str(k)
                else:
                    raise TypeError(
                        f"metadata keys must be str, got {type(k).__name__} key {k!r} at {path}; "
                        "pass the dict through rlmesh.sanitize_metadata(...) to stringify keys"
                    )
            out[k] = _normalize(v, f"{path}.{k}", inner)
        return out
    if tp is list:
        return [_normalize(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, np.ndarray):
        return _normalize_array(value, path, depth)
    if isinstance(value, tuple):
        as_dict = getattr(value, "_asdict", None)
        if as_dict is not None:
            return _normalize(as_dict(), path, depth)
        return [_normalize(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, enum.Enum):
        try:
            return _normalize(value.value, path, depth)
        except TypeError:
            return value.name
    if isinstance(value, np.generic):
        return _normalize(value.item(), path, depth)
    base = scalar_base(value)  # subclasses of the scalar types (IntEnum was handled above)
    if base is not None:
        return _normalize(base(value), path, depth)  # an int past 64 bits becomes a float
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _normalize(tolist(), path, depth)
    item = getattr(value, "item", None)
    if callable(item):
        return _normalize(item(), path, depth)
    raise _unsupported(value, path)


def _normalize_array(a: np.ndarray[Any, Any], path: str, depth: int = 0) -> Any:
    if a.dtype.kind in "biuf":
        try:
            dtype_name(a.dtype)
        except ValueError:
            return _normalize(a.tolist(), path, depth)
        return a
    return _normalize(a.tolist(), path, depth)


def enc_hook(value: Any) -> Any:
    """msgspec hook: numpy arrays become ext type 1 (everything else was normalized)."""
    if isinstance(value, np.ndarray):
        name = dtype_name(value.dtype)
        arr = np.asarray(value, dtype=np_dtype(name))  # tobytes() is C order; 0-d stays 0-d
        head = struct.pack(f"<BB{arr.ndim}Q", DTYPE_CODES[name], arr.ndim, *arr.shape)
        return msgspec.msgpack.Ext(EXT_NDARRAY, head + arr.tobytes())
    if isinstance(value, np.generic):
        return value.item()
    raise _unsupported(value, "")


def ext_hook(code: int, data: memoryview) -> Any:
    """msgspec hook: decode ext type 1 into a fresh writable array; refuse anything else."""
    if code != EXT_NDARRAY:
        raise ProtocolException(f"unknown msgpack extension type {code} in metadata")
    if len(data) < 2:
        raise ProtocolException("truncated ndarray extension in metadata")
    dcode, ndim = data[0], data[1]
    name = _CODE_TO_NAME.get(dcode)
    if name is None:
        raise ProtocolException(f"unknown dtype code {dcode} in an ndarray extension")
    end = 2 + 8 * ndim
    if len(data) < end:
        raise ProtocolException("truncated ndarray extension shape in metadata")
    shape = struct.unpack_from(f"<{ndim}Q", data, 2)
    dt = np_dtype(name)
    count = 1
    for d in shape:
        count *= d
    if count * dt.itemsize != len(data) - end:
        raise ProtocolException(
            f"ndarray extension carries {len(data) - end} bytes; shape {list(shape)} of {name} needs "
            f"{count * dt.itemsize}"
        )
    return np.frombuffer(data[end:], dtype=dt).reshape(shape).copy()
