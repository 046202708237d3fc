"""Gymnasium-style text for specs and space wrappers (SPC-6).

``repr(spec)`` and ``repr(space)`` share this one renderer, so the two can never
drift. Shapes print as Python tuples; float bounds print as floats (``-inf`` /
``inf`` for open sides); element-wise bounds are abbreviated as ``[…]``. Where a
space carries something the reference cannot express (a non-default dtype, a
``MultiDiscrete`` ``start``), it is appended as a keyword so two different
spaces never print the same.

>>> from rlmesh.spaces import Box, Dict, Discrete
>>> Box(-1.0, 1.0, (3,))
Box(-1.0, 1.0, (3,), float32)
>>> Dict({"obs": Box(0, 255, (2, 2), "uint8"), "flag": Discrete(2, start=-1)})
Dict("obs": Box(0, 255, (2, 2), uint8), "flag": Discrete(2, start=-1))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._spec import SpaceSpec

__all__ = ["spec_repr"]

_ELIDED = "[…]"


def _shape(dims: list[int]) -> str:
    return repr(tuple(dims))


def _float(x: float) -> str:
    # repr(float) prints "inf"/"-inf" and keeps "1.0" (not "1"), as Gymnasium does.
    return repr(float(x))


def _box(spec: SpaceSpec) -> str:
    d = spec._d
    kind = d["bounds_kind"]
    if kind == "unbounded":
        lo, hi = "-inf", "inf"
    elif kind == "uniform":
        lo, hi = _float(d["low"]), _float(d["high"])
    elif kind == "typed_uniform":
        # Integer and bool bounds are exact; print them as such (Gymnasium does too).
        lo, hi = repr(d["low"][0]), repr(d["high"][0])
    else:
        lo = hi = _ELIDED
    return f"Box({lo}, {hi}, {_shape(spec.shape)}, {spec.dtype})"


def _discrete(spec: SpaceSpec) -> str:
    d = spec._d
    extra = f", start={d['start']}" if d["start"] else ""
    if spec.dtype != "int64":
        extra += f", dtype={spec.dtype}"
    return f"Discrete({d['n']}{extra})"


def _multi_binary(spec: SpaceSpec) -> str:
    extra = f", dtype={spec.dtype}" if spec.dtype != "uint8" else ""
    return f"MultiBinary({_shape(spec.shape)}{extra})"


def _multi_discrete(spec: SpaceSpec) -> str:
    d = spec._d
    extra = f", start={d['start']}" if "start" in d else ""
    if spec.dtype != "int64":
        extra += f", dtype={spec.dtype}"
    return f"MultiDiscrete({d['nvec']}{extra})"


def _text(spec: SpaceSpec) -> str:
    d = spec._d
    cs = d["charset"]
    extra = f", charset={_quote(cs)}" if cs else ""
    return f"Text({d['min_length']}, {d['max_length']}{extra})"


def _quote(s: str) -> str:
    # Double quotes, as in SPC-6's examples (Text(1, 8, charset="ab")).
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dict(spec: SpaceSpec) -> str:
    inner = ", ".join(f"{_quote(k)}: {spec_repr(v)}" for k, v in spec._d["spaces"].items())
    return f"Dict({inner})"


def _tuple(spec: SpaceSpec) -> str:
    inner = ", ".join(spec_repr(v) for v in spec._d["spaces"])
    return f"Tuple({inner})"


_RENDERERS = {
    "box": _box,
    "discrete": _discrete,
    "multi_binary": _multi_binary,
    "multi_discrete": _multi_discrete,
    "text": _text,
    "dict": _dict,
    "tuple": _tuple,
}


def spec_repr(spec: SpaceSpec) -> str:
    """The SPC-6 text of a spec (also what every space wrapper prints)."""
    return _RENDERERS[spec.kind](spec)
