"""Checks and helpers of :mod:`rlmesh.spaces._spec`: shapes, exact ints, declared sizes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._dtypes import np_dtype

__all__ = [
    "MAX_SPACE_ELEMENTS",
    "_all_same",
    "_check_declared_elements",
    "_exact_int",
    "_fail_inf",
    "_freeze",
    "_int_range",
    "_is_float",
    "_shape",
]

#: Most elements one space read from a peer may declare (``_from_dict``: a contract in a
#: Welcome or a Bind), and the longest Text. 2**26 float32 elements are 256 MiB, the whole
#: default frame: a value of a larger space could hardly travel, while a 4k RGB image
#: (25 M elements) still fits with room. Checked on the declared shape alone, before
#: anything is built (issue 28).
MAX_SPACE_ELEMENTS = 1 << 26


def _shape(shape: Any, *, kind: str, allow_rank0: bool) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        dims = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(
            f"{kind} shape must be an int or a sequence of ints, got {shape!r}"
        ) from None
    for d, raw in zip(dims, shape, strict=False):
        if isinstance(raw, float) and not float(raw).is_integer():
            raise TypeError(f"{kind} shape entries must be integers, got {shape!r}")
        if d <= 0:
            raise ValueError(f"{kind} shape dimensions must be positive, got {list(dims)}")
    if not dims and not allow_rank0:
        raise ValueError(f"{kind} needs a shape of rank >= 1, got ()")
    return dims


def _int_range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(np_dtype(dtype))
    return int(info.min), int(info.max)


def _is_float(x: Any) -> bool:
    return isinstance(x, (float, np.floating))


def _check_declared_elements(kind: str, shape: Any) -> None:
    """A peer's declared shape: a list of at most 64 ints whose product is within the limit."""
    if not isinstance(shape, (list, tuple)) or len(shape) > 64:
        raise ValueError(f"{kind} shape must be a list of at most 64 ints, got {str(shape)[:80]}")
    numel = 1
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int):
            raise ValueError(f"{kind} shape entries must be integers, got {str(shape)[:80]}")
        numel *= max(d, 0)
        if numel > MAX_SPACE_ELEMENTS:
            raise ValueError(
                f"{kind} shape {list(shape)} declares more than the limit of {MAX_SPACE_ELEMENTS} "
                "elements per space (MAX_SPACE_ELEMENTS)"
            )


def _all_same(a: np.ndarray[Any, Any]) -> bool:
    flat = a.reshape(-1)
    return bool(flat.size == 0 or (flat == flat[0]).all())


def _fail_inf(side: str) -> Any:
    raise ValueError(f"Box {side} bounds of an integer dtype must be finite element-wise")


def _exact_int(x: Any, what: str) -> int:
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if _is_float(x) and math.isfinite(x) and float(x).is_integer():
        return int(x)
    raise TypeError(f"{what} must be an integer, got {x!r}")


def _freeze(x: Any) -> Any:
    if isinstance(x, dict):
        return tuple((k, _freeze(v)) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    return x
