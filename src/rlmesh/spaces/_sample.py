"""Sampling (SMP-1..SMP-4): one compiled sampler per spec, driven by a numpy ``Generator``.

``compile_sampler(spec)`` returns ``f(rng) -> canonical tree`` (the same value
format the encoder produces, see ``_values``). The distributions are the
contract (SMP-2/SMP-3); the exact random streams are not:

- Box, per element: both bounds finite -> uniform on ``[low, high]``; only
  ``low`` -> ``low + Exp(1)``; only ``high`` -> ``high - Exp(1)``; neither ->
  standard normal. Integer dtypes: uniform integers on ``[low, high]``
  (unbounded sides: the dtype range, int64/uint64 clamped to +-2**53). Every
  sample is clipped to the bounds *as rounded to the dtype*, the domain the
  range check compares in, so ``contains(sample())`` always holds.
- Discrete: uniform on ``[start, start + n)``. MultiBinary: fair bits.
  MultiDiscrete: uniform on ``[start, start + nvec)`` per element.
- Text: length uniform on ``[min_length, max_length]``, characters uniform from
  the charset, or from letters + digits + ``" .,!?"`` when unrestricted.
- Dict / Tuple: children drawn from the same generator in declared order.

>>> import numpy as np
>>> from rlmesh.spaces._spec import SpaceSpec
>>> f = compile_sampler(SpaceSpec._discrete(3, start=-1))
>>> f(np.random.default_rng(0)) in (-1, 0, 1)
True
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable
from typing import Any

import numpy as np

from .._dtypes import FLOAT_DTYPES, INTEGER_DTYPES
from ._spec import SpaceSpec

__all__ = ["DEFAULT_TEXT_CHARSET", "box_bounds_in_dtype", "compile_sampler"]

Sampler = Callable[[np.random.Generator], Any]

#: Characters an unrestricted Text samples from (SMP-3).
DEFAULT_TEXT_CHARSET = string.ascii_letters + string.digits + " .,!?"
_CLAMP_53 = 2**53


def box_bounds_in_dtype(spec: SpaceSpec) -> tuple[Any, Any]:
    """Box bounds as values of the box dtype, ``None`` for a side that is open.

    Float bounds are rounded to the dtype (as Gymnasium stores them), so a value
    of the dtype is in bounds exactly when it compares inside these. Integer and
    bool bounds are exact already.
    """
    lo, hi = spec._bounds_arrays()
    if lo is None:
        return None, None
    dt = spec._np
    if spec.dtype in FLOAT_DTYPES:
        with np.errstate(over="ignore"):
            lo_d, hi_d = np.asarray(lo).astype(dt), np.asarray(hi).astype(dt)
        return lo_d, hi_d
    return np.asarray(lo, dtype=dt), np.asarray(hi, dtype=dt)


def _box_float(spec: SpaceSpec) -> Sampler:
    shape, dt = tuple(spec._shape), spec._np
    lo, hi = spec._bounds_arrays()
    if lo is None:

        def normal(rng: np.random.Generator) -> Any:
            return np.asarray(rng.standard_normal(size=shape).astype(dt), order="C")

        return normal
    lo_b, hi_b = np.broadcast_to(lo, shape), np.broadcast_to(hi, shape)
    lo_ok, hi_ok = np.isfinite(lo_b), np.isfinite(hi_b)
    both, lo_only, hi_only = lo_ok & hi_ok, lo_ok & ~hi_ok, hi_ok & ~lo_ok
    lo_f = np.where(lo_ok, lo_b, 0.0)  # finite stand-ins so unused lanes never make NaN
    hi_f = np.where(hi_ok, hi_b, 0.0)
    lo_d, hi_d = box_bounds_in_dtype(spec)
    any_both, any_lo, any_hi = bool(both.any()), bool(lo_only.any()), bool(hi_only.any())
    any_none = bool((~lo_ok & ~hi_ok).any())

    def sample(rng: np.random.Generator) -> Any:
        out = np.zeros(shape, dtype=np.float64)
        if any_both:
            u = rng.random(size=shape)
            # (1-u)*low + u*high never overflows, unlike low + u*(high-low).
            np.copyto(out, (1.0 - u) * lo_f + u * hi_f, where=both)
        if any_lo:
            np.copyto(out, lo_f + rng.exponential(size=shape), where=lo_only)
        if any_hi:
            np.copyto(out, hi_f - rng.exponential(size=shape), where=hi_only)
        if any_none:
            np.copyto(out, rng.standard_normal(size=shape), where=~lo_ok & ~hi_ok)
        with np.errstate(over="ignore"):
            cast = out.astype(dt)
        return np.asarray(np.clip(cast, lo_d, hi_d), order="C")

    return sample


def _box_int(spec: SpaceSpec) -> Sampler:
    shape, dt = tuple(spec._shape), spec._np
    lo, hi = box_bounds_in_dtype(spec)
    if lo is None:
        info = np.iinfo(dt)
        lo = np.asarray(max(int(info.min), -_CLAMP_53), dtype=dt)
        hi = np.asarray(min(int(info.max), _CLAMP_53), dtype=dt)

    def sample(rng: np.random.Generator) -> Any:
        return np.asarray(rng.integers(lo, hi, size=shape, dtype=dt, endpoint=True), order="C")

    return sample


def _box_bool(spec: SpaceSpec) -> Sampler:
    shape = tuple(spec._shape)
    lo, hi = box_bounds_in_dtype(spec)
    lo_u = np.asarray(0 if lo is None else lo, dtype=np.uint8)
    hi_u = np.asarray(1 if hi is None else hi, dtype=np.uint8)

    def sample(rng: np.random.Generator) -> Any:
        bits = rng.integers(lo_u, hi_u, size=shape, dtype=np.uint8, endpoint=True)
        return np.asarray(bits, dtype=np.bool_)

    return sample


def _box(spec: SpaceSpec) -> Sampler:
    if spec.dtype in FLOAT_DTYPES:
        return _box_float(spec)
    if spec.dtype in INTEGER_DTYPES:
        return _box_int(spec)
    return _box_bool(spec)


def _discrete(spec: SpaceSpec) -> Sampler:
    n, start = spec._d["n"], spec._d["start"]
    top = n - 1  # fits uint64 for every valid spec, even int64 spans of 2**64

    def sample(rng: np.random.Generator) -> int:
        return int(start) + int(rng.integers(0, top, dtype=np.uint64, endpoint=True))

    return sample


def _multi_binary(spec: SpaceSpec) -> Sampler:
    shape, dt = tuple(spec._shape), spec._np

    def sample(rng: np.random.Generator) -> Any:
        return rng.integers(0, 1, size=shape, dtype=np.uint8, endpoint=True).astype(dt)

    return sample


def md_bounds(spec: SpaceSpec) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Inclusive per-element ``(start, start + nvec - 1)`` arrays in the spec dtype."""
    d, dt = spec._d, spec._np
    nvec = np.asarray(d["nvec"], dtype=object).reshape(spec._shape)
    start = np.asarray(d.get("start", 0), dtype=object)
    start = np.broadcast_to(start, spec._shape)
    return np.asarray(start, dtype=dt), np.asarray(start + nvec - 1, dtype=dt)


