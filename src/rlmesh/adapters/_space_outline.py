"""Project any space description onto one small outline: the spec's "space view" (ADP-55).

Accepted inputs: Gymnasium spaces, :class:`rlmesh.spaces.SpaceSpec`, objects
whose ``.spec`` is a ``SpaceSpec`` (rlmesh space wrappers), plain space view dicts
(the JSON shape the conformance vectors use, §18.2) and outlines themselves.

>>> v = outline_of({"kind": "box", "dtype": "float32", "shape": [3], "low": [-1.0], "high": [1.0]})
>>> v.kind, v.shape, v.width, v.uniform_range()
('box', (3,), 3, (-1.0, 1.0))
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spaces import SpaceSpec
from ._check import fail

__all__ = ["SpaceOutline", "outline_of"]

_KINDS = (
    "box",
    "discrete",
    "multi_binary",
    "multi_discrete",
    "text",
    "dict",
    "tuple",
    "unspecified",
)
_NUMERIC = ("box", "discrete", "multi_binary", "multi_discrete")


@dataclass(frozen=True, eq=False)
class SpaceOutline:
    """The facts the join reads from a space."""

    kind: str
    shape: tuple[int, ...] = ()
    dtype: str = "unspecified"
    low: np.ndarray[Any, Any] | None = None
    high: np.ndarray[Any, Any] | None = None
    keys: tuple[str, ...] = ()
    children: tuple[SpaceOutline, ...] = ()

    @property
    def width(self) -> int:
        """Number of elements (1 for a scalar)."""
        return math.prod(self.shape)

    @property
    def numeric(self) -> bool:
        return self.kind in _NUMERIC

    def child(self, key: str | int) -> SpaceOutline | None:
        if self.kind == "dict" and isinstance(key, str):
            return self.children[self.keys.index(key)] if key in self.keys else None
        if self.kind == "tuple" and isinstance(key, int) and 0 <= key < len(self.children):
            return self.children[key]
        return None

    def slice_range(self, start: int, stop: int) -> tuple[float, float] | None:
        """Uniform finite bounds over elements ``[start, stop)``, else ``None`` (ADP-59)."""
        if self.low is None or self.high is None:
            return None
        lo = self.low if self.low.size == 1 else self.low[start:stop]
        hi = self.high if self.high.size == 1 else self.high[start:stop]
        if lo.size == 0 or hi.size == 0:
            return None
        a, b = float(lo.min()), float(hi.min())
        if (
            float(lo.max()) != a
            or float(hi.max()) != b
            or not (math.isfinite(a) and math.isfinite(b))
        ):
            return None
        return a, b

    def uniform_range(self) -> tuple[float, float] | None:
        """Uniform finite bounds of the whole leaf, else ``None``."""
        return self.slice_range(0, max(self.width, 1))

    def describe(self) -> str:
        """How ClassMismatch messages name a space (ADP-62)."""
        if self.kind == "box":
            return f"a {len(self.shape)}-D Box"
        return {
            "discrete": "a Discrete space",
            "multi_binary": "a MultiBinary space",
            "multi_discrete": "a MultiDiscrete space",
            "text": "a Text space",
            "dict": "a Dict space",
            "tuple": "a Tuple space",
        }.get(self.kind, "an unspecified space")


def _bounds(low: Any, high: Any) -> tuple[Any, Any]:
    def conv(b: Any) -> Any:
        if b is None:
            return None
        arr = np.asarray(b, dtype=np.float64).reshape(-1)
        return arr if arr.size else None

    lo, hi = conv(low), conv(high)
    if lo is None or hi is None:
        return None, None
    if np.all(np.isneginf(lo)) and np.all(np.isposinf(hi)):
        return None, None
    return lo, hi


def _from_dict(d: Mapping[str, Any], where: str) -> SpaceOutline:
    kind = d.get("kind")
    if kind not in _KINDS:
        raise fail(
            "invalid_tag", f"{where}: unknown space kind {kind!r}; expected one of {list(_KINDS)}"
        )
    dtype = str(d.get("dtype", "unspecified"))
    if kind == "dict":
        keys = tuple(d.get("keys", ()))
        children = tuple(d.get("children", ()))
        if len(keys) != len(children):
            raise fail("invalid_tag", f"{where}: dict view keys and children must be parallel")
        return SpaceOutline("dict", (), dtype, keys=tuple(str(k) for k in keys),
                         children=tuple(outline_of(c, f"{where}.{k}") for k, c in zip(keys, children, strict=True)))  # fmt: skip
    if kind == "tuple":
        children = tuple(d.get("children", ()))
        return SpaceOutline(
            "tuple",
            (),
            dtype,
            children=tuple(outline_of(c, f"{where}[{i}]") for i, c in enumerate(children)),
        )
    shape = tuple(int(x) for x in d.get("shape", ()) or ())
    lo, hi = _bounds(d.get("low"), d.get("high"))
    return SpaceOutline(kind, shape, dtype, lo, hi)


def _from_spec(spec: Any, where: str) -> SpaceOutline:
    kind = spec.kind
    if kind == "dict":
        items = spec._children()
        return SpaceOutline("dict", (), spec.dtype, keys=tuple(str(k) for k, _ in items),
                         children=tuple(_from_spec(c, f"{where}.{k}") for k, c in items))  # fmt: skip
    if kind == "tuple":
        return SpaceOutline(
            "tuple",
            (),
            spec.dtype,
            children=tuple(_from_spec(c, f"{where}[{i}]") for i, c in spec._children()),
        )
    if kind == "opaque":  # an env's own space: its values pass through untouched
        return SpaceOutline("unspecified")
    lo = hi = None
    if kind == "box":
        lo, hi = _bounds(*spec._bounds_arrays())
    return SpaceOutline(kind, tuple(spec.shape), spec.dtype, lo, hi)


def _from_gymnasium(space: Any, where: str) -> SpaceOutline | None:
    name = type(space).__name__
    mod = type(space).__module__
    if not (mod.startswith("gymnasium") or mod.startswith("gym.")):
        if any(  # an env's own gymnasium.Space subclass (MiniGrid's MissionSpace): pass-through
            c.__name__ == "Space" and c.__module__.startswith(("gymnasium.", "gym."))
            for c in type(space).__mro__
        ):
            return SpaceOutline("unspecified")
        return None
    dtype = (
        np.dtype(space.dtype).name if getattr(space, "dtype", None) is not None else "unspecified"
    )
    if name == "Dict":
        keys = tuple(space.spaces.keys())
        return SpaceOutline("dict", (), "unspecified", keys=tuple(str(k) for k in keys),
                         children=tuple(outline_of(space.spaces[k], f"{where}.{k}") for k in keys))  # fmt: skip
    if name == "Tuple":
        return SpaceOutline(
            "tuple",
            (),
            "unspecified",
            children=tuple(outline_of(c, f"{where}[{i}]") for i, c in enumerate(space.spaces)),
        )
    if name == "Box":
        lo, hi = _bounds(space.low, space.high)
        return SpaceOutline("box", tuple(space.shape), dtype, lo, hi)
    if name == "Discrete":
        return SpaceOutline("discrete", (), dtype)
    if name == "MultiBinary":
        return SpaceOutline("multi_binary", tuple(space.shape), dtype)
    if name == "MultiDiscrete":
        return SpaceOutline("multi_discrete", tuple(space.shape), dtype)
    if name == "Text":
        return SpaceOutline("text", (), "unspecified")
    return SpaceOutline("unspecified")


def outline_of(space: Any, where: str = "space") -> SpaceOutline:
    """Normalize a space-like object to a :class:`SpaceOutline` (ADP-55).

    Raises:
        AdapterResolutionError: the object is not a recognizable space.
    """
    if isinstance(space, SpaceOutline):
        return space
    outline = _from_gymnasium(space, where)  # before Mapping: a gymnasium Dict is a Mapping
    if outline is not None:
        return outline
    if isinstance(space, Mapping):
        return _from_dict(space, where)
    if isinstance(space, SpaceSpec):
        return _from_spec(space, where)
    spec = getattr(space, "spec", None)
    if isinstance(spec, SpaceSpec):
        return _from_spec(spec, where)
    raise fail(
        "invalid_tag",
        f"{where}: expected a Gymnasium space, an rlmesh SpaceSpec or a space view dict, got {type(space).__name__}",
    )
