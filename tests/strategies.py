"""Hypothesis strategies for spaces and their values, shared by every codec test.

- :func:`space_specs` draws a :class:`~rlmesh.spaces.SpaceSpec` of any kind:
  Box of every dtype and rank 0..3 with unbounded / uniform / one-sided /
  element-wise bounds (int64 and uint64 extremes included), Discrete with any
  integer dtype and start, MultiBinary (bool/uint8/int8), MultiDiscrete with
  ``start`` and rank 1..2, Text with ``min_length`` 0 and Unicode charsets, and
  Dict (Unicode keys in a drawn order) / Tuple nesting down to ``max_depth``.
- :func:`values_for` draws a *canonical* value of a spec (the encoder's output
  format, see ``rlmesh.spaces._values``) that is fully in range, optionally
  batched over ``lanes``. Floats include -0.0, subnormals, the bounds themselves
  and infinities where the bounds allow them.

Shapes stay small (at most 4 per side) so a strategy draw costs little.

Import it as ``from strategies import space_specs, values_for`` (``tests/`` on
``sys.path``).
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlmesh._dtypes import DTYPE_NAMES, FLOAT_DTYPES, INTEGER_DTYPES, np_dtype
from rlmesh.spaces import SpaceSpec
from rlmesh.spaces._sample import box_bounds_in_dtype, md_bounds

__all__ = ["box_specs", "leaf_specs", "space_specs", "values_for"]

_WIDTH = {"float16": 16, "float32": 32, "float64": 64}
_INTS = sorted(INTEGER_DTYPES)
_ALNUM = frozenset(string.ascii_letters + string.digits)


def shapes(
    min_rank: int = 0, max_rank: int = 3, max_side: int = 4
) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(1, max_side), min_size=min_rank, max_size=max_rank).map(tuple)


def _int_range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(np_dtype(dtype))
    return int(info.min), int(info.max)


def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    """Integers in [lo, hi] with the extremes and zero drawn often."""
    special = [x for x in (lo, hi, 0, 1, -1) if lo <= x <= hi]
    return st.one_of(st.sampled_from(special), st.integers(lo, hi))


def _float_bounds(dtype: str) -> st.SearchStrategy[float]:
    return st.floats(allow_nan=False, allow_infinity=False, width=_WIDTH[dtype])


@st.composite
def box_specs(draw: st.DrawFn) -> SpaceSpec:
    """A Box spec of any dtype, rank 0..3 and bounds form."""
    shape = draw(shapes())
    dtype = draw(st.sampled_from(DTYPE_NAMES))
    numel = int(np.prod(shape, dtype=np.int64))
    if dtype in FLOAT_DTYPES:
        form = draw(st.sampled_from(["unbounded", "uniform", "lower", "upper", "elementwise"]))
        f = _float_bounds(dtype)
        if form == "unbounded":
            return SpaceSpec._box(shape, dtype, None, None)
        if form == "lower":
            return SpaceSpec._box(shape, dtype, draw(f), None)
        if form == "upper":
            return SpaceSpec._box(shape, dtype, None, draw(f))
        if form == "uniform":
            a, b = sorted((draw(f), draw(f)))
            return SpaceSpec._box(shape, dtype, a, b)
        side = st.one_of(f, st.just(np.inf))
        pairs = [sorted((-draw(side), draw(side))) for _ in range(numel)]
        low = np.array([p[0] for p in pairs], dtype=np.float64).reshape(shape)
        high = np.array([p[1] for p in pairs], dtype=np.float64).reshape(shape)
        return SpaceSpec._box(shape, dtype, low, high)
    if dtype == "bool":
        lo, hi = 0, 1
    else:
        lo, hi = _int_range(dtype)
    form = draw(st.sampled_from(["unbounded", "uniform", "elementwise"]))
    if form == "unbounded":
        return SpaceSpec._box(shape, dtype, None, None)
    if form == "uniform":
        a, b = sorted((draw(_ints(lo, hi)), draw(_ints(lo, hi))))
        if dtype == "bool":
            a, b = bool(a), bool(b)
        return SpaceSpec._box(shape, dtype, a, b)
    pairs = [sorted((draw(_ints(lo, hi)), draw(_ints(lo, hi)))) for _ in range(numel)]
    conv = bool if dtype == "bool" else int
    low_o = np.array([conv(p[0]) for p in pairs], dtype=object)
    high_o = np.array([conv(p[1]) for p in pairs], dtype=object)
    return SpaceSpec._box(shape, dtype, low_o, high_o)


@st.composite
def _discrete_specs(draw: st.DrawFn) -> SpaceSpec:
    dtype = draw(st.sampled_from(_INTS))
    lo, hi = _int_range(dtype)
    start = draw(_ints(lo, hi))
    n = draw(st.one_of(st.integers(1, min(10, hi - start + 1)), st.integers(1, hi - start + 1)))
    return SpaceSpec._discrete(n, start, dtype)


@st.composite
def _multi_discrete_specs(draw: st.DrawFn) -> SpaceSpec:
    dtype = draw(st.sampled_from(_INTS))
    shape = draw(shapes(1, 2))
    lo, hi = _int_range(dtype)
    numel = int(np.prod(shape))
    use_start = draw(st.booleans())
    nvec, start = [], []
    for _ in range(numel):
        s = draw(_ints(lo, hi)) if use_start else 0
        room = hi - s + 1
        nvec.append(draw(st.one_of(st.integers(1, min(10, room)), st.integers(1, room))))
        start.append(s)
    nvec_n = np.array(nvec, dtype=object).reshape(shape).tolist()
    start_n = np.array(start, dtype=object).reshape(shape).tolist() if use_start else None
    return SpaceSpec._multi_discrete(nvec_n, dtype, start_n)


@st.composite
def _text_specs(draw: st.DrawFn) -> SpaceSpec:
    mn = draw(st.integers(0, 4))
    mx = draw(st.integers(max(mn, 1), mn + 6))
    charset = draw(st.one_of(st.just(""), st.text(min_size=1, max_size=6)))
    return SpaceSpec._text(mx, mn, charset)


def leaf_specs() -> st.SearchStrategy[SpaceSpec]:
    """Any non-composite spec."""
    return st.one_of(
        box_specs(),
        _discrete_specs(),
        st.builds(
            SpaceSpec._multi_binary, shapes(1, 3), st.sampled_from(["bool", "uint8", "int8"])
        ),
        _multi_discrete_specs(),
        _text_specs(),
    )


def space_specs(max_depth: int = 2) -> st.SearchStrategy[SpaceSpec]:
    """Any spec; Dict/Tuple nest down to ``max_depth`` levels (0: leaves only)."""
    if max_depth <= 0:
        return leaf_specs()
    child = space_specs(max_depth - 1)
    keys = st.text(min_size=1, max_size=8)
    dicts = st.lists(st.tuples(keys, child), max_size=3, unique_by=lambda kv: kv[0]).map(
        lambda items: SpaceSpec._dict(dict(items))
    )
    tuples = st.lists(child, max_size=3).map(SpaceSpec._tuple)
    return st.one_of(leaf_specs(), dicts, tuples)


# -- values -----------------------------------------------------------------------------


def _box_element(dtype: str, lo: Any, hi: Any) -> st.SearchStrategy[Any]:
    if dtype in FLOAT_DTYPES:
        lo_f, hi_f = float(lo), float(hi)
        if lo_f == hi_f:  # e.g. low=0.0, high=-0.0: hypothesis refuses that ordered pair
            return st.just(lo_f)
        return st.floats(
            min_value=None if lo_f == -np.inf else lo_f,
            max_value=None if hi_f == np.inf else hi_f,
            allow_nan=False,
            allow_infinity=lo_f == -np.inf or hi_f == np.inf,
            width=_WIDTH[dtype],
        )
    if dtype == "bool":
        return st.sampled_from(sorted({bool(lo), bool(hi)}))
    return _ints(int(lo), int(hi))


def _box_values(spec: SpaceSpec, shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
    dt = np_dtype(spec.dtype)
    lo, hi = box_bounds_in_dtype(spec)
    if lo is None:
        if spec.dtype in FLOAT_DTYPES:
            lo, hi = np.asarray(-np.inf), np.asarray(np.inf)
        elif spec.dtype == "bool":
            lo, hi = np.asarray(False), np.asarray(True)
        else:
            r = _int_range(spec.dtype)
            lo, hi = np.asarray(r[0]), np.asarray(r[1])
    if lo.ndim == 0 and hi.ndim == 0:
        return hnp.arrays(dt, shape, elements=_box_element(spec.dtype, lo[()], hi[()]))
    per = [
        _box_element(spec.dtype, a, b) for a, b in zip(lo.reshape(-1), hi.reshape(-1), strict=True)
    ]
    lanes = int(np.prod(shape[: len(shape) - len(spec.shape)], dtype=np.int64))
    return st.tuples(*(per * lanes)).map(lambda xs: np.array(xs, dtype=dt).reshape(shape))


def _md_values(spec: SpaceSpec, shape: tuple[int, ...]) -> st.SearchStrategy[Any]:
    dt = np_dtype(spec.dtype)
    lo, hi = md_bounds(spec)
    per = [
        _ints(int(a), int(b))
        for a, b in zip(lo.reshape(-1).tolist(), hi.reshape(-1).tolist(), strict=True)
    ]
    lanes = int(np.prod(shape[: len(shape) - len(spec.shape)], dtype=np.int64))
    return st.tuples(*(per * lanes)).map(
        lambda xs: np.array(xs, dtype=object).astype(dt).reshape(shape)
    )


def _text_values(spec: SpaceSpec) -> st.SearchStrategy[str]:
    d = spec._d
    alphabet = (
        st.sampled_from(sorted(set(d["charset"])))
        if d["charset"]
        else st.characters(blacklist_categories=("Cs",))
    )
    return st.text(alphabet=alphabet, min_size=d["min_length"], max_size=d["max_length"])


def values_for(spec: SpaceSpec, lanes: int | None = None) -> st.SearchStrategy[Any]:
    """Canonical, fully conforming values of ``spec`` (batched over ``lanes`` when given).

    Box/MultiBinary/MultiDiscrete: C-contiguous little-endian ndarrays of the spec
    dtype and shape (``(lanes, *shape)``); Discrete: ``int`` (a 1-D array of the spec
    dtype with lanes); Text: ``str`` (``list[str]``); Dict: ``dict`` in declared key
    order; Tuple: ``tuple``.
    """
    kind = spec.kind
    shape = tuple(spec.shape) if lanes is None else (lanes, *spec.shape)
    if kind == "box":
        return _box_values(spec, shape)
    if kind == "multi_binary":
        dt = np_dtype(spec.dtype)
        return hnp.arrays(dt, shape, elements=st.sampled_from([0, 1]).map(lambda b: dt.type(b)))
    if kind == "multi_discrete":
        return _md_values(spec, shape)
    if kind == "discrete":
        n, start = spec._d["n"], spec._d["start"]
        one = _ints(start, start + n - 1)
        if lanes is None:
            return one
        return st.lists(one, min_size=lanes, max_size=lanes).map(
            lambda xs: np.array(xs, dtype=np_dtype(spec.dtype))
        )
    if kind == "text":
        text = _text_values(spec)
        return text if lanes is None else st.lists(text, min_size=lanes, max_size=lanes)
    if kind == "dict":
        children = [(k, values_for(v, lanes)) for k, v in spec._children()]
        return st.tuples(*(s for _, s in children)).map(
            lambda vals: {k: v for (k, _), v in zip(children, vals, strict=True)}
        )
    return st.tuples(*(values_for(v, lanes) for _, v in spec._children()))


def gym_exact(spec: SpaceSpec) -> bool:
    """Whether ``spec`` survives rlmesh -> Gymnasium -> rlmesh unchanged.

    Some forms have no Gymnasium spelling of their own: an unbounded integer/bool
    Box (Gymnasium writes the dtype range, which reads back as exact bounds), an
    unrestricted Text (written over ``string.printable``, which reads back as that
    charset, GYM-7/CNF2-A2), a Text charset that is exactly Gymnasium's default
    alphanumeric set (read back as unrestricted, GYM-5), and a charset with repeated
    or unsorted characters (Gymnasium keeps a set; it reads back sorted).
    """
    kind = spec.kind
    if kind == "box":
        return not (spec.dtype not in FLOAT_DTYPES and spec._d["bounds_kind"] == "unbounded")
    if kind == "text":
        charset = spec._d["charset"]
        return (
            charset != ""
            and frozenset(charset) != _ALNUM
            and charset == "".join(sorted(set(charset)))
        )
    return all(gym_exact(c) for _, c in spec._children())
