"""Declared construction parameters: ``Param``, ``Vector``, ``ParamSpec`` and the param errors.

Two tiers describe what ``make(**kwargs)`` (or a model's ``load``) accepts
(AUTH-6..10, DELTA-58):

* the **signature tier**, free: every keyword parameter of the target
  function, type-checked when its annotation is one of ``int``/``float``/
  ``str``/``bool``;
* the **declared tier**: a :class:`ParamSpec` of :class:`Param` entries that
  add choices, vectors, descriptions and grouping, plus the ``extra`` door for
  undeclared keys.

The resolver that applies both tiers lives in :mod:`._resolve`.
"""

from __future__ import annotations

import inspect
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .. import _keys
from ..errors import RLMeshException
from ._sig import SCALARS, json_safe, signature_of

#: The public names: ``rlmesh.params`` and ``rlmesh.authoring`` re-export exactly these (A.8).
__all__ = [
    "PARAM_METADATA_KEY",
    "MissingParamError",
    "Param",
    "ParamError",
    "ParamSpec",
    "UnknownParamError",
    "Vector",
]

#: Metadata key under which a served env publishes its resolved binding (AUTH-10).
PARAM_METADATA_KEY = _keys.PARAM_BINDING_KEY

_EXTRA_MODES = ("forbid", "passthrough")
_UNIT_TOLERANCE = 1e-3  # AUTH-8: abs(norm(v) - 1) <= 1e-3


class ParamError(RLMeshException, ValueError):
    """A construction binding failed validation (AUTH-9); also a ``ValueError``."""


class MissingParamError(ParamError):
    """A required parameter (no default in the target signature) was not supplied (DELTA-58).

    Attributes:
        name: The missing parameter's name.
    """

    def __init__(self, name: str, message: str | None = None) -> None:
        self.name = name
        super().__init__(message or f"missing required parameter: {name!r}")


class UnknownParamError(ParamError):
    """Keys the target does not accept reached the ``extra`` door (AUTH-9).

    Attributes:
        names: The offending keys, sorted.
    """

    def __init__(self, names: Sequence[str], message: str | None = None) -> None:
        self.names: tuple[str, ...] = tuple(sorted(names))
        if message is None:
            message = (
                f"unknown parameter(s) {', '.join(map(repr, self.names))}; declare them in the "
                "ParamSpec or set extra='passthrough'"
            )
        super().__init__(message)


# -- Vector -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Vector:
    """A fixed-length float-vector ``Param`` type: ``Param("goal", Vector(3))`` (AUTH-8).

    Values are plain tuples of ``dim`` finite floats; a list (e.g. from JSON)
    is canonicalized to a tuple. ``unit=True`` requires unit L2 norm (within
    1e-3), the quaternion/direction case.

    Args:
        dim: Number of components, at least 1.
        unit: Require unit L2 norm.

    >>> Vector(3).coerce([1, 0, 0.5])
    (1.0, 0.0, 0.5)
    >>> Vector(2, unit=True).coerce((3, 4))
    Traceback (most recent call last):
    ...
    ValueError: expected a unit-norm vector, got norm 5
    """

    dim: int
    unit: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int):
            raise TypeError(
                f"Vector dim must be an int, got {type(self.dim).__name__} {self.dim!r}"
            )
        if self.dim < 1:
            raise ValueError(f"Vector dim must be >= 1, got {self.dim}")
        if not isinstance(self.unit, bool):
            raise TypeError(f"Vector unit must be a bool, got {self.unit!r}")

    @property
    def type_name(self) -> str:
        """The canonical type name used by describe: ``"vec<dim>"``."""
        return f"vec{self.dim}"

    def coerce(self, value: Any) -> tuple[float, ...]:
        """Validate ``value`` and return it as a tuple of ``dim`` floats.

        Raises:
            ValueError: wrong container, length, element type, non-finite or non-unit.
        """
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
                value = value.tolist()  # numpy arrays
            if not isinstance(value, (list, tuple)):
                raise ValueError(
                    f"expected a list or tuple of {self.dim} floats, got {type(value).__name__} {value!r}"
                )
        if len(value) != self.dim:
            raise ValueError(f"expected {self.dim} components, got {len(value)}: {list(value)!r}")
        out: list[float] = []
        for i, x in enumerate(value):
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                if hasattr(x, "item") and not isinstance(x, bool):
                    x = x.item()  # numpy scalars
                if isinstance(x, bool) or not isinstance(x, (int, float)):
                    raise ValueError(
                        f"component {i} must be a number, got {type(x).__name__} {x!r}"
                    )
            f = float(x)
            if not math.isfinite(f):
                raise ValueError(f"component {i} must be finite, got {f!r}")
            out.append(f)
        if self.unit:
            norm = math.sqrt(math.fsum(c * c for c in out))
            if abs(norm - 1.0) > _UNIT_TOLERANCE:
                raise ValueError(f"expected a unit-norm vector, got norm {norm:g}")
        return tuple(out)


# -- Param --------------------------------------------------------------------------------


