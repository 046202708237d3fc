"""Resolve a construction binding against a ``ParamSpec`` and the target signature (AUTH-9/10).

:func:`resolve_params` runs before construction, so a typo or a bad value
fails before anything heavy (a GPU, a simulator) is touched. It never fills
in defaults: the target's own signature applies them (DELTA-58).

>>> from rlmesh.params import Param, ParamSpec
>>> spec = ParamSpec(Param("robots", int, choices=(1, 2)))
>>> def make(robots: int = 1, seed: int = 0): ...
>>> resolve_params(spec, make, {"robots": 2.0})
{'robots': 2}
>>> resolve_params(spec, make, {"robtos": 2})
Traceback (most recent call last):
...
rlmesh.authoring._params.UnknownParamError: make() got unknown parameter 'robtos'; declare it in the ParamSpec or set extra='passthrough'
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from ._params import (
    PARAM_METADATA_KEY,
    MissingParamError,
    ParamError,
    ParamSpec,
    UnknownParamError,
    coerce_value,
)
from ._sig import annotation_name, json_safe, signature_of, where as _where_of

__all__ = ["binding_metadata", "resolve_params", "signature_tier"]


def signature_tier(
    target: Callable[..., Any] | None, spec: ParamSpec | None = None
) -> list[dict[str, Any]]:
    """Describe the target's keyword parameters that ``spec`` does not declare (AUTH-16).

    Each entry is ``{"name", "type", "default", "required"}``; the type comes
    from the annotation, else from a non-``None`` default, else ``"str"``.
    """
    sig = signature_of(target)
    if sig is None:
        return []
    out = []
    for name, p in sig.params.items():
        if spec is not None and name in spec:
            continue
        has_default = p.default is not inspect.Parameter.empty
        type_name = annotation_name(p.annotation)
        if type_name is None and p.annotation is not inspect.Parameter.empty:
            ann = p.annotation
            type_name = ann if isinstance(ann, str) else getattr(ann, "__name__", None)
            if type_name is None or getattr(ann, "__args__", None) is not None:
                type_name = str(ann)
        if type_name is None:
            type_name = type(p.default).__name__ if has_default and p.default is not None else "str"
        out.append(
            {
                "name": name,
                "type": type_name,
                "default": json_safe(p.default) if has_default else None,
                "required": not has_default,
            }
        )
    return out


def resolve_params(
    spec: ParamSpec | None,
    target: Callable[..., Any] | None,
    kwargs: Mapping[str, Any],
    *,
    where: str | None = None,
) -> dict[str, Any]:
    """Validate a construction binding before construction (AUTH-9, DELTA-58).

    Args:
        spec: The declared surface; ``None`` keeps the blind passthrough.
        target: The function that will receive the binding (``make``/``load``).
        kwargs: The supplied keyword arguments.
        where: How to name the target in messages (default: its qualname).

    Returns:
        The coerced binding. It contains only the supplied keys: defaults are
        applied by the target itself.

    Raises:
        UnknownParamError: undeclared keys with ``extra="forbid"``, or
            ``extra="passthrough"`` and the target has no ``**kwargs``.
        MissingParamError: a signature parameter without default was not given.
        ParamError: a value failed its type or choices check.
    """
    if spec is None:
        return dict(kwargs)
    if not isinstance(spec, ParamSpec):
        raise TypeError(f"params must be a ParamSpec or None, got {type(spec).__name__} {spec!r}")
    label = where or _where_of(target)
    sig = signature_of(target)
    if sig is None:  # un-introspectable target: validate what is declared, accept the rest
        return {k: (spec.get(k).coerce(v) if k in spec else v) for k, v in kwargs.items()}  # type: ignore[union-attr]

    for p in spec:
        if p.name not in sig.params and not sig.var_kw:
            if p.name in kwargs:
                raise ParamError(
                    f"{label} cannot take declared parameter {p.name!r}: it is not in the signature "
                    f"and there is no **kwargs; add {p.name!r} to the signature or drop the Param"
                )
            warnings.warn(
                f"ParamSpec declares {p.name!r} but {label} has no such parameter (and no **kwargs); "
                "the declaration is never used",
                UserWarning,
                stacklevel=3,
            )

    unknown = [k for k in kwargs if k not in spec and k not in sig.params]
    if unknown:
        names = sorted(unknown)
        listed = ", ".join(map(repr, names))
        plural = "s" if len(names) > 1 else ""
        if spec.extra == "forbid":
            raise UnknownParamError(
                names,
                f"{label} got unknown parameter{plural} {listed}; declare "
                f"{'them' if plural else 'it'} in the ParamSpec or set extra='passthrough'",
            )
        if not sig.var_kw:
            raise UnknownParamError(
                names,
                f"extra='passthrough' but {label.removesuffix('()')} has no **kwargs to forward: "
                f"{', '.join(names)}",
            )

    resolved: dict[str, Any] = {}
    for key, value in kwargs.items():
        declared = spec.get(key)
        if declared is not None:
            try:
                resolved[key] = declared.coerce(value)
            except ParamError as exc:
                raise ParamError(f"{label}: {exc}") from None
        elif key in sig.params:
            type_name = annotation_name(sig.params[key].annotation)
            if type_name is None:
                resolved[key] = value
                continue
            try:
                resolved[key] = coerce_value(type_name, value)
            except ValueError as exc:
                raise ParamError(f"{label}: {key}: {exc}") from None
        else:
            resolved[key] = value  # passthrough into **kwargs

    for name, sp in sig.params.items():
        if sp.default is inspect.Parameter.empty and name not in kwargs:
            raise MissingParamError(
                name,
                f"{label} missing required parameter: {name!r}; pass {name}=... "
                "(it has no default in the signature)",
            )
    return resolved


def binding_metadata(
    spec: ParamSpec | None, target: Callable[..., Any] | None, resolved: Mapping[str, Any]
) -> dict[str, Any]:
    """``{PARAM_METADATA_KEY: {"binding", "param_spec", "validated"}}`` for env metadata (AUTH-10)."""
    sig = signature_of(target)
    validated = {
        k: bool((spec is not None and k in spec) or (sig is not None and k in sig.params))
        for k in resolved
    }
    return {
        PARAM_METADATA_KEY: {
            "binding": {str(k): json_safe(v) for k, v in resolved.items()},
            "param_spec": None if spec is None else spec.to_dict(target),
            "validated": validated,
        }
    }
