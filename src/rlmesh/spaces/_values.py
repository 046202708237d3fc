"""Value coercion and conformance: compile once per spec, run on every step.

Theory of operation
-------------------
Every observation a server sends and every action a client sends passes
through an *encoder* compiled from the space spec. The encoder turns what a
caller handed over into the **canonical tree** (VAL-10..VAL-15) or raises, and
it enforces *structural* conformance (CNF-2) on the way. A separate, optional
*range check* reports *range* deviations (CNF-3) so the caller can apply its
validation policy (CNF-4) - or skip the check entirely when the compiler proves
no deviation is possible (it then returns ``None``).

The encoders walk the spec's tree; the rules that turn one leaf into the spec's
dtype (array-likes, integers, NaN) are :mod:`rlmesh.spaces._coerce`'s.

Canonical tree (scalar / ``lanes=N``):

=================================  =======================  =============================
space                              one value                ``lanes=N``
=================================  =======================  =============================
Box / MultiBinary / MultiDiscrete  ndarray, spec dtype       ndarray ``(N, *shape)``
                                   (little-endian),
                                   C-contiguous, ``shape``
Discrete                           ``int``                  1-D ndarray ``(N,)``, spec dtype
Text                               ``str``                  ``list[str]`` of length N
Dict                               ``dict``, declared keys   dict of batched children
                                   in declared order
Tuple                              ``tuple``                tuple of batched children
=================================  =======================  =============================

The common case costs a few attribute checks: an ndarray that already has the
spec dtype and shape and is C-contiguous is returned as is (no copy). Errors
are ``ValueError`` / ``TypeError`` / ``KeyError`` whose message starts with a
JSONPath (``$``, ``$.key``, ``$[i]``, CNF-5) and says what was expected.

Decisions (DESIGN "Decisions"; the reference is silent):

- Box shapes must match exactly; MultiBinary/MultiDiscrete accept any array
  with the right element count (CNF-2 counts elements) and reshape it.
- A Box is compared in its own dtype, its float bounds rounded to that dtype as
  Gymnasium stores them, so ``Box(-1.1, 1.1)`` admits ``float32(-1.1)``.
- A ``rlmesh.Tensor`` is never coerced (VAL-10): its dtype must be exact.
- Tuple batches: a ``tuple`` whose length is the arity is read as the tuple of
  batched children; a ``list`` of N values as N per-lane tuples (when arity
  and N differ, the length decides).

>>> import numpy as np
>>> from rlmesh.spaces import Box, Dict, Discrete
>>> space = Dict({"pos": Box(-1.0, 1.0, (2,)), "mode": Discrete(3)})
>>> encode = compile_encoder(space.spec)
>>> encode({"mode": 2.0, "pos": [0.5, 2.0], "extra": "dropped"})
{'pos': array([0.5, 2. ], dtype=float32), 'mode': 2}
>>> compile_range_check(space.spec)(encode({"pos": [0.5, 2.0], "mode": 1}))
[('$.pos', 'Box value at element 1 out of bounds: above high bound')]
>>> encode({"pos": [0.0, 0.0], "mode": 3})
Traceback (most recent call last):
...
ValueError: $.mode: Discrete value 3 not in range [0, 3)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._dtypes import FLOAT_DTYPES
from ._coerce import c_vdot, coerce, describe, nan_check, to_array, to_int
from ._ranges import RangeCheck, _check_lanes, _first, _where, compile_range_check
from ._sample import md_bounds
from ._spec import SpaceSpec

__all__ = ["check_value", "compile_encoder", "compile_range_check"]

Encoder = Callable[[Any], Any]

_LABELS = {
    "box": "Box",
    "multi_binary": "MultiBinary",
    "multi_discrete": "MultiDiscrete",
    "discrete": "Discrete",
    "text": "Text",
    "dict": "Dict",
    "tuple": "Tuple",
}


class _PathKeyError(KeyError):
    """A ``KeyError`` whose ``str()`` is the plain message (no added quotes)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _count_error(path: str, lanes: int, got: int) -> ValueError:
    return ValueError(f"{path}: expected {lanes} batched values, got {got}")


# -- array leaves (Box, MultiBinary, MultiDiscrete; Discrete with lanes) -------------------