def _canonical_type(t: type | str | Vector) -> str | Vector:
    if isinstance(t, Vector):
        return t
    if isinstance(t, type):
        for name, cls in SCALARS.items():
            if t is cls:
                return name
        raise TypeError(
            f"Param type must be int, float, str, bool, a string name or a Vector; got the class "
            f"{t.__qualname__}. Pass its name as a string (type={t.__name__!r}) to declare an "
            "opaque, unvalidated type"
        )
    if isinstance(t, str):
        if not t:
            raise ValueError("Param type must not be an empty string")
        return t
    raise TypeError(
        f"Param type must be a type, a string or a Vector, got {type(t).__name__} {t!r}"
    )


def coerce_value(kind: str | Vector, value: Any) -> Any:
    """Coerce one value to a canonical type (AUTH-9); raise ValueError with the reason."""
    if isinstance(kind, Vector):
        return kind.coerce(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if type(value).__name__ == "bool_":  # numpy.bool_
            return bool(value)
        raise ValueError(f"expected bool, got {type(value).__name__} {value!r}")
    if kind == "int":
        if isinstance(value, bool) or type(value).__name__ == "bool_":
            raise ValueError(f"expected int, got bool {value!r}")
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float) or type(value).__name__.startswith("float"):
            f = float(value)
            if math.isfinite(f) and f.is_integer():
                return int(f)
            raise ValueError(f"expected int, got non-integral float {value!r}")
        try:
            return operator.index(value)  # numpy integers
        except TypeError:
            raise ValueError(f"expected int, got {type(value).__name__} {value!r}") from None
    if kind == "float":
        if isinstance(value, bool) or type(value).__name__ == "bool_":
            raise ValueError(f"expected float, got bool {value!r}")
        if isinstance(value, (int, float)) or type(value).__name__.startswith(
            ("float", "int", "uint")
        ):
            try:
                f = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"expected float, got {type(value).__name__} {value!r}") from None
            if not math.isfinite(f):
                raise ValueError(f"expected a finite float, got {value!r}")
            return f
        raise ValueError(f"expected float, got {type(value).__name__} {value!r}")
    if kind == "str":
        if isinstance(value, str):
            return str(value)
        raise ValueError(f"expected str, got {type(value).__name__} {value!r}")
    return value  # "enum" and opaque custom types are not coerced


def _same(a: Any, b: Any) -> bool:
    """Choice equality where ``True`` is not ``1`` (AUTH-9)."""
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    try:
        return bool(a == b)
    except Exception:
        return False


@dataclass(frozen=True)
class Param:
    """One declared construction parameter: validated, presentable, sweepable (AUTH-6).

    The default lives in the ``make``/``load`` signature, never here: a
    parameter with a signature default is optional, one without is required.

    Args:
        name: The keyword name, matching the ``make``/``load`` parameter.
        type: ``int``/``float``/``str``/``bool`` (or their names), ``"enum"``
            (the domain is ``choices``), a :class:`Vector`, or any other string
            (an opaque type, not validated).
        choices: Allowed values (the sweep axis); a supplied value outside them
            is rejected. Coerced to ``type`` at construction.
        description: Help text for a dashboard widget.
        group: Optional UI grouping label (advisory).

    >>> Param("robots", int, choices=(1, 2.0)).choices
    (1, 2)
    >>> Param("mode", "enum", choices=("a", "b")).type_name
    'enum'
    """

    name: str
    type: type | str | Vector = "str"
    choices: tuple[Any, ...] | None = None
    description: str = ""
    group: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Param name must be a Python identifier string, got {self.name!r}")
        kind = _canonical_type(self.type)
        object.__setattr__(self, "_kind", kind)
        if self.choices is not None:
            if isinstance(self.choices, (str, bytes, Mapping)) or not isinstance(
                self.choices, (list, tuple, set, frozenset, range)
            ):
                raise TypeError(
                    f"Param {self.name!r}: choices must be a tuple or list of values, "
                    f"got {type(self.choices).__name__} {self.choices!r}"
                )
            coerced: list[Any] = []
            for c in self.choices:
                try:
                    coerced.append(coerce_value(kind, c))
                except ValueError as exc:
                    raise ValueError(
                        f"Param {self.name!r}: choice {c!r} is invalid: {exc}"
                    ) from None
            if not coerced:
                raise ValueError(
                    f"Param {self.name!r}: choices must not be empty (use None for no choices)"
                )
            object.__setattr__(self, "choices", tuple(coerced))
        elif kind == "enum":
            raise ValueError(
                f"Param {self.name!r}: type 'enum' needs choices=(...) (its whole domain)"
            )
        if not isinstance(self.description, str):
            raise TypeError(
                f"Param {self.name!r}: description must be a str, got {self.description!r}"
            )
        if self.group is not None and not isinstance(self.group, str):
            raise TypeError(f"Param {self.name!r}: group must be a str or None, got {self.group!r}")

    @property
    def type_name(self) -> str:
        """Canonical type name: ``int``/``float``/``str``/``bool``/``enum``/``vec<dim>``/custom."""
        kind = self._kind  # type: ignore[attr-defined]
        return kind.type_name if isinstance(kind, Vector) else str(kind)

    def coerce(self, value: Any) -> Any:
        """Coerce and choice-check one supplied value (AUTH-9).

        Raises:
            ParamError: the value has the wrong type or is not one of ``choices``.
        """
        try:
            out = coerce_value(self._kind, value)  # type: ignore[attr-defined]
        except ValueError as exc:
            raise ParamError(f"{self.name}: {exc}") from None
        if self.choices is not None and not any(_same(out, c) for c in self.choices):
            raise ParamError(f"{self.name}: {value!r} not in choices {list(self.choices)!r}")
        return out

    def to_dict(
        self, *, default: Any = inspect.Parameter.empty, required: bool = True
    ) -> dict[str, Any]:
        """Describe form (AUTH-16): name, type, required, then optional keys."""
        kind = self._kind  # type: ignore[attr-defined]
        d: dict[str, Any] = {"name": self.name, "type": self.type_name, "required": required}
        if isinstance(kind, Vector):
            d["dim"] = kind.dim
            if kind.unit:
                d["unit"] = True
        if default is not inspect.Parameter.empty:
            d["default"] = json_safe(default)
        if self.choices is not None:
            d["choices"] = json_safe(list(self.choices))
        if self.description:
            d["description"] = self.description
        if self.group is not None:
            d["group"] = self.group
        return d


