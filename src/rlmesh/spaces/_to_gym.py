"""rlmesh -> Gymnasium conversion of a bare :class:`SpaceSpec` (GYM-1, GYM-7).

The half of :mod:`rlmesh.spaces._gym` that ``SpaceSpec.to_gym_space`` and
``Space.to_gymnasium_space`` call: it reads a spec and never imports the spec or
wrapper modules at run time, so both can import it at module level. Gymnasium itself
is imported on first use (an optional dependency, the ``gymnasium`` extra).
"""

from __future__ import annotations

import copy
import string
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

from .._dtypes import FLOAT_DTYPES, np_dtype
from ..errors import DependencyMissing

if TYPE_CHECKING:
    from ._spec import SpaceSpec

__all__ = ["gym_space_of"]


def _gym_spaces() -> Any:
    """``gymnasium.spaces``, falling back to ``gym.spaces`` (GYM-1)."""
    try:
        import gymnasium.spaces as spaces
    except ImportError:
        try:
            import gym.spaces as spaces  # type: ignore[no-redef]
        except ImportError:
            raise DependencyMissing(
                'Gymnasium conversion requires gymnasium. Install it with: pip install gymnasium (the "gymnasium" extra of rlmesh-py)',
                name="gymnasium",
            ) from None
    return spaces


def _gym_from_spec(spec: SpaceSpec, gs: Any) -> Any:
    kind, d = spec.kind, spec._d
    if kind == "box":
        return _box_to_gym(spec, gs)
    if kind == "discrete":
        dt = np.dtype(np_dtype(spec.dtype).type)
        n, start = d["n"], d["start"]
        if n <= np.iinfo(dt).max:
            return gs.Discrete(n, start=start, dtype=dt.type)
        # Gymnasium stores n in the dtype, so Discrete(256, dtype=uint8) needs a wider n;
        # the space's values still fit, and its dtype stays the real one.
        space = gs.Discrete(_widen(n, start, spec), start=start, dtype=np.int64)
        space.dtype = dt
        return space
    if kind == "multi_binary":
        dims = spec.shape
        space = gs.MultiBinary(dims[0] if len(dims) == 1 else dims)
        if space.dtype != np_dtype(spec.dtype):
            space.dtype = np.dtype(
                np_dtype(spec.dtype).type
            )  # keep the real dtype (module docstring)
        return space
    if kind == "multi_discrete":
        dt = np.dtype(np_dtype(spec.dtype).type)
        nvec_o = np.asarray(d["nvec"], dtype=object)
        start_o = np.broadcast_to(np.asarray(d.get("start", 0), dtype=object), nvec_o.shape)
        if (nvec_o <= np.iinfo(dt).max).all():
            start = np.asarray(d["start"], dtype=dt) if "start" in d else None
            return gs.MultiDiscrete(nvec_o.astype(dt), dtype=dt.type, start=start)
        # As for Discrete: widen nvec, keep the dtype.
        for n, s in zip(nvec_o.reshape(-1), start_o.reshape(-1), strict=True):
            _widen(n, s, spec)
        space = gs.MultiDiscrete(
            nvec_o.astype(np.int64), dtype=np.int64, start=start_o.astype(np.int64)
        )
        space.dtype = dt
        return space
    if kind == "text":
        charset: Any = (
            d["charset"] or string.printable
        )  # unrestricted -> printable (GYM-7, CNF2-A2)
        return gs.Text(d["max_length"], min_length=d["min_length"], charset=charset)
    if kind == "opaque":
        return _opaque_class(gs)(spec)
    if kind == "dict":
        # An OrderedDict is never re-sorted by Gymnasium: declared order survives (OPP-12).
        return gs.Dict(OrderedDict((k, _gym_from_spec(v, gs)) for k, v in spec._children()))
    return gs.Tuple(tuple(_gym_from_spec(v, gs) for _, v in spec._children()))


