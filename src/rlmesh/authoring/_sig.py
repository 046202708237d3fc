"""Signature introspection shared by the params resolver and describe (AUTH-9, AUTH-16)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["SCALARS", "Sig", "annotation_name", "json_safe", "signature_of", "where"]

#: The four scalar types the signature tier type-checks.
SCALARS: dict[str, type] = {"int": int, "float": float, "str": str, "bool": bool}


class Sig:
    """The keyword surface of a target callable."""

    __slots__ = ("params", "var_kw")

    def __init__(self, params: dict[str, inspect.Parameter], var_kw: bool) -> None:
        self.params = params
        self.var_kw = var_kw


def signature_of(target: Callable[..., Any] | None) -> Sig | None:
    """Keyword parameters of ``target`` (``None`` when it cannot be introspected)."""
    if target is None:
        return None
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    params: dict[str, inspect.Parameter] = {}
    var_kw = False
    for p in sig.parameters.values():
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            var_kw = True
        elif p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            params[p.name] = p
    return Sig(params, var_kw)


def annotation_name(annotation: Any) -> str | None:
    """The scalar type name of an annotation (also stringized ones), else ``None``."""
    if annotation is inspect.Parameter.empty:
        return None
    if isinstance(annotation, str):
        name = annotation.strip().strip("'\"")
        name = name.rsplit(".", 1)[-1] if name.startswith("builtins.") else name
        return name if name in SCALARS else None
    for name, cls in SCALARS.items():
        if annotation is cls:
            return name
    return None


def where(target: Callable[..., Any] | None) -> str:
    if target is None:
        return "the target"
    qual = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    return f"{qual}()" if qual else repr(target)


def json_safe(value: Any) -> Any:
    """JSON scalars as-is; mappings (str keys) and lists/tuples recursively; anything else ``repr``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return repr(value)