# -- ParamSpec ----------------------------------------------------------------------------


class ParamSpec:
    """A factory's or model's declared construction-parameter surface (AUTH-7).

    ``extra`` governs undeclared keys that are not in the target signature
    either: ``"forbid"`` (default) rejects them before construction, so a typo
    fails early; ``"passthrough"`` forwards them through the target's own
    ``**kwargs``.

    Args:
        *params: The declared parameters; a name may appear only once.
        extra: ``"forbid"`` or ``"passthrough"``.

    Raises:
        ValueError: a parameter is declared twice, or ``extra`` is unknown.
        TypeError: an argument is not a :class:`Param`.

    >>> spec = ParamSpec(Param("a", int), Param("b"))
    >>> spec.names, spec.extra
    (('a', 'b'), 'forbid')
    >>> ParamSpec(Param("a"), Param("a"))
    Traceback (most recent call last):
    ...
    ValueError: ParamSpec declares parameter 'a' more than once
    """

    __slots__ = ("_by_name", "_extra", "_params")

    _params: tuple[Param, ...]
    _by_name: dict[str, Param]
    _extra: str

    def __init__(self, *params: Param, extra: Literal["forbid", "passthrough"] = "forbid") -> None:
        by_name: dict[str, Param] = {}
        for p in params:
            if not isinstance(p, Param):
                raise TypeError(
                    f"ParamSpec takes Param(...) entries, got {type(p).__name__} {p!r}; "
                    "write ParamSpec(Param('name', int), ...)"
                )
            if p.name in by_name:
                raise ValueError(f"ParamSpec declares parameter {p.name!r} more than once")
            by_name[p.name] = p
        if extra not in _EXTRA_MODES:
            raise ValueError(f"ParamSpec extra must be 'forbid' or 'passthrough', got {extra!r}")
        object.__setattr__(self, "_params", tuple(params))
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_extra", extra)

    @property
    def params(self) -> tuple[Param, ...]:
        """The declared parameters, in declaration order."""
        return self._params

    @property
    def extra(self) -> str:
        """``"forbid"`` or ``"passthrough"``."""
        return self._extra

    @property
    def names(self) -> tuple[str, ...]:
        """Declared parameter names, in declaration order."""
        return tuple(p.name for p in self._params)

    def get(self, name: str) -> Param | None:
        """The declared :class:`Param` called ``name``, or ``None``."""
        return self._by_name.get(name)

    def __iter__(self) -> Iterator[Param]:
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ParamSpec is immutable; cannot set {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # rebuilt through __init__ (pickle's default would set the slots one by one): an
        # EnvFactory with params travels to process-pool and Ray workers
        return (_rebuild_param_spec, (self._params, self._extra))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ParamSpec):
            return NotImplemented
        return self._params == other._params and self._extra == other._extra

    def __hash__(self) -> int:
        return hash((self._params, self._extra))

    def __repr__(self) -> str:
        inner = ", ".join(repr(p) for p in self._params)
        sep = ", " if inner else ""
        return f"ParamSpec({inner}{sep}extra={self._extra!r})"

    def to_dict(self, target: Callable[..., Any] | None = None) -> dict[str, Any]:
        """Describe form ``{"params": [...], "extra"}``; defaults/required come from ``target``."""
        sig = signature_of(target) if target is not None else None
        out = []
        for p in self._params:
            default: Any = inspect.Parameter.empty
            required = False
            if sig is not None and p.name in sig.params:
                default = sig.params[p.name].default
                required = default is inspect.Parameter.empty
            out.append(p.to_dict(default=default, required=required))
        return {"params": out, "extra": self._extra}


def _rebuild_param_spec(
    params: tuple[Param, ...], extra: Literal["forbid", "passthrough"]
) -> ParamSpec:
    return ParamSpec(*params, extra=extra)
