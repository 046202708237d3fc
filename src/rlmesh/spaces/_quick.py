"""One-call checks for float Boxes: structure, NaN and range in one pass.

The step path checks every observation (and action) of a float Box three ways: that it
is a canonical array already (dtype, shape, C order), that it holds no NaN (CNF-2) and
that it lies within its bounds (CNF-3). Done by the encoder and the range check apart,
that is two Python calls and five numpy calls per value, for a CartPole observation
more than the data is worth. Here it is one call: for a Box of at most :data:`SMALL`
elements one ``tolist()`` and a Python comparison per element (a NaN fails it too), for
larger ones or batches the numpy calls in one function (up to a few thousand elements a
clamp into the bounds and a byte comparison, past that two comparisons and reductions).
The check only says "this value is fine as it is"; anything out of the ordinary (another type or dtype, a NaN, a value
out of bounds) goes to the caller's ``otherwise``, the full encoder and range check,
which coerce the value or word the error and the warning exactly as before.

>>> import numpy as np
>>> from rlmesh.spaces import Box
>>> check = compile_quick_box(Box(-1.0, 1.0, (2,)).spec, otherwise=lambda v: "full path")
>>> value = np.array([0.5, -0.25], dtype=np.float32)
>>> check(value) is value
True
>>> check(np.array([0.5, 2.0], dtype=np.float32)), check(np.array([0.5, np.nan], np.float32))
('full path', 'full path')
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._dtypes import FLOAT_DTYPES
from ._coerce import c_vdot
from ._sample import box_bounds_in_dtype
from ._spec import SpaceSpec

__all__ = ["SMALL", "compile_quick_box"]

#: Largest float Box (elements) checked in Python; past it numpy's calls are the cheaper way.
SMALL = 16
_PREBROADCAST_MAX = 1 << 14  # bounds kept at the value's full shape up to this many elements
#: Bounded float Boxes up to this many elements are range-checked by clamping (below).
_CLAMP_MAX = 1 << 12


def _none(value: Any) -> None:
    return None


def compile_quick_box(
    spec: SpaceSpec,
    lanes: int | None = None,
    *,
    ranged: bool = True,
    otherwise: Callable[[Any], Any] = _none,
) -> Callable[[Any], Any] | None:
    """``f(value)``: ``value`` itself when it already is a canonical, NaN-free value of a
    float Box (``lanes``: a batch of them) within its bounds (``ranged``; else NaN-free is
    enough), else ``otherwise(value)``.

    Returns ``None`` for a space that is not a float Box.
    """
    if spec.kind != "box" or spec.dtype not in FLOAT_DTYPES:
        return None
    one = tuple(spec._shape)
    shape = one if lanes is None else (lanes, *one)
    dt = spec._np
    lo, hi = box_bounds_in_dtype(spec) if ranged else (None, None)
    if lanes is None and math.prod(one) <= SMALL:
        return _small(shape, dt, lo, hi, otherwise)
    return _large(shape, dt, lo, hi, otherwise)


def _small(
    shape: tuple[int, ...], dt: Any, lo: Any, hi: Any, otherwise: Callable[[Any], Any]
) -> Callable[[Any], Any]:
    numel = math.prod(shape)
    los, his = [-math.inf] * numel, [math.inf] * numel
    if lo is not None:
        # exact doubles of the dtype's bounds: comparing the value's doubles against them
        # is comparing in the Box's own dtype (CNF-3)
        los = np.broadcast_to(lo, shape).astype(np.float64).reshape(-1).tolist()
        his = np.broadcast_to(hi, shape).astype(np.float64).reshape(-1).tolist()
    bounds = list(zip(los, his))
    flat = len(shape) == 1  # ``tolist()`` is flat already

    def check(v: Any) -> Any:
        if type(v) is np.ndarray and v.dtype == dt and v.shape == shape and v.flags.c_contiguous:
            for x, (lo_i, hi_i) in zip(v.tolist() if flat else v.reshape(-1).tolist(), bounds):
                if not lo_i <= x <= hi_i:  # a NaN fails this too
                    return otherwise(v)
            return v
        return otherwise(v)

    return check


def _large(
    shape: tuple[int, ...], dt: Any, lo: Any, hi: Any, otherwise: Callable[[Any], Any]
) -> Callable[[Any], Any]:
    vdot = c_vdot  # numpy's C vdot, without the dispatcher in front of it
    need_lo = need_hi = False
    if lo is not None:
        need_lo, need_hi = bool((lo > -np.inf).any()), bool((hi < np.inf).any())
        if lo.shape != shape and math.prod(shape) <= _PREBROADCAST_MAX:
            # bounds of the value's own shape skip numpy's broadcasting setup
            lo = np.ascontiguousarray(np.broadcast_to(lo, shape))
            hi = np.ascontiguousarray(np.broadcast_to(hi, shape))
    less, greater, anyof = np.less, np.greater, np.logical_or.reduce  # C: no Python-level call
    if (need_lo or need_hi) and math.prod(shape) <= _CLAMP_MAX:
        return _clamped(shape, dt, lo, hi, otherwise)

    def check(v: Any) -> Any:
        if type(v) is np.ndarray and v.dtype == dt and v.shape == shape and v.flags.c_contiguous:
            total = vdot(v, v)  # NaN exactly when an element is NaN (a sum of squares)
            if total == total and not (
                (need_lo and anyof(less(v, lo), axis=None))
                or (need_hi and anyof(greater(v, hi), axis=None))
            ):
                return v
        return otherwise(v)

    return check


def _clamped(
    shape: tuple[int, ...], dt: Any, lo: Any, hi: Any, otherwise: Callable[[Any], Any]
) -> Callable[[Any], Any]:
    """:func:`_large` for a small bounded batch: clamped into its bounds, an in-range value
    is itself, byte for byte (``maximum``/``minimum`` return one of their operands), so two
    ufunc calls and a byte comparison replace two comparisons and two reductions.

    A value the clamp changes is out of range; one it keeps is within (a ``-0.0`` clamped
    to a bound of ``0.0`` changes bytes: that value merely takes the full path, which
    accepts it). A NaN survives the clamp, so the sum of squares still finds it. An
    unbounded side's bound is an infinity: clamping at it changes no value.
    """
    vdot = c_vdot
    top, bottom = np.minimum, np.maximum

    def check(v: Any) -> Any:
        if type(v) is np.ndarray and v.dtype == dt and v.shape == shape and v.flags.c_contiguous:
            total = vdot(v, v)  # NaN exactly when an element is NaN (a sum of squares)
            if total == total and top(bottom(v, lo), hi).tobytes() == v.tobytes():
                return v
        return otherwise(v)

    return check