def _multi_discrete(spec: SpaceSpec) -> Sampler:
    shape, dt = tuple(spec._shape), spec._np
    lo, hi = md_bounds(spec)
    span = (hi.astype(object) - lo.astype(object)).astype(np.uint64)  # nvec - 1, exact
    if dt.itemsize == 8:
        # Add in uint64 with wraparound: exact two's-complement result for int64 too.
        base = lo.view(np.uint64)

        def sample(rng: np.random.Generator) -> Any:
            off = rng.integers(0, span, size=shape, dtype=np.uint64, endpoint=True)
            return (base + off).view(dt)

        return sample
    lo64 = lo.astype(np.int64)

    def sample_small(rng: np.random.Generator) -> Any:
        off = rng.integers(0, span, size=shape, dtype=np.uint64, endpoint=True)
        return (lo64 + off.astype(np.int64)).astype(dt)

    return sample_small


def _text(spec: SpaceSpec) -> Sampler:
    d = spec._d
    mn, mx = d["min_length"], d["max_length"]
    chars = "".join(dict.fromkeys(d["charset"])) or DEFAULT_TEXT_CHARSET
    count = len(chars)

    def sample(rng: np.random.Generator) -> str:
        length = int(rng.integers(mn, mx, endpoint=True))
        return "".join(chars[i] for i in rng.integers(0, count, size=length).tolist())

    return sample


def _dict(spec: SpaceSpec) -> Sampler:
    children = [(str(k), compile_sampler(v)) for k, v in spec._children()]

    def sample(rng: np.random.Generator) -> dict[str, Any]:
        return {k: f(rng) for k, f in children}  # declared order (SMP-3)

    return sample


def _tuple(spec: SpaceSpec) -> Sampler:
    children = [compile_sampler(v) for _, v in spec._children()]

    def sample(rng: np.random.Generator) -> tuple[Any, ...]:
        return tuple(f(rng) for f in children)

    return sample


_COMPILERS: dict[str, Callable[[SpaceSpec], Sampler]] = {
    "box": _box,
    "discrete": _discrete,
    "multi_binary": _multi_binary,
    "multi_discrete": _multi_discrete,
    "text": _text,
    "dict": _dict,
    "tuple": _tuple,
}


def compile_sampler(spec: SpaceSpec) -> Sampler:
    """A function ``f(rng) -> canonical value`` drawing one sample of ``spec`` (SMP-2/3)."""
    return _COMPILERS[spec.kind](spec)


def new_seed() -> int:
    """A fresh random seed from OS entropy (SMP-1: ``seed(None)``)."""
    return int(np.random.SeedSequence().generate_state(1, np.uint64)[0])


def check_seed(seed: Any) -> int:
    """Validate a user seed: a non-negative integer."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        if isinstance(seed, float) and math.isfinite(seed) and seed.is_integer():
            seed = int(seed)
        else:
            raise TypeError(f"seed must be a non-negative int or None, got {seed!r}")
    checked = int(seed)
    if checked < 0:
        raise ValueError(f"seed must be a non-negative int or None, got {checked}")
    return checked