_OPAQUE: dict[Any, type] = {}


def _opaque_class(gs: Any) -> type:
    """A ``gymnasium.Space`` standing in for an opaque one: the spec's peer answers (made once)."""
    cls = _OPAQUE.get(gs)
    if cls is not None:
        return cls

    class OpaqueSpace(gs.Space):  # type: ignore[misc]
        """An env's own space, served by rlmesh: ``sample``/``contains`` ask the env.

        Values are plain data (str, numbers, lists, dicts). ``seed(k)`` seeds this object's
        generator, which draws the seed each ``sample()`` sends, so samples repeat.
        """

        def __init__(self, spec: SpaceSpec) -> None:
            super().__init__(None, None)
            self.rlmesh_opaque_spec = spec

        @property
        def is_np_flattenable(self) -> bool:
            return False

        def sample(self, mask: Any = None, probability: Any = None) -> Any:
            peer = self.rlmesh_opaque_spec._peer
            if peer is None:
                raise RuntimeError(
                    f"{self!r} is not connected to the env that declared it: it cannot sample"
                )
            return peer.sample(int(self.np_random.integers(0, 2**31 - 1)))

        def contains(self, x: Any) -> bool:
            peer = self.rlmesh_opaque_spec._peer
            if peer is None:
                raise RuntimeError(
                    f"{self!r} is not connected to the env that declared it: it cannot check values"
                )
            return bool(peer.contains(x))

        def __eq__(self, other: object) -> bool:
            spec = getattr(other, "rlmesh_opaque_spec", None)
            return spec is not None and spec == self.rlmesh_opaque_spec

        def __hash__(self) -> int:
            return hash(self.rlmesh_opaque_spec)

        def __deepcopy__(self, memo: Any) -> Any:  # batch_space copies: keep the same peer
            twin = type(self)(self.rlmesh_opaque_spec)
            twin._np_random = None if self._np_random is None else copy.deepcopy(self._np_random)
            return twin

        def __repr__(self) -> str:
            return f"OpaqueSpace({self.rlmesh_opaque_spec._d['type']})"

    _OPAQUE[gs] = OpaqueSpace
    return OpaqueSpace


def _widen(n: int, start: int, spec: SpaceSpec) -> int:
    info = np.iinfo(np.int64)
    if n > info.max or start < info.min or start > info.max:
        raise ValueError(
            f"{spec!r} cannot be represented as a Gymnasium space: its counts or offsets do not fit int64"
        )
    return n


def _box_to_gym(spec: SpaceSpec, gs: Any) -> Any:
    shape = tuple(spec.shape)
    dt = np_dtype(spec.dtype)
    lo, hi = spec._bounds_arrays()
    if spec.dtype in FLOAT_DTYPES:
        if lo is None:
            lo, hi = -np.inf, np.inf
        with np.errstate(over="ignore"):
            low = np.broadcast_to(np.asarray(lo, dtype=np.float64), shape).astype(dt)
            high = np.broadcast_to(np.asarray(hi, dtype=np.float64), shape).astype(dt)
    elif lo is None:
        if spec.dtype == "bool":
            low, high = np.zeros(shape, dtype=np.bool_), np.ones(shape, dtype=np.bool_)
        else:
            info = np.iinfo(dt)
            low, high = np.full(shape, info.min, dtype=dt), np.full(shape, info.max, dtype=dt)
    else:
        low = np.broadcast_to(lo, shape).astype(dt)
        high = np.broadcast_to(hi, shape).astype(dt)
    native = np.dtype(dt.type)  # Gymnasium wants native byte order
    return gs.Box(low=low.astype(native), high=high.astype(native), shape=shape, dtype=native.type)


def gym_space_of(spec: SpaceSpec) -> Any:
    """The Gymnasium space equal to ``spec`` (GYM-7); ``DependencyMissing`` without gymnasium."""
    return _gym_from_spec(spec, _gym_spaces())