def _compile_array(spec: SpaceSpec, path: str, lanes: int | None) -> Encoder:
    kind, name, dt = spec.kind, spec.dtype, spec._np
    label = _LABELS[kind]
    shape = tuple(spec._shape) if lanes is None else (lanes, *spec._shape)
    numel = math.prod(spec._shape)
    reshape_ok = kind != "box"  # CNF-2 counts MultiBinary/MultiDiscrete elements
    check = _structural_check(spec, path, lanes, label, numel)
    nan_only = check is not None and getattr(check, "nan_only", False)

    def slow(v: Any) -> Any:
        if lanes is not None and isinstance(v, (list, tuple)) and len(v) != lanes:
            raise _count_error(path, lanes, len(v))
        arr, exact = to_array(v, path, label)
        if arr.dtype != dt:
            if exact:
                raise ValueError(
                    f"{path}: Tensor dtype {arr.dtype.name} does not match the {label} dtype {name}; a Tensor is "
                    f"never coerced, convert it first (e.g. numpy.asarray(t).astype('{name}'))"
                )
            if arr.dtype.kind == "f" and name not in FLOAT_DTYPES:
                nan_check(arr, path, label, numel, lanes)
            arr = coerce(arr, dt, name, path)
        if arr.shape != shape:
            if lanes is not None and (arr.ndim == 0 or arr.shape[0] != lanes):
                raise _count_error(path, lanes, arr.shape[0] if arr.ndim else 1)
            if reshape_ok and arr.size == math.prod(shape):
                arr = arr.reshape(shape)
            else:
                expected = tuple(spec._shape)
                got = arr.shape if lanes is None else arr.shape[1:]
                raise ValueError(f"{path}: {label} value has shape {got}, expected {expected}")
        if not arr.flags.c_contiguous:
            arr = np.asarray(arr, order="C")
        if check is not None:
            check(arr)
        return arr

    if check is None:

        def encode(v: Any) -> Any:
            if (
                type(v) is np.ndarray
                and v.dtype == dt
                and v.shape == shape
                and v.flags.c_contiguous
            ):
                return v
            return slow(v)

        return encode

    if nan_only:  # a float Box: the NaN check inlined (issue 24: one call per value)
        vdot = c_vdot

        def encode_float(v: Any) -> Any:
            if (
                type(v) is np.ndarray
                and v.dtype == dt
                and v.shape == shape
                and v.flags.c_contiguous
            ):
                total = vdot(v, v)  # see nan_check
                if total != total:
                    nan_check(v, path, label, numel, lanes)
                return v
            return slow(v)

        return encode_float

    def encode_checked(v: Any) -> Any:
        if type(v) is np.ndarray and v.dtype == dt and v.shape == shape and v.flags.c_contiguous:
            check(v)
            return v
        return slow(v)

    return encode_checked


def _structural_check(
    spec: SpaceSpec, path: str, lanes: int | None, label: str, numel: int
) -> Callable[[np.ndarray[Any, Any]], None] | None:
    """The per-kind structural check run after coercion (CNF-2), or None."""
    if spec.kind == "box":
        if spec.dtype not in FLOAT_DTYPES:
            return None

        vdot = c_vdot

        def no_nan(a: np.ndarray[Any, Any]) -> None:
            total = vdot(a, a)  # see nan_check
            if total != total:
                nan_check(a, path, label, numel, lanes)

        no_nan.nan_only = True  # type: ignore[attr-defined]  # the encoder inlines it
        return no_nan
    if spec.kind == "multi_binary":
        if spec.dtype == "bool":
            return None
        signed = spec.dtype == "int8"

        def binary(a: np.ndarray[Any, Any]) -> None:  # OPP-25: only 0 and 1
            if a.size and (a.max() > 1 or (signed and a.min() < 0)):
                bad = (a != 0) & (a != 1)
                idx, lane = _where(_first(bad), numel, lanes)
                value = a.reshape(-1)[_first(bad)]
                raise ValueError(
                    f"{path}: MultiBinary value at element {idx} is {value}; expected 0 or 1{lane}"
                )

        return binary
    lo, hi = md_bounds(spec)
    flat_lo, flat_hi = lo.reshape(-1).tolist(), hi.reshape(-1).tolist()
    uniform = len(set(flat_lo)) == 1 and len(set(flat_hi)) == 1
    lo_c, hi_c = (lo.reshape(-1)[0], hi.reshape(-1)[0]) if uniform else (lo, hi)

    def in_range(a: np.ndarray[Any, Any]) -> None:
        if uniform:
            if not a.size or (a.min() >= lo_c and a.max() <= hi_c):
                return
        elif not ((a < lo_c).any() or (a > hi_c).any()):
            return
        bad = (a < lo_c) | (a > hi_c)
        i = _first(bad)
        idx, lane = _where(i, numel, lanes)
        value = a.reshape(-1)[i]
        raise ValueError(
            f"{path}: MultiDiscrete value at element {idx}: value {value} not in range "
            f"[{flat_lo[idx]}, {flat_hi[idx] + 1}){lane}"
        )

    return in_range


# -- Discrete ---------------------------------------------------------------------------


