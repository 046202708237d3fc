"""``describe`` / ``describe_json``: the ``rlmesh.describe.v1`` envelope of an env or model.

Gathering is best-effort (AUTH-18): every piece that fails becomes an error
badge (``{"error": msg}``) and the envelope is always produced. A MODEL is
never constructed (classes are reflected, AUTH-13); an ENV factory builds ONE
representative env to read its spaces, then closes it, unless the caller
passes the already-built ``served_env`` or asks for ``build_env=False``.
The bytes are produced by :mod:`._canonical` (AUTH-20).
"""

from __future__ import annotations

import json
from typing import Any

from ..models._sentinels import NO_ADAPTER
from ._canonical import build_envelope, validate_generated_at
from ._describe_env import env_pieces
from ._gather import (
    badge,
    is_bare_callable,
    load_entrypoint,
    method_target,
    params_section,
    qualname_of,
    variants_section,
)
from ._params import ParamSpec
from ._runtime import runtime_section

__all__ = ["CORNERS", "describe", "describe_json", "load_entrypoint"]

#: Model prediction corners in canonical order (AUTH-15).
CORNERS = ("predict", "predict_chunk", "predict_batch", "predict_chunk_batch")
_KINDS = ("env", "model")


# -- model gathering --------------------------------------------------------------------------


def _corners(obj: Any, cls: type) -> list[str]:
    """Corners the class itself authors, canonical order; synthesized ones excluded (AUTH-15)."""
    published = getattr(obj, "__rlmesh_corners__", None)
    if published is None and not isinstance(obj, type):
        # an rlmesh Model instance knows what it authored (e.g. Model(fn) -> predict only)
        published = getattr(getattr(obj, "__dict__", {}).get("_corners"), "defined", None)
    if published is not None:
        return [c for c in CORNERS if c in set(published)]
    out = []
    for name in CORNERS:
        if (
            not isinstance(obj, type)
            and name in getattr(obj, "__dict__", {})
            and callable(obj.__dict__[name])
        ):
            out.append(name)  # duck policy instance attribute
            continue
        owner = next((k for k in cls.__mro__ if name in k.__dict__), None)
        if owner is None or owner is object:
            continue
        fn = owner.__dict__[name]
        if getattr(fn, "__rlmesh_synthesized__", False):
            continue
        if (owner.__module__ or "").split(".")[0] == "rlmesh" and owner.__module__ != "__main__":
            continue  # the library's base/derived corner, not the author's
        out.append(name)
    return out


def _model_spec(spec: Any) -> Any:
    if spec is None:
        return None
    if not hasattr(spec, "to_dict"):
        if spec is NO_ADAPTER or repr(spec) == "NO_ADAPTER":
            return None
        return {"error": f"spec must be a ModelSpec, NO_ADAPTER or None, got {type(spec).__name__}"}
    try:
        return spec.to_dict()
    except Exception as exc:
        return badge(exc)


def _model_pieces(obj: Any) -> tuple[dict[str, Any], type | None]:
    if is_bare_callable(obj):  # a bare predict callable
        bare: dict[str, Any] = {"param_spec": None, "signature_tier": []}
        return {"target": None, "model_spec": None, "corners": ["predict"], "params": bare}, None
    cls = obj if isinstance(obj, type) else type(obj)
    holder: Any = obj
    if isinstance(obj, type):
        try:
            holder = object.__new__(cls)  # reflect, never construct (AUTH-13)
        except TypeError:
            holder = cls
    try:
        own = getattr(holder, "__dict__", {})
        # instance spec preferred (an rlmesh Model keeps its resolved spec in ``_spec``)
        spec = own["_spec"] if own.get("_spec") is not None else getattr(holder, "spec", None)
    except Exception as exc:
        model_spec: Any = badge(exc)
    else:
        model_spec = _model_spec(spec)
    pieces: dict[str, Any] = {"target": None, "model_spec": model_spec}
    corners = _corners(obj, cls)
    if corners:
        pieces["corners"] = corners
    chunk = getattr(cls, "native_chunk", None)
    if isinstance(chunk, int) and not isinstance(chunk, bool):
        pieces["native_chunk"] = chunk
    params = getattr(cls, "params", None)
    target = method_target(cls, "load")
    pieces["params"] = params_section(params, target)
    variants, _ = variants_section(cls, params if isinstance(params, ParamSpec) else None, target)
    if variants is not None:
        pieces["variants"] = variants
    return pieces, cls


