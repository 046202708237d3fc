"""Range checks (CNF-3): compiled once per spec, skipped when nothing can be out of range.

Structural problems (CNF-2) are the encoder's job (``_values``); this module only
judges canonical values the encoder produced: Box elements against their bounds
(compared in the Box dtype, bounds rounded to it as Gymnasium stores them) and
Text length and charset. Each check appends ``(path, detail)`` pairs; the caller
applies its validation policy (CNF-4).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._dtypes import FLOAT_DTYPES, INTEGER_DTYPES
from ._sample import box_bounds_in_dtype
from ._spec import SpaceSpec

__all__ = ["RangeCheck", "compile_range_check"]

RangeCheck = Callable[[Any], "list[tuple[str, str]]"]
_Check = Callable[[Any, "list[tuple[str, str]]"], None]
_PREBROADCAST_MAX = 1 << 14  # elements per bound array kept at the value's full (lanes, *shape)


def _first(mask: np.ndarray[Any, Any]) -> int:
    return int(np.flatnonzero(mask.reshape(-1))[0])


def _where(idx: int, numel: int, lanes: int | None) -> tuple[int, str]:
    if lanes is None:
        return idx, ""
    return idx % numel, f" (lane {idx // numel})"


def _check_lanes(lanes: int | None) -> int | None:
    if lanes is None:
        return None
    if isinstance(lanes, bool) or not isinstance(lanes, (int, np.integer)) or lanes < 1:
        raise ValueError(f"lanes must be a positive int or None, got {lanes!r}")
    return int(lanes)


# -- range checks (CNF-3) ---------------------------------------------------------------


def _range_box(spec: SpaceSpec, path: str, lanes: int | None) -> _Check | None:
    lo, hi = box_bounds_in_dtype(spec)
    if lo is None:
        return None
    name = spec.dtype
    if name in FLOAT_DTYPES:
        lo_bound, hi_bound = -np.inf, np.inf
    elif name in INTEGER_DTYPES:
        info = np.iinfo(spec._np)
        lo_bound, hi_bound = info.min, info.max
    else:
        lo_bound, hi_bound = False, True
    need_lo, need_hi = bool((lo > lo_bound).any()), bool((hi < hi_bound).any())
    if not (need_lo or need_hi):
        return None  # e.g. Box(0, 255, dtype=uint8): every value of the dtype is inside
    numel = math.prod(spec._shape)
    if lo.ndim == 0 and hi.ndim == 0:
        lo_s, hi_s = lo[()], hi[()]

        amin, amax = np.minimum.reduce, np.maximum.reduce  # C, unlike ndarray.min's Python wrapper

        def quick(a: np.ndarray[Any, Any]) -> bool:
            if not a.size:
                return True
            return (not need_lo or amin(a, axis=None) >= lo_s) and (
                not need_hi or amax(a, axis=None) <= hi_s
            )

    elif lanes is None and numel <= 16 and name in FLOAT_DTYPES:
        # Tiny elementwise boxes (CartPole-like): comparing a handful of Python floats
        # against only the finite bounds beats four numpy calls per step.
        lo_f, hi_f = (
            np.broadcast_to(lo, spec._shape).reshape(-1),
            np.broadcast_to(hi, spec._shape).reshape(-1),
        )
        pairs = [
            (i, float(lo_f[i]), float(hi_f[i]))
            for i in range(numel)
            if np.isfinite(lo_f[i]) or np.isfinite(hi_f[i])
        ]

        def quick(a: np.ndarray[Any, Any]) -> bool:
            flat = a.reshape(-1).tolist()
            for i, lo_i, hi_i in pairs:  # noqa: SIM110 - a plain loop beats all(genexpr) here
                if not lo_i <= flat[i] <= hi_i:
                    return False
            return True

    else:
        full = (lanes, *spec._shape) if lanes is not None else tuple(spec._shape)
        if lo.shape != full and math.prod(full) <= _PREBROADCAST_MAX:
            # comparing against bounds of the value's own shape skips numpy's broadcasting setup
            lo_q = np.ascontiguousarray(np.broadcast_to(lo, full))
            hi_q = np.ascontiguousarray(np.broadcast_to(hi, full))
        else:
            lo_q, hi_q = lo, hi
        less, greater, anyof = (
            np.less,
            np.greater,
            np.logical_or.reduce,
        )  # all C: no Python-level call

        def quick(a: np.ndarray[Any, Any]) -> bool:
            return not (
                (need_lo and anyof(less(a, lo_q), axis=None))
                or (need_hi and anyof(greater(a, hi_q), axis=None))
            )

    def check(a: np.ndarray[Any, Any], out: list[tuple[str, str]]) -> None:
        if quick(a):
            return
        below, above = a < lo, a > hi
        i = _first(below | above)
        side = "below low bound" if below.reshape(-1)[i] else "above high bound"
        idx, lane = _where(i, numel, lanes)
        out.append((path, f"Box value at element {idx} out of bounds: {side}{lane}"))

    check.quick = quick  # type: ignore[attr-defined]  # lets a root Box skip a call level
    return check


def _range_text(spec: SpaceSpec, path: str, lanes: int | None) -> _Check:
    d = spec._d
    mn, mx, charset = d["min_length"], d["max_length"], d["charset"]
    allowed = frozenset(charset)

    def one(s: str, where: str, out: list[tuple[str, str]]) -> None:
        if not mn <= len(s) <= mx:
            out.append((path, f"Text value length {len(s)} outside [{mn}, {mx}]{where}"))
        if allowed and not allowed.issuperset(s):
            i, c = next((i, c) for i, c in enumerate(s) if c not in allowed)
            out.append((path, f"Text value character {c!r} at index {i} not in charset{where}"))

    if lanes is None:
        return lambda s, out: one(s, "", out)

    def batch(v: list[str], out: list[tuple[str, str]]) -> None:
        for i, s in enumerate(v):
            one(s, f" (lane {i})", out)

    return batch


def _range(spec: SpaceSpec, path: str, lanes: int | None) -> _Check | None:
    kind = spec.kind
    if kind == "box":
        return _range_box(spec, path, lanes)
    if kind == "text":
        return _range_text(spec, path, lanes)
    if kind == "dict" or kind == "tuple":
        kids = [
            (k, _range(v, f"{path}.{k}" if kind == "dict" else f"{path}[{k}]", lanes))
            for k, v in spec._children()
        ]
        checks = [(k, c) for k, c in kids if c is not None]  # k: a Dict key or a Tuple index
        if not checks:
            return None

        def children_check(v: Any, out: list[tuple[str, str]]) -> None:
            for k, c in checks:
                c(v[k], out)

        return children_check
    return None  # discrete / multi_binary / multi_discrete: all deviations are structural


def compile_range_check(spec: SpaceSpec, *, lanes: int | None = None) -> RangeCheck | None:
    """Compile the CNF-3 range check for canonical values of ``spec``.

    Returns ``None`` when no range deviation is possible (an unbounded float Box,
    ``Box(0, 255, dtype="uint8")``, Discrete ...), so hot paths can skip it.
    Otherwise ``f(canonical_value)`` returns a list of ``(path, detail)`` pairs,
    empty when the value is within range. Structural problems are the
    encoder's job; run this only on what the encoder returned.

    >>> from rlmesh.spaces import Box, Text
    >>> compile_range_check(Box(0, 255, (2,), "uint8").spec) is None
    True
    >>> compile_range_check(Text(3, min_length=2).spec)("abcd")
    [('$', 'Text value length 4 outside [2, 3]')]
    """
    check = _range(spec, "$", _check_lanes(lanes))
    if check is None:
        return None
    run = check
    quick = getattr(check, "quick", None)
    if quick is not None:  # a Box at the root: the common in-range case is one call

        def box_check(value: Any) -> list[tuple[str, str]]:
            if quick(value):
                return []
            out: list[tuple[str, str]] = []
            run(value, out)
            return out

        box_check.quick = quick  # type: ignore[attr-defined]  # a hot caller may test in range first
        return box_check

    def range_check(value: Any) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        run(value, out)
        return out

    return range_check