def _compile_discrete(spec: SpaceSpec, path: str, lanes: int | None) -> Encoder:
    n, start = spec._d["n"], spec._d["start"]
    lo, hi = start, start + n  # [lo, hi)
    if lanes is not None:
        return _compile_discrete_lanes(spec, path, lanes, lo, hi)

    def slow(v: Any) -> int:
        iv = to_int(v, path)
        if not lo <= iv < hi:
            raise ValueError(f"{path}: Discrete value {iv} not in range [{lo}, {hi})")
        return iv

    def encode(v: Any) -> Any:
        if type(v) is int and lo <= v < hi:
            return v
        return slow(v)

    return encode


def _compile_discrete_lanes(spec: SpaceSpec, path: str, lanes: int, lo: int, hi: int) -> Encoder:
    dt, name = spec._np, spec.dtype
    shape = (lanes,)

    def encode(v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            if len(v) != lanes:
                raise _count_error(path, lanes, len(v))
            ints = [to_int(x, path) for x in v]
            for i, x in enumerate(ints):
                if not lo <= x < hi:
                    raise ValueError(
                        f"{path}: Discrete value {x} not in range [{lo}, {hi}) (lane {i})"
                    )
            return np.array(ints, dtype=dt)
        if type(v) is np.ndarray:  # what a received action is: skip the conversion call
            arr, exact = v, False
        else:
            arr, exact = to_array(v, path, "Discrete")
        if arr.dtype != dt:
            if exact and arr.dtype.kind not in "iu":
                raise ValueError(
                    f"{path}: Tensor dtype {arr.dtype} is not an integer dtype for Discrete"
                )
            if arr.dtype.kind == "f":
                nan_check(arr, path, "Discrete", 1, lanes)
            arr = coerce(arr, dt, name, path)
        if arr.shape != shape:
            raise _count_error(path, lanes, arr.shape[0] if arr.ndim else 1)
        if not arr.flags.c_contiguous:
            arr = np.asarray(arr, order="C")
        if lanes <= 64:  # a handful of Python ints compares faster than two numpy reductions
            vals = arr.tolist()
            bad = bool(vals) and (min(vals) < lo or max(vals) >= hi)
        else:
            bad = int(arr.min()) < lo or int(arr.max()) >= hi
        if bad:
            i = _first((arr < lo) | (arr > hi - 1))
            raise ValueError(
                f"{path}: Discrete value {arr[i]} not in range [{lo}, {hi}) (lane {i})"
            )
        return arr

    return encode


# -- Text -------------------------------------------------------------------------------


def _compile_text(spec: SpaceSpec, path: str, lanes: int | None) -> Encoder:
    def one(v: Any, where: str = "") -> str:
        if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind == "U":
            v = v.item()
        if not isinstance(v, str):
            raise TypeError(f"{path}: Text value must be a str, got {describe(v)}{where}")
        if not v.isascii():  # must travel as UTF-8: lone surrogates cannot
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(
                    f"{path}: Text value is not valid Unicode (lone surrogate){where}"
                ) from None
        return v if type(v) is str else str(v)

    if lanes is None:
        return one

    def encode(v: Any) -> list[str]:
        if isinstance(v, np.ndarray):
            v = v.tolist()
        if isinstance(v, (str, bytes)) or not isinstance(v, Sequence):
            raise TypeError(
                f"{path}: batched Text value must be a sequence of {lanes} str, got {describe(v)}"
            )
        if len(v) != lanes:
            raise _count_error(path, lanes, len(v))
        return [one(x, f" (lane {i})") for i, x in enumerate(v)]

    return encode


# -- Dict and Tuple ---------------------------------------------------------------------


def _as_mapping(v: Any, path: str) -> Mapping[str, Any]:
    if isinstance(v, Mapping):
        return v
    asdict = getattr(v, "_asdict", None)  # namedtuples (VAL-13)
    if callable(asdict):
        fields: Mapping[str, Any] = asdict()
        return fields
    raise TypeError(f"{path}: Dict value must be a mapping, got {describe(v)}")


def _missing(path: str, key: str, where: str = "") -> KeyError:
    return _PathKeyError(f"{path}: missing dict key {key!r}{where}")


def _compile_dict(spec: SpaceSpec, path: str, lanes: int | None) -> Encoder:
    children = [(str(k), _compile(v, f"{path}.{k}", lanes)) for k, v in spec._children()]
    keys = [k for k, _ in children]

    def encode(v: Any) -> dict[str, Any]:
        if type(v) is not dict:
            if lanes is not None and isinstance(v, (list, tuple)):
                v = _transpose_dicts(v, path, lanes, keys)
            else:
                v = _as_mapping(v, path)
        out = {}
        for k, enc in children:
            try:
                x = v[k]
            except KeyError:
                raise _missing(path, k) from None
            out[k] = enc(x)  # extra keys are dropped (VAL-12)
        return out

    return encode


def _transpose_dicts(v: Sequence[Any], path: str, lanes: int, keys: list[str]) -> dict[str, Any]:
    """A list of N per-lane dicts as a dict of N-long lists (VAL-15)."""
    if len(v) != lanes:
        raise _count_error(path, lanes, len(v))
    rows = [_as_mapping(x, f"{path}[lane {i}]") for i, x in enumerate(v)]
    out: dict[str, Any] = {}
    for k in keys:
        col = []
        for i, row in enumerate(rows):
            try:
                col.append(row[k])
            except KeyError:
                raise _missing(path, k, f" (lane {i})") from None
        out[k] = col
    return out


def _compile_tuple(spec: SpaceSpec, path: str, lanes: int | None) -> Encoder:
    encs = [_compile(v, f"{path}[{i}]", lanes) for i, v in spec._children()]
    arity = len(encs)

    def encode(v: Any) -> tuple[Any, ...]:
        if type(v) is not tuple and type(v) is not list and not isinstance(v, (tuple, list)):
            raise TypeError(f"{path}: Tuple value must be a tuple or list, got {describe(v)}")
        if lanes is not None and (len(v) != arity or (type(v) is list and len(v) == lanes)):
            if len(v) != lanes:
                raise _count_error(path, lanes, len(v))
            v = _transpose_tuples(v, path, arity)
        if len(v) != arity:
            raise ValueError(f"{path}: Tuple value has {len(v)} elements, expected {arity}")
        return tuple([enc(x) for enc, x in zip(encs, v, strict=True)])

    return encode


def _transpose_tuples(v: Sequence[Any], path: str, arity: int) -> list[list[Any]]:
    cols: list[list[Any]] = [[] for _ in range(arity)]
    for i, row in enumerate(v):
        if not isinstance(row, (tuple, list)):
            raise TypeError(
                f"{path}: Tuple value must be a tuple or list, got {describe(row)} (lane {i})"
            )
        if len(row) != arity:
            raise ValueError(
                f"{path}: Tuple value has {len(row)} elements, expected {arity} (lane {i})"
            )
        for j, x in enumerate(row):
            cols[j].append(x)
    return cols


_COMPILERS: dict[str, Callable[[SpaceSpec, str, int | None], Encoder]] = {
    "box": _compile_array,
    "multi_binary": _compile_array,
    "multi_discrete": _compile_array,
    "discrete": _compile_discrete,
    "text": _compile_text,
    "dict": _compile_dict,
    "tuple": _compile_tuple,
}


def _compile(spec: SpaceSpec, path: str, lanes: int | None) -> Encoder:
    return _COMPILERS[spec.kind](spec, path, lanes)


def compile_encoder(spec: SpaceSpec, *, lanes: int | None = None) -> Encoder:
    """Compile ``spec`` into ``f(value) -> canonical tree`` (VAL-10..15, CNF-2).

    Args:
        spec: The space the values belong to.
        lanes: ``None`` for one value; ``N`` for a batch of N lane values, given as
            a sequence of N values, one array/Tensor with leading axis N, or (for
            Dict/Tuple) a container of batched children.

    Raises:
        ValueError: (from ``f``) wrong shape, uncoercible values, NaN, a
            Discrete/MultiDiscrete value out of range, MultiBinary not 0/1, wrong arity
            or lane count. ``TypeError``: wrong kind of value. ``KeyError``: a
            missing Dict key. Messages start with the JSONPath of the offending leaf.

    >>> from rlmesh.spaces import Discrete
    >>> compile_encoder(Discrete(4).spec, lanes=2)([1, 3.0])
    array([1, 3])
    """
    return _compile(spec, "$", _check_lanes(lanes))


@functools.lru_cache(maxsize=128)
def _compiled(spec: SpaceSpec, lanes: int | None) -> tuple[Encoder, RangeCheck | None]:
    return compile_encoder(spec, lanes=lanes), compile_range_check(spec, lanes=lanes)


def check_value(spec: SpaceSpec, value: Any, *, lanes: int | None = None) -> None:
    """Raise unless ``value`` fully conforms to ``spec`` (structure and range, CNF-1..3).

    Raises:
        ValueError / TypeError / KeyError: a structural deviation (from the encoder).
        ValueError: a range deviation: ``"<path>: <detail>"`` for the first one.

    >>> from rlmesh.spaces import Box
    >>> check_value(Box(0.0, 1.0, (2,)).spec, [0.5, -1.0])
    Traceback (most recent call last):
    ...
    ValueError: $: Box value at element 1 out of bounds: below low bound
    """
    encode, range_check = _compiled(spec, lanes)
    tree = encode(value)
    if range_check is not None:
        problems = range_check(tree)
        if problems:
            path, detail = problems[0]
            raise ValueError(f"{path}: {detail}")