# -- public entry points ----------------------------------------------------------------------


def describe_json(
    obj: object,
    *,
    kind: str | None = None,
    generated_at: str | None = None,
    served_env: Any = None,
    workflow_edition: str | None = None,
    build_env: bool = True,
    include_runtime: bool = True,
) -> str:
    """Like :func:`describe`, but return the canonical JSON string verbatim.

    This is the byte-stable artifact: persist it as-is (no ``json.loads``
    round trip) when baking it into OCI metadata.

    Args:
        obj: An ``EnvFactory``/``Model`` class or instance, a bare make/predict
            callable (``kind`` required), or a ``"module:Class"`` entrypoint.
        kind: ``"env"`` or ``"model"``; auto-detected for factories and models.
        generated_at: Optional RFC-3339 timestamp; omit it for a
            content-addressable artifact.
        served_env: An already-built env (or list of lanes) to read spaces from
            instead of building one; it is neither rebuilt nor closed (DELTA-53).
        workflow_edition: A declaration the caller already resolved (``""`` =
            none), reported verbatim (DELTA-53).
        build_env: ``False`` skips the representative ``make()`` entirely, so
            describe never touches a GPU; ``env_spec`` then carries a badge (O-14).
        include_runtime: ``False`` omits the machine-specific ``runtime`` section,
            so two machines produce identical bytes (O-14).

    Raises:
        ValueError: bad ``kind`` or ``generated_at``.
        TypeError: a bare callable without ``kind``, or an object that is
            neither an env factory nor a model.
    """
    if kind is not None and kind not in _KINDS:
        raise ValueError(f"describe kind must be 'env' or 'model', got {kind!r}")
    if generated_at is not None:
        validate_generated_at(generated_at)
    entrypoint: str | None = None
    if isinstance(obj, str):
        entrypoint = obj
        obj = load_entrypoint(obj)
    if kind is None:
        owner = obj if isinstance(obj, type) else type(obj)
        if hasattr(owner, "predict"):
            kind = "model"
        elif hasattr(owner, "make"):
            kind = "env"
        elif callable(obj) and not isinstance(obj, type):
            raise TypeError(
                f"cannot tell whether {qualname_of(obj)} is an env make() or a model predict(); "
                "pass kind='env' or kind='model'"
            )
        else:
            raise TypeError(
                f"{qualname_of(obj)} is neither an EnvFactory (no make) nor a Model (no predict); "
                "pass an EnvFactory/Model class or instance, or a callable with kind='env'/'model'"
            )
    if kind == "env":
        pieces, cls = env_pieces(obj, served_env=served_env, build_env=build_env)
    else:
        pieces, cls = _model_pieces(obj)
    pieces["target"] = {"entrypoint": entrypoint, "qualname": qualname_of(obj)}
    if include_runtime:
        pieces["runtime"] = runtime_section(
            declared=workflow_edition,
            class_edition=getattr(cls, "workflow_edition", None) if cls is not None else None,
        )
    return build_envelope(kind, pieces, generated_at)


def describe(
    obj: object,
    *,
    kind: str | None = None,
    generated_at: str | None = None,
    build_env: bool = True,
    include_runtime: bool = True,
) -> dict[str, Any]:
    """Return an env's or model's full metadata envelope as a dict (AUTH-12).

    ``obj`` may be an ``EnvFactory``/``Model`` class or instance, a bare
    make/predict callable, or a ``"module:Class"`` entrypoint string. ``kind``
    (``"env"``/``"model"``) is auto-detected for a factory or model and
    required for a bare callable. ``generated_at`` is an optional RFC-3339
    timestamp. The dict is parsed from the canonical string; use
    :func:`describe_json` when you need the exact bytes.

    Example:
        >>> from rlmesh.authoring import EnvFactory
        >>> class Tiny(EnvFactory):
        ...     def make(self, size: int = 3):
        ...         raise RuntimeError("no simulator here")
        >>> d = describe(Tiny, include_runtime=False)
        >>> d["kind"], d["env_spec"]["error_type"], d["params"]["signature_tier"][0]["name"]
        ('env', 'RuntimeError', 'size')
    """
    doc: dict[str, Any] = json.loads(
        describe_json(
            obj,
            kind=kind,
            generated_at=generated_at,
            build_env=build_env,
            include_runtime=include_runtime,
        )
    )
    return doc
