"""``SpaceSpec``: the immutable, validated description of a space (SPC-1..SPC-63).

A spec is pure data: kind, shape, dtype and kind-specific details. The space
wrappers in this package add sampling and containment on top; the wire codec
reads specs to lay out values. Specs are built through the ``_box`` /
``_discrete`` / ... class constructors, which validate, or from the plain-dict
form with :meth:`SpaceSpec._from_dict` (used for contracts read off the wire).

Where we go beyond the reference (DESIGN "Decisions"): rank-0 ``Box``, the
dtype of ``Discrete``/``MultiBinary``/``MultiDiscrete``, ``MultiDiscrete``
``start``, ``Text(min_length=0)`` and declared ``Dict`` key order all
round-trip exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._dtypes import INTEGER_DTYPES, dtype_name, np_dtype
from ._repr import spec_repr
from ._spec_parts import (
    MAX_SPACE_ELEMENTS,
    _all_same,
    _check_declared_elements,
    _exact_int,
    _fail_inf,
    _freeze,
    _int_range,
    _shape,
)
from ._to_gym import gym_space_of

__all__ = ["KINDS", "MAX_SPACE_ELEMENTS", "SpaceSpec", "value_nbytes"]

KINDS = ("box", "discrete", "multi_binary", "multi_discrete", "text", "dict", "tuple", "opaque")
_COMPOSITE_DTYPE = "float32"  # what upstream reports for Dict/Tuple (SPC-5, DEC-6)
_TEXT_DTYPE = "uint8"  # SPC-50
_MULTI_BINARY_DTYPES = ("bool", "uint8", "int8")  # SPC-31


#: The wrapper class of each kind (``"box"`` -> ``Box`` ...). Each ``Space`` subclass enters
#: itself when it is defined (``rlmesh.spaces`` defines them all on import), so a spec builds
#: its wrapper without importing the wrapper modules, which sit above this one.
WRAPPERS: dict[str, Any] = {}


def wrapper_class(kind: str) -> Any:
    """The ``Space`` subclass of ``kind``.

    Raises:
        ValueError: an unknown space kind (``"unsupported RLMesh space kind: ..."``).
    """
    try:
        return WRAPPERS[kind]
    except KeyError:
        raise ValueError(f"unsupported RLMesh space kind: {kind!r}") from None


class SpaceSpec:
    """Immutable description of one space (SPC-1).

    Attributes:
        kind: One of ``box``, ``discrete``, ``multi_binary``, ``multi_discrete``,
            ``text``, ``dict``, ``tuple``.
        shape: The shape as a ``list[int]`` (a fresh list on every read).
        dtype: The element dtype name (composites report ``"float32"``, SPC-5).

    >>> spec = SpaceSpec._box((3,), "float32", -1.0, 1.0)
    >>> spec.kind, spec.shape, spec.dtype
    ('box', [3], 'float32')
    >>> SpaceSpec._from_dict(spec._to_dict()) == spec
    True
    """

    __slots__ = ("_d", "_dtype", "_hash", "_kind", "_np", "_peer", "_plans", "_shape")

    _kind: str
    _shape: tuple[int, ...]
    _dtype: str
    _d: dict[str, Any]
    _hash: int | None
    _np: Any
    _plans: (
        dict[Any, Any] | None
    )  # compiled value plans (``rlmesh._plan.value_plan``), built lazily
    _peer: Any  # an opaque leaf: who samples and checks its values (``spaces._opaque``)

    def __init__(self) -> None:  # pragma: no cover - guarded
        raise TypeError(
            "SpaceSpec is built by the space classes (rlmesh.spaces.Box(...).spec) "
            "or from a contract; it has no public constructor"
        )

    # -- construction -------------------------------------------------------------

    @classmethod
    def _new(
        cls, kind: str, shape: tuple[int, ...], dtype: str, details: dict[str, Any]
    ) -> SpaceSpec:
        self = object.__new__(cls)
        numeric = kind in ("box", "multi_binary", "multi_discrete", "discrete")
        for name, value in (
            ("_kind", kind),
            ("_shape", shape),
            ("_dtype", dtype),
            ("_d", details),
            ("_hash", None),
            ("_np", np_dtype(dtype) if numeric else None),
            ("_plans", None),
            ("_peer", None),
        ):
            object.__setattr__(self, name, value)
        return self

    @classmethod
    def _box(
        cls, shape: Any, dtype: Any = "float32", low: Any = None, high: Any = None
    ) -> SpaceSpec:
        """A Box. ``low``/``high``: ``None`` (unbounded side), a scalar, or an array-like.

        Float dtypes keep float bounds (``uniform`` / ``elementwise`` /
        ``unbounded``); integer and bool dtypes keep exact typed bounds
        (``typed_uniform`` / ``typed_elementwise``), SPC-11.
        """
        dims = _shape(shape, kind="Box", allow_rank0=True)
        dt = dtype_name(dtype)
        numel = math.prod(dims)
        if dt in INTEGER_DTYPES or dt == "bool":
            return cls._typed_box(dims, dt, numel, low, high)
        lo = cls._float_bound(low, dims, numel, "low", -math.inf)
        hi = cls._float_bound(high, dims, numel, "high", math.inf)
        if (
            np.ndim(lo) == 0 and np.ndim(hi) == 0
        ):  # scalar bounds: nothing of the shape's size is built
            if lo > hi:
                raise ValueError("Box low must be <= high everywhere; element 0 has low > high")
            if np.isneginf(lo) and np.isposinf(hi):
                return cls._new(
                    "box", dims, dt, {"bounds_kind": "unbounded", "low": None, "high": None}
                )
            return cls._new(
                "box", dims, dt, {"bounds_kind": "uniform", "low": float(lo), "high": float(hi)}
            )
        lo_a, hi_a = np.broadcast_to(lo, dims), np.broadcast_to(hi, dims)
        if np.any(lo_a > hi_a):
            i = int(np.argmax((lo_a > hi_a).reshape(-1)))
            raise ValueError(f"Box low must be <= high everywhere; element {i} has low > high")
        if np.all(np.isneginf(lo_a)) and np.all(np.isposinf(hi_a)):
            d: dict[str, Any] = {"bounds_kind": "unbounded", "low": None, "high": None}
        elif _all_same(lo_a) and _all_same(hi_a):
            # One representation per admitted set: equal element-wise bounds are uniform.
            d = {"bounds_kind": "uniform", "low": float(lo_a.flat[0]), "high": float(hi_a.flat[0])}
        else:
            d = {
                "bounds_kind": "elementwise",
                "low": [float(x) for x in lo_a.reshape(-1)],
                "high": [float(x) for x in hi_a.reshape(-1)],
            }
        return cls._new("box", dims, dt, d)

    @staticmethod
    def _float_bound(b: Any, dims: tuple[int, ...], numel: int, side: str, default: float) -> Any:
        if b is None:
            return np.float64(default)
        if isinstance(b, str):
            s = b.strip().lower()
            if s not in ("inf", "-inf", "+inf"):
                raise ValueError(f"Box {side} must be a number, 'inf' or '-inf', got {b!r}")
            b = float(s)
        arr = np.asarray(b, dtype=np.float64)
        if np.any(np.isnan(arr)):
            raise ValueError(f"Box {side} bound must not be NaN")
        if arr.ndim == 0:
            return arr[()]
        if arr.size == numel:
            return arr.reshape(dims)
        try:
            return np.broadcast_to(arr, dims).copy()
        except ValueError:
            raise ValueError(
                f"Box {side} has {arr.size} elements but the shape {list(dims)} has {numel}"
            ) from None

    @classmethod
    def _typed_box(
        cls, dims: tuple[int, ...], dt: str, numel: int, low: Any, high: Any
    ) -> SpaceSpec:
        if dt == "bool":
            lo_min, hi_max = 0, 1
        else:
            lo_min, hi_max = _int_range(dt)
        label = "Bool" if dt == "bool" else dt.capitalize()

        def conv(b: Any, side: str) -> np.ndarray[Any, Any] | None:
            if b is None:
                return None
            if isinstance(b, str):
                b = float(b)
            values = np.asarray(b, dtype=object).reshape(-1)
            if values.size == 0:
                raise ValueError(f"Box {side} bound must not be empty")
            out: list[int] = []
            for v in values:
                if isinstance(v, (bool, np.bool_, int, np.integer)):
                    iv = int(v)
                else:
                    fv = float(v)
                    if math.isnan(fv):
                        raise ValueError(f"Box {side} bound must not be NaN")
                    if math.isinf(fv):
                        return None if len(values) == 1 else _fail_inf(side)
                    iv = int(fv)  # truncation toward zero (SPC-13)
                if iv < lo_min or iv > hi_max:
                    raise ValueError(
                        f"Box: cannot encode integer Box bounds: value {iv} is out of range for {label}"
                    )
                out.append(iv)
            arr = (
                np.asarray(out, dtype=np_dtype(dt)) if dt != "bool" else np.asarray(out, dtype=bool)
            )
            if arr.size == 1:
                return arr.reshape(())
            if arr.size != numel:
                raise ValueError(
                    f"Box {side} has {arr.size} elements but the shape {list(dims)} has {numel}"
                )
            return arr.reshape(dims)

        lo, hi = conv(low, "low"), conv(high, "high")
        if lo is None and hi is None:
            return cls._new(
                "box", dims, dt, {"bounds_kind": "unbounded", "low": None, "high": None}
            )
        if lo is None or hi is None:
            raise ValueError(
                f"Box with integer dtype {dt} cannot have a one-sided infinite bound; "
                "give finite low and high (or both infinite for an unbounded box)"
            )
        if lo.ndim == 0 and hi.ndim == 0:  # scalar bounds: nothing of the shape's size is built
            if lo > hi:
                raise ValueError("Box low must be <= high everywhere; element 0 has low > high")
            return cls._new(
                "box",
                dims,
                dt,
                {"bounds_kind": "typed_uniform", "low": [lo.item()], "high": [hi.item()]},
            )
        lo_b, hi_b = np.broadcast_to(lo, dims), np.broadcast_to(hi, dims)
        if np.any(lo_b > hi_b):
            i = int(np.argmax((lo_b > hi_b).reshape(-1)))
            raise ValueError(f"Box low must be <= high everywhere; element {i} has low > high")
        if _all_same(lo_b) and _all_same(hi_b):  # canonical: equal element-wise bounds are uniform
            return cls._new(
                "box",
                dims,
                dt,
                {
                    "bounds_kind": "typed_uniform",
                    "low": [lo_b.flat[0].item()],
                    "high": [hi_b.flat[0].item()],
                },
            )
        return cls._new(
            "box",
            dims,
            dt,
            {
                "bounds_kind": "typed_elementwise",
                "low": np.array(lo_b).reshape(-1).tolist(),
                "high": np.array(hi_b).reshape(-1).tolist(),
            },
        )

    @classmethod
    def _discrete(cls, n: int, start: int = 0, dtype: Any = "int64") -> SpaceSpec:
        dt = dtype_name(dtype)
        if dt not in INTEGER_DTYPES:
            raise ValueError(f"Discrete dtype must be an integer dtype, got {dt!r}")
        n_i, start_i = _exact_int(n, "Discrete n"), _exact_int(start, "Discrete start")
        if n_i <= 0:
            raise ValueError(f"Discrete n must be positive, got {n_i}")
        lo, hi = _int_range(dt)
        if start_i < lo or start_i + n_i - 1 > hi:
            raise ValueError(
                f"Discrete range [{start_i}, {start_i + n_i - 1}] does not fit dtype {dt} [{lo}, {hi}]"
            )
        return cls._new("discrete", (), dt, {"n": n_i, "start": start_i})

    @classmethod
    def _multi_binary(cls, shape: Any, dtype: Any = "uint8") -> SpaceSpec:
        dims = _shape(shape, kind="MultiBinary", allow_rank0=False)
        dt = dtype_name(dtype)
        if dt not in _MULTI_BINARY_DTYPES:
            raise ValueError(
                f"MultiBinary dtype must be one of {list(_MULTI_BINARY_DTYPES)}, got {dt!r}"
            )
        return cls._new("multi_binary", dims, dt, {})

    @classmethod
    def _multi_discrete(cls, nvec: Any, dtype: Any = "int64", start: Any = None) -> SpaceSpec:
        dt = dtype_name(dtype)
        if dt not in INTEGER_DTYPES:
            raise ValueError(f"MultiDiscrete dtype must be an integer dtype, got {dt!r}")
        try:
            arr = np.array(nvec, dtype=object)
        except ValueError:
            raise ValueError("MultiDiscrete nvec rows must all have the same length") from None
        if (
            arr.dtype == object
            and arr.ndim >= 1
            and any(isinstance(x, (list, tuple, np.ndarray)) for x in arr.reshape(-1))
        ):
            raise ValueError("MultiDiscrete nvec rows must all have the same length")
        if arr.ndim == 0:
            arr = arr.reshape(1)
        dims = _shape(arr.shape, kind="MultiDiscrete", allow_rank0=False)
        flat = [_exact_int(x, "MultiDiscrete nvec entry") for x in arr.reshape(-1)]
        lo, hi = _int_range(dt)
        if start is None:
            starts = [0] * len(flat)
        else:
            s_arr = np.array(start, dtype=object)
            if s_arr.ndim == 0:
                s_arr = np.full(dims, s_arr.item(), dtype=object)
            if s_arr.shape != dims:
                raise ValueError(
                    f"MultiDiscrete start shape {list(s_arr.shape)} != nvec shape {list(dims)}"
                )
            starts = [_exact_int(x, "MultiDiscrete start entry") for x in s_arr.reshape(-1)]
        for i, (n, s) in enumerate(zip(flat, starts, strict=True)):
            if n <= 0:
                raise ValueError(f"MultiDiscrete nvec entries must be positive; nvec[{i}] = {n}")
            if s < lo or s + n - 1 > hi:
                raise ValueError(
                    f"MultiDiscrete entry {i} range [{s}, {s + n - 1}] does not fit dtype {dt}"
                )
        d: dict[str, Any] = {"nvec": np.asarray(flat, dtype=object).reshape(dims).tolist()}
        if any(starts):
            d["start"] = np.asarray(starts, dtype=object).reshape(dims).tolist()
        return cls._new("multi_discrete", dims, dt, d)

    @classmethod
    def _text(
        cls, max_length: int, min_length: int = 1, charset: str | Iterable[str] | None = None
    ) -> SpaceSpec:
        mx, mn = (
            _exact_int(max_length, "Text max_length"),
            _exact_int(min_length, "Text min_length"),
        )
        if mx <= 0:
            raise ValueError(f"Text max_length must be positive, got {mx}")
        if mn < 0:
            raise ValueError(f"Text min_length must be >= 0, got {mn}")
        if mn > mx:
            raise ValueError(f"Text min_length ({mn}) must be <= max_length ({mx})")
        if charset is None:
            cs = ""
        elif isinstance(charset, str):
            cs = charset
        else:
            items = list(charset)
            if isinstance(charset, (set, frozenset)):
                items = sorted(items)
            cs = "".join(str(c) for c in items)
        return cls._new(
            "text", (), _TEXT_DTYPE, {"min_length": mn, "max_length": mx, "charset": cs}
        )

    @classmethod
    def _dict(cls, spaces: Mapping[str, SpaceSpec]) -> SpaceSpec:
        children: dict[str, SpaceSpec] = {}
        for k, v in spaces.items():
            if not isinstance(k, str) or not k:
                raise ValueError(f"Dict keys must be non-empty strings, got {k!r}")
            if not isinstance(v, SpaceSpec):
                raise TypeError(f"Dict child {k!r} must be a space, got {type(v).__name__}")
            children[k] = v
        return cls._new("dict", (), _COMPOSITE_DTYPE, {"spaces": children})

    @classmethod
    def _tuple(cls, spaces: Iterable[SpaceSpec]) -> SpaceSpec:
        children = tuple(spaces)
        for i, v in enumerate(children):
            if not isinstance(v, SpaceSpec):
                raise TypeError(f"Tuple child {i} must be a space, got {type(v).__name__}")
        return cls._new("tuple", (), _COMPOSITE_DTYPE, {"spaces": children})

    @classmethod
    def _opaque(cls, type_name: str) -> SpaceSpec:
        """A space rlmesh does not know (``minigrid``'s ``MissionSpace``): plain-data values."""
        if not isinstance(type_name, str) or not 0 < len(type_name) <= 256:
            raise ValueError(
                f"an opaque space needs a type name of 1..256 characters, got {type_name!r}"
            )
        return cls._new("opaque", (), "object", {"type": type_name})

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> SpaceSpec:
        """Rebuild a spec from its ``_to_dict()`` form, validating everything.

        Raises:
            ValueError: the dict does not describe a valid space.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"space spec must be a mapping, got {type(d).__name__}")
        kind = d.get("kind")
        det = d.get("details") or {}
        shape = d.get("shape", [])
        dtype = d.get("dtype", "float32")
        if not isinstance(det, Mapping):
            raise ValueError("space spec details must be a mapping")
        try:
            if kind in ("box", "multi_binary", "multi_discrete"):
                _check_declared_elements(kind, shape)
            if kind == "box":
                kind_b = det.get("bounds_kind")
                if kind_b == "unbounded":
                    return cls._box(shape, dtype, None, None)
                if kind_b in ("uniform", "elementwise", "typed_uniform", "typed_elementwise"):
                    low, high = det.get("low"), det.get("high")
                    if kind_b.startswith("typed") and (
                        not isinstance(low, list) or not isinstance(high, list)
                    ):
                        raise ValueError("typed Box bounds must be lists")
                    if kind_b == "typed_uniform":
                        assert isinstance(low, list) and isinstance(high, list)
                        if len(low) != 1 or len(high) != 1:
                            raise ValueError("typed_uniform Box bounds must be one-element lists")
                        low, high = low[0], high[0]
                    return cls._box(shape, dtype, low, high)
                raise ValueError(f"unknown Box bounds_kind {kind_b!r}")
            if kind == "discrete":
                return cls._discrete(det["n"], det.get("start", 0), dtype)
            if kind == "multi_binary":
                return cls._multi_binary(shape, dtype)
            if kind == "multi_discrete":
                spec = cls._multi_discrete(det["nvec"], dtype, det.get("start"))
                if list(spec._shape) != list(shape):
                    raise ValueError(f"MultiDiscrete shape {shape} does not match nvec")
                return spec
            if kind == "text":
                max_length = det["max_length"]
                if isinstance(max_length, int) and max_length > MAX_SPACE_ELEMENTS:
                    raise ValueError(
                        f"Text max_length {max_length} is over the limit of {MAX_SPACE_ELEMENTS} "
                        "elements per space (MAX_SPACE_ELEMENTS)"
                    )
                return cls._text(
                    det["max_length"], det.get("min_length", 1), det.get("charset") or None
                )
            if kind == "dict":
                sp = det.get("spaces")
                if not isinstance(sp, Mapping):
                    raise ValueError("Dict spec needs a 'spaces' mapping")
                return cls._dict({k: cls._from_dict(v) for k, v in sp.items()})
            if kind == "tuple":
                sp = det.get("spaces")
                if not isinstance(sp, (list, tuple)):
                    raise ValueError("Tuple spec needs a 'spaces' list")
                return cls._tuple(cls._from_dict(v) for v in sp)
            if kind == "opaque":
                return cls._opaque(det["type"])
        except KeyError as exc:
            raise ValueError(f"{kind} space spec is missing {exc}") from None
        except TypeError as exc:
            raise ValueError(f"invalid {kind} space spec: {exc}") from None
        raise ValueError(f"unsupported RLMesh space kind: {kind!r}")

    # -- read access --------------------------------------------------------------

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def shape(self) -> list[int]:
        return list(self._shape)

    @property
    def dtype(self) -> str:
        return self._dtype

    def _details(self) -> dict[str, Any]:
        """Kind-specific details; nested children are ``SpaceSpec`` objects (SPC-3)."""
        d = dict(self._d)
        if self._kind == "dict":
            d["spaces"] = dict(self._d["spaces"])
        elif self._kind == "tuple":
            d["spaces"] = list(self._d["spaces"])
        elif self._kind == "multi_binary":
            if len(self._shape) == 1:
                d["size"] = self._shape[0]
            else:
                d["dims"] = list(self._shape)
        return d

    def _to_dict(self) -> dict[str, Any]:
        """``{"kind", "shape", "dtype", "details"}`` with nested children as dicts (SPC-3)."""
        d = self._details()
        if self._kind == "dict":
            d["spaces"] = {k: v._to_dict() for k, v in d["spaces"].items()}
        elif self._kind == "tuple":
            d["spaces"] = [v._to_dict() for v in d["spaces"]]
        return {"kind": self._kind, "shape": list(self._shape), "dtype": self._dtype, "details": d}

    # Internal accessors used by the codec, sampler and conformance checks.
    def _children(self) -> list[tuple[str | int, SpaceSpec]]:
        if self._kind == "dict":
            return list(self._d["spaces"].items())
        if self._kind == "tuple":
            return list(enumerate(self._d["spaces"]))
        return []

    def _bounds_arrays(self) -> tuple[Any, Any]:
        """Box bounds as numpy values (scalar or array of ``shape``), ``None`` where unbounded."""
        d = self._d
        kind = d["bounds_kind"]
        if kind == "unbounded":
            return None, None
        if kind == "uniform":
            return np.float64(d["low"]), np.float64(d["high"])
        if kind == "elementwise":
            return (
                np.asarray(d["low"], dtype=np.float64).reshape(self._shape),
                np.asarray(d["high"], dtype=np.float64).reshape(self._shape),
            )
        dt = bool if self._dtype == "bool" else self._np
        if kind == "typed_uniform":
            return np.asarray(d["low"][0], dtype=dt), np.asarray(d["high"][0], dtype=dt)
        return (
            np.asarray(d["low"], dtype=dt).reshape(self._shape),
            np.asarray(d["high"], dtype=dt).reshape(self._shape),
        )

    def to_space(self) -> Any:
        """The native sampler/validator wrapper for this spec."""
        return wrapper_class(self._kind)._from_spec(self, None)

    def to_gym_space(self) -> Any:
        """A best-effort Gymnasium space for this spec (needs the ``gymnasium`` extra)."""
        return gym_space_of(self)

    # -- identity -----------------------------------------------------------------

    def _key(self) -> Any:
        return _freeze(self._to_dict())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpaceSpec):
            return NotImplemented
        if self is other:
            return True
        if self._kind != other._kind or self._shape != other._shape or self._dtype != other._dtype:
            return False
        return bool(self._key() == other._key())

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._key())
        return self._hash

    def __reduce__(self) -> Any:
        return (SpaceSpec._from_dict, (self._to_dict(),))

    def __copy__(self) -> SpaceSpec:
        return self  # immutable: a copy is the same spec (an opaque leaf keeps its peer)

    def __deepcopy__(self, memo: Any) -> SpaceSpec:
        return self

    def __repr__(self) -> str:
        return spec_repr(self)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_hash", "_plans", "_peer"):  # lazily computed, or bound by a connection
            object.__setattr__(self, name, value)
            return
        raise AttributeError(f"SpaceSpec is immutable; cannot set {name!r}")


def value_nbytes(spec: SpaceSpec) -> int:
    """Bytes one value of ``spec`` takes (a Text at its ``max_length``): what a contract costs.

    >>> value_nbytes(SpaceSpec._box((2, 3), "float32", 0.0, 1.0)), value_nbytes(SpaceSpec._discrete(4))
    (24, 8)
    """
    kind = spec._kind
    if kind in ("dict", "tuple"):
        return sum(value_nbytes(child) for _, child in spec._children())
    if kind == "text":
        return int(spec._d["max_length"])
    if kind == "opaque":
        return 0  # plain data of no declared size
    itemsize = 1 if spec._dtype == "bool" else np_dtype(spec._dtype).itemsize
    return math.prod(spec._shape) * itemsize
