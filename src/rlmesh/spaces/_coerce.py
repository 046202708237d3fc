"""One leaf value in its spec's dtype: the coercion rules every encoder applies (VAL-10..13).

The encoders of :mod:`rlmesh.spaces._values` walk a value's tree; at each leaf they
call these:

- :func:`to_array`: any array-like as an ndarray (a ``rlmesh.Tensor``'s own array, a
  framework tensor moved to the host), flagged when it came from a Tensor, which is
  never coerced (VAL-10);
- :func:`coerce`: an array in another dtype converted under VAL-11 (no wraparound;
  floats into integers only when integral; no complex);
- :func:`to_int`: a Discrete value as a Python ``int`` (numpy and framework scalars,
  0-d arrays, integral floats: VAL-13);
- :func:`nan_check`: a NaN in a float array is a structural deviation (CNF-2), found
  with one BLAS call and scanned for only on a hit.

Errors start with the JSONPath they were given (``$.pos``; CNF-5).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._dtypes import FLOAT_DTYPES
from ..tensor import Tensor
from ._ranges import _first, _where

__all__ = ["c_vdot", "coerce", "describe", "nan_check", "to_array", "to_int"]


def _find_c_vdot() -> Callable[[Any, Any], Any]:
    """numpy's C ``vdot``, without the Python-level ``__array_function__`` dispatcher
    (one call less per checked value, issue 24); ``np.vdot`` where it cannot be found."""
    import importlib

    for name in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            fn = getattr(importlib.import_module(name), "vdot", None)
        except ImportError:
            continue
        if callable(fn):
            found: Callable[[Any, Any], Any] = fn
            return found
    return np.vdot  # pragma: no cover


c_vdot = _find_c_vdot()


def describe(v: Any) -> str:
    """``type repr`` of a value for an error message, the repr cut to 60 characters."""
    text = repr(v)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(v).__name__} {text}"


def to_array(v: Any, path: str, label: str) -> tuple[np.ndarray[Any, Any], bool]:
    """Any array-like as an ndarray; the flag says whether it came from a Tensor."""
    if isinstance(v, np.ndarray):
        return v, False
    if isinstance(v, Tensor):
        return v._a, True
    if isinstance(v, (str, bytes, Mapping)) or v is None:
        raise TypeError(f"{path}: {label} value must be array-like, got {describe(v)}")
    device = getattr(v, "device", None)
    if device is not None and str(device) != "cpu" and callable(getattr(v, "cpu", None)):
        v = v.cpu()  # a framework tensor on an accelerator is moved to the host (VAL-10)
    try:
        arr = np.asarray(v)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise TypeError(
            f"{path}: {label} value is not a rectangular numeric array ({exc})"
        ) from None
    return arr, False


def coerce(
    arr: np.ndarray[Any, Any], dt: np.dtype[Any], name: str, path: str
) -> np.ndarray[Any, Any]:
    """Convert ``arr`` to ``dt`` under VAL-11's rules (no wraparound, floats only if integral)."""
    src = arr.dtype
    kind = src.kind
    if kind == "c":
        raise ValueError(
            f"{path}: complex values are not representable in rlmesh; split them into real/imag float parts"
        )
    if kind not in "biuf":
        raise TypeError(f"{path}: value must be numeric for dtype {name}, got an array of {src}")
    if name in FLOAT_DTYPES:
        with np.errstate(over="ignore"):
            return arr.astype(dt)
    if kind == "f":
        if arr.size and not (np.isfinite(arr).all() and (arr == np.trunc(arr)).all()):
            raise ValueError(
                f"{path}: float value supplied for integer dtype {name} is not integral"
            )
    elif kind == "b" or np.can_cast(src, dt, "safe"):
        return arr.astype(dt)
    if name == "bool":
        lo, hi = 0, 1
    else:
        info = np.iinfo(dt)
        lo, hi = int(info.min), int(info.max)
    if arr.size and (int(arr.min()) < lo or int(arr.max()) > hi):
        what = "dtype bool (only 0 and 1)" if name == "bool" else f"integer dtype {name}"
        raise ValueError(f"{path}: value supplied for {what} is not representable in its range")
    return arr.astype(dt)


def nan_check(
    a: np.ndarray[Any, Any], path: str, label: str, numel: int, lanes: int | None
) -> None:
    # A sum of squares is NaN exactly when an element is NaN (no inf - inf can occur),
    # allocates nothing and runs in BLAS; only a hit pays for the exact scan.
    total = c_vdot(a, a)
    if total != total:
        mask = np.isnan(a)
        if mask.any():
            idx, lane = _where(_first(mask), numel, lanes)
            raise ValueError(f"{path}: {label} value contains NaN at element {idx}{lane}")


def to_int(v: Any, path: str) -> int:
    if isinstance(v, (bool, int, np.integer, np.bool_)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        if math.isfinite(v) and float(v).is_integer():
            return int(v)
        raise ValueError(f"{path}: Discrete value must be an integer, got {v!r}")
    if isinstance(v, Tensor):
        v = v._a
    ndim = getattr(v, "ndim", None)
    if ndim == 0 and callable(getattr(v, "item", None)):
        return to_int(v.item(), path)  # 0-d arrays and framework scalars (VAL-13)
    if ndim is not None:
        raise TypeError(
            f"{path}: Discrete value must be an integer, got an array of shape {tuple(v.shape)}"
        )
    if hasattr(v, "__index__") and not isinstance(v, (str, bytes)):
        return int(v.__index__())
    raise TypeError(f"{path}: Discrete value must be an integer, got {describe(v)}")
