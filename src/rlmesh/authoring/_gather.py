"""Shared reflection helpers for describe: entrypoints, badges, params and variants sections."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from .._target import load_target
from ._canonical import json_value
from ._params import ParamSpec
from ._resolve import resolve_params, signature_tier
from ._variants import Variant, normalize_catalog

__all__ = [
    "badge",
    "is_bare_callable",
    "load_entrypoint",
    "method_target",
    "params_section",
    "qualname_of",
    "variants_section",
]


def load_entrypoint(entrypoint: str) -> Any:
    """Import ``"package.module:Attr[.Sub]"`` (or ``"path/to/file.py:Attr"``) and return the attribute.

    Raises:
        ValueError: the string is not of the form ``module:Attr``.
        ImportError: the module or attribute cannot be imported.
    """
    return load_target(entrypoint, missing=ImportError)


def is_bare_callable(obj: Any) -> bool:
    """A function/lambda/partial rather than a factory or model class/instance."""
    return (
        not isinstance(obj, type)
        and not hasattr(type(obj), "predict")
        and not hasattr(type(obj), "make")
    )


def qualname_of(obj: Any) -> str:
    """``"module:QualName"`` of a class, routine or partial (instances report their class)."""
    target = obj.func if isinstance(obj, functools.partial) else obj
    if not isinstance(target, type) and not inspect.isroutine(target):
        target = type(target)
    module = getattr(target, "__module__", None) or "?"
    qual = (
        getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    )
    return f"{module}:{qual}"


def badge(exc: BaseException, *, with_type: bool = False) -> dict[str, Any]:
    """An error badge ``{"error"[, "error_type"]}`` standing in for a piece that failed (AUTH-18)."""
    msg = str(exc) or type(exc).__name__
    return {"error": msg, "error_type": type(exc).__name__} if with_type else {"error": msg}


class _SignatureOnly:
    """A stand-in that carries a method's signature without its ``self`` (for reflection)."""

    def __init__(self, sig: inspect.Signature, qualname: str) -> None:
        self.__signature__ = sig
        self.__qualname__ = qualname

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - never called
        raise TypeError("signature stand-in")


def method_target(cls: type, name: str) -> Callable[..., Any] | None:
    """``cls.name`` as a callable whose signature excludes ``self``, without instantiating."""
    raw = inspect.getattr_static(cls, name, None)
    if raw is None:
        return None
    attr = getattr(cls, name)
    if isinstance(raw, (staticmethod, classmethod)) or not callable(attr):
        return attr if callable(attr) else None
    try:
        sig = inspect.signature(attr)
    except (TypeError, ValueError):
        plain: Callable[..., Any] = attr
        return plain
    params = list(sig.parameters.values())
    if params and params[0].kind in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        params = params[1:]
    return _SignatureOnly(sig.replace(parameters=params), getattr(attr, "__qualname__", name))


def params_section(spec: Any, target: Callable[..., Any] | None) -> dict[str, Any]:
    """``{"param_spec", "signature_tier"}`` (AUTH-16)."""
    if spec is None:
        param_spec: Any = None
    elif isinstance(spec, ParamSpec):
        param_spec = spec.to_dict(target)
    else:
        param_spec = {"error": f"params must be a ParamSpec, got {type(spec).__name__}"}
    tier_spec = spec if isinstance(spec, ParamSpec) else None
    return {"param_spec": param_spec, "signature_tier": signature_tier(target, tier_spec)}


def variants_section(
    cls: type, spec: ParamSpec | None, target: Callable[..., Any] | None
) -> tuple[dict[str, Any] | None, list[Variant]]:
    """The variants section (AUTH-17) or ``None`` when the class defines neither hook (DECISION-4)."""
    has_params, has_variants = hasattr(cls, "enumerate_params"), hasattr(cls, "enumerate_variants")
    if not (has_params or has_variants):
        return None, []
    out: dict[str, Any] = {}
    catalog: list[Variant] = []
    if has_params:
        try:
            axes = cls.enumerate_params()  # type: ignore[attr-defined]
            if not isinstance(axes, Mapping):
                raise ValueError(
                    f"enumerate_params() must return a mapping of axis -> values, got {type(axes).__name__}"
                )
            out["variations"] = {str(k): _axis_values(v) for k, v in axes.items()}
        except Exception as exc:
            out["variations_error"] = badge(exc)["error"]
    if has_variants:
        try:
            catalog = normalize_catalog(cls.enumerate_variants())  # type: ignore[attr-defined]
        except Exception as exc:
            out["catalog_error"] = badge(exc)["error"]
            catalog = []
        else:
            entries = []
            for v in catalog:
                entry: dict[str, Any] = {
                    "id": v.id,
                    "params": json_value(v.params),
                    "metadata": json_value(v.metadata),
                }
                try:
                    resolve_params(spec, target, v.params)  # lint only; params stay verbatim
                except Exception as exc:
                    entry["error"] = badge(exc)["error"]
                entries.append(entry)
            out["catalog"] = entries
    return out, catalog


def _axis_values(values: Any) -> list[Any]:
    if (
        isinstance(values, (str, bytes))
        or not hasattr(values, "__iter__")
        or isinstance(values, Mapping)
    ):
        return [json_value(values)]
    return [json_value(v) for v in values]
