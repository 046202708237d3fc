"""The twelve element dtypes rlmesh transports (DT-1..DT-4).

Names are lowercase numpy names; the wire codes are stable. All wire data is
little-endian.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = [
    "DTYPE_CODES",
    "DTYPE_NAMES",
    "INTEGER_DTYPES",
    "FLOAT_DTYPES",
    "dtype_name",
    "dtype_width",
    "np_dtype",
]

#: name -> wire code (DT-1); 0 means "unspecified".
DTYPE_CODES: dict[str, int] = {
    "bool": 1,
    "uint8": 2,
    "uint16": 3,
    "uint32": 4,
    "uint64": 5,
    "int8": 6,
    "int16": 7,
    "int32": 8,
    "int64": 9,
    "float16": 10,
    "float32": 11,
    "float64": 12,
}
DTYPE_NAMES: tuple[str, ...] = tuple(DTYPE_CODES)
INTEGER_DTYPES = frozenset(
    {"uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"}
)
FLOAT_DTYPES = frozenset({"float16", "float32", "float64"})

# Little-endian numpy dtypes, built once (the wire is little-endian, DT-2). On a
# little-endian host these are the native dtypes, so buffers export plain struct
# formats ("d", not "<d") and no byte swapping ever happens.
_NP: dict[str, np.dtype[Any]] = {
    name: np.dtype(name)
    if sys.byteorder == "little" or name == "bool"
    else np.dtype(name).newbyteorder("<")
    for name in DTYPE_NAMES
}
_BUILTINS: dict[Any, str] = {float: "float64", int: "int64", bool: "bool"}


def dtype_name(dtype: Any) -> str:
    """Normalize a dtype-like (DT-3) to one of the twelve names.

    Accepts a name string (case-insensitive), a numpy dtype or scalar type, a
    torch/jax dtype object (last dotted segment of ``str(dtype)``), or the
    builtins ``float``/``int``/``bool``.

    Raises:
        ValueError: unknown dtype, or bfloat16/complex (not representable, DT-4).

    >>> dtype_name("Float32"), dtype_name(np.uint8), dtype_name(float)
    ('float32', 'uint8', 'float64')
    """
    if isinstance(dtype, str):
        name = dtype.strip().lower()
    elif dtype in _BUILTINS:
        name = _BUILTINS[dtype]
    elif isinstance(dtype, np.dtype):
        name = dtype.name
    elif isinstance(dtype, type) and issubclass(dtype, np.generic):
        name = np.dtype(dtype).name
    else:
        name = getattr(dtype, "name", None) or str(dtype).rsplit(".", 1)[-1]
        name = str(name).lower()
    if name in ("bool_", "bool8"):
        name = "bool"
    if name in _NP:
        return name
    if name == "bfloat16":
        raise ValueError("bfloat16 is not representable in rlmesh; cast to float32 first")
    if name.startswith("complex"):
        raise ValueError(f"{name} is not representable in rlmesh; split into real/imag float parts")
    raise ValueError(f"unsupported dtype {dtype!r}; expected one of {list(DTYPE_NAMES)}")


def np_dtype(name: str) -> np.dtype[Any]:
    """The little-endian numpy dtype for one of the twelve names."""
    try:
        return _NP[name]
    except KeyError:
        return _NP[dtype_name(name)]


def dtype_width(name: str) -> int:
    """Bytes per element (DT-2)."""
    return np_dtype(name).itemsize
