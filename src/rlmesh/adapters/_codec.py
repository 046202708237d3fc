"""Canonical JSON wire form of tags and specs: rendering (parsing is in ``_codec_parse``).

Tree encoding (ADP-44): a dict node is a JSON object of child nodes, a tuple
node a JSON array, a leaf a JSON object with a string ``"type"``. Canonical
keys follow ADP-46 / DELTA-70 exactly: some are always emitted, the rest only
when set, which is what ``from_dict(x).to_dict() == x`` checks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._action import Action, Actuator, CustomEncoding
from ._check import fail
from ._model import Concat, Constant, Custom, Image, State, Text
from ._tags import ImageTag, Split, StateTag, TextTag, UnknownLeaf

if TYPE_CHECKING:
    from ._env_tags import EnvTags
    from ._model_spec import ModelSpec

__all__ = [
    "action_to_dict",
    "dumps",
    "env_tags_to_dict",
    "leaf_key",
    "loads",
    "model_spec_to_dict",
]


def dumps(data: Any) -> str:
    """Sorted-key JSON; NaN and Infinity are refused with ``ValueError`` (ADP-47)."""
    try:
        return json.dumps(data, sort_keys=True, allow_nan=False, separators=(",", ":"))
    except ValueError as exc:
        raise ValueError(
            f"spec is not JSON-serializable (NaN/Infinity are not allowed): {exc}"
        ) from None


def loads(text: str | bytes) -> Any:
    """Parse JSON text; a syntax error is an ``AdapterResolutionError``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail("invalid_tag", f"spec JSON is malformed: {exc}") from None


# -- rendering helpers --------------------------------------------------------------
def _pair(p: tuple[float, float] | None) -> list[float] | None:
    return None if p is None else [float(p[0]), float(p[1])]


def _enc_to_wire(enc: Any) -> Any:
    if isinstance(enc, CustomEncoding):
        d: dict[str, Any] = {"base": enc.base}
        if enc.name != "custom":
            d["name"] = enc.name
        for arm in ("from_base", "to_base"):
            v = getattr(enc, arm)
            if v is not None:
                d[arm] = "<local>" if callable(v) else v
        return d
    if isinstance(enc, tuple):
        return list(enc)
    return enc


def _put_scale(d: dict[str, Any], name: str, v: Any) -> None:
    if v is None:
        return
    if isinstance(v, tuple):
        d[f"axis_{name}"] = [float(x) for x in v]
    else:
        d[name] = float(v)


def _put_opt(d: dict[str, Any], obj: Any, *names: str) -> None:
    for n in names:
        v = getattr(obj, n)
        if v is not None:
            d[n] = list(v) if isinstance(v, tuple) else v


def actuator_to_dict(a: Actuator) -> dict[str, Any]:
    d: dict[str, Any] = {
        "dim": a.dim,
        "encoding": _enc_to_wire(a.encoding),
        "range": _pair(a.range),
        "binary": a.binary,
    }
    if a.role is not None:
        d["role"] = a.role
    _put_scale(d, "scale", a.scale)
    _put_scale(d, "offset", a.offset)
    if a.fill != 0.0:
        d["fill"] = float(a.fill)
    if a.invert:
        d["invert"] = True
    if a.threshold is not None:
        d["threshold"] = float(a.threshold)
    if a.clip:
        d["clip"] = True
    if a.optional:
        d["optional"] = True
    _put_opt(d, a, "frame", "reference", "part", "labels")
    return d


def action_to_dict(action: Action) -> dict[str, Any]:
    """``{"components": [...], "clip": null | [lo, hi]}`` (ADP-46)."""
    return {
        "components": [actuator_to_dict(a) for a in action.components],
        "clip": _pair(action.clip),
    }


def _env_leaf_to_dict(leaf: Any) -> dict[str, Any]:
    if isinstance(leaf, ImageTag):
        d: dict[str, Any] = {
            "type": "image",
            "role": leaf.role,
            "layout": leaf.layout,
            "upside_down": leaf.upside_down,
        }
        _put_opt(d, leaf, "part")
        return d
    if isinstance(leaf, StateTag):
        d = {
            "type": "state",
            "role": leaf.role,
            "encoding": _enc_to_wire(leaf.encoding),
            "range": _pair(leaf.range),
        }
        _put_opt(d, leaf, "frame", "provenance", "part", "labels")
        return d
    if isinstance(leaf, TextTag):
        return {"type": "text", "role": leaf.role}
    if isinstance(leaf, Split):
        fields = []
        for f in leaf.fields:
            fd: dict[str, Any] = {
                "role": f.role,
                "dim": f.dim,
                "encoding": _enc_to_wire(f.encoding),
                "range": _pair(f.range),
            }
            _put_opt(fd, f, "frame", "provenance", "part", "labels")
            fields.append(fd)
        return {"type": "split", "fields": fields}
    if isinstance(leaf, UnknownLeaf):
        return dict(leaf.raw)
    raise TypeError(f"not an env tag leaf: {leaf!r}")


def _tree_to_wire(node: Any, leaf_fn: Callable[[Any], Any]) -> Any:
    if isinstance(node, Mapping):
        return {k: _tree_to_wire(v, leaf_fn) for k, v in node.items()}
    if isinstance(node, tuple):
        return [_tree_to_wire(v, leaf_fn) for v in node]
    return leaf_fn(node)


def env_tags_to_dict(tags: EnvTags) -> dict[str, Any]:
    """The canonical ``{"observation", "action"}`` document (ADP-44)."""
    return {
        "observation": _tree_to_wire(tags.observation, _env_leaf_to_dict),
        "action": action_to_dict(tags.action),
    }


def _part_to_wire(p: Any) -> Any:
    if isinstance(p, str):
        return p
    if isinstance(p, Constant):
        d: dict[str, Any] = {"dim": p.dim}
        if p.fill != 0.0:
            d["fill"] = float(p.fill)
        return d
    s: State = p
    d = {"role": s.role}
    if s.encoding is not None:
        d["encoding"] = _enc_to_wire(s.encoding)
    for n in ("dim", "index"):
        if getattr(s, n) is not None:
            d[n] = getattr(s, n)
    if s.range is not None:
        d["range"] = _pair(s.range)
    if s.optional:
        d["optional"] = True
    if s.source != "observation":
        d["source"] = s.source
    if s.fill != 0.0:
        d["fill"] = float(s.fill)
    if s.post_rotate is not None:
        d["post_rotate"] = {"encoding": s.post_rotate.encoding, "value": list(s.post_rotate.value)}
    _put_scale(d, "scale", s.scale)
    _put_scale(d, "offset", s.offset)
    _put_opt(d, s, "frame", "provenance", "part", "labels")
    return s.role if len(d) == 1 else d


def _model_leaf_to_dict(leaf: Any) -> dict[str, Any]:
    if isinstance(leaf, Image):
        d: dict[str, Any] = {
            "type": "image", "role": leaf.role, "height": leaf.height, "width": leaf.width,
            "layout": leaf.layout, "dtype": leaf.dtype,
            "normalize": leaf.normalize if isinstance(leaf.normalize, bool) else _pair(leaf.normalize),
            "lead_dims": leaf.lead_dims, "upside_down": leaf.upside_down, "resample": leaf.resample,
        }  # fmt: skip
        if leaf.channels is not None:
            d["channels"] = leaf.channels
        for n in ("allow_upscale", "optional"):
            if getattr(leaf, n):
                d[n] = True
        if leaf.fit is not None:
            d["fit"] = list(leaf.fit) if isinstance(leaf.fit, tuple) else leaf.fit
        if leaf.fill is not None:
            d["fill"] = leaf.fill
        if leaf.stack != 1:
            d["stack"] = leaf.stack
        for n, default in (("crop_mode", "zoom"), ("channel_order", "rgb"), ("stack_pad", "first")):
            if getattr(leaf, n) != default:
                d[n] = getattr(leaf, n)
        _put_opt(d, leaf, "crop", "crop_area", "jpeg_quality", "render", "offsets", "part")
        return d
    if isinstance(leaf, (State, Concat)):
        parts = leaf.parts
        d = {"type": "state", "components": [_part_to_wire(p) for p in parts], "dtype": leaf.dtype}
        _put_opt(d, leaf, "pad_to", "reshape")
        if leaf.container != "array":
            d["container"] = leaf.container
        if leaf.clip is not None:
            d["clip"] = _pair(leaf.clip)
        if isinstance(leaf, State):  # the part renders only part fields
            d["components"] = [_part_to_wire(_strip_leaf_fields(leaf))]
        return d
    if isinstance(leaf, Text):
        return {"type": "text", "role": leaf.role, "container": leaf.container, "fill": leaf.fill}
    if isinstance(leaf, Custom):
        if leaf.transform is not None:
            raise ValueError(
                "a Custom(transform=<callable>) input cannot be serialized: a local callable has no wire form; "
                "keep the spec in-process or use a declarative leaf"
            )
        raise ValueError(
            f"a Custom(entrypoint={leaf.entrypoint!r}) input cannot be published: entrypoints are not trusted "
            "across processes; resolve it locally with trust_entrypoints=True"
        )
    if isinstance(leaf, UnknownLeaf):
        return dict(leaf.raw)
    raise TypeError(f"not a model input leaf: {leaf!r}")


def _strip_leaf_fields(s: State) -> State:
    import dataclasses

    return dataclasses.replace(
        s, pad_to=None, dtype="float32", reshape=None, container="array", clip=None
    )


def model_spec_to_dict(spec: ModelSpec) -> dict[str, Any]:
    """The canonical ``{"input", "output"}`` document (ADP-44/48)."""
    return {
        "input": _tree_to_wire(spec.input, _model_leaf_to_dict),
        "output": action_to_dict(spec.output),
    }


def _part_key(p: Any) -> Any:
    if isinstance(p, str):
        return _strip_leaf_fields(State(p))
    if isinstance(p, State):
        return _strip_leaf_fields(p)
    return p


def leaf_key(leaf: Any) -> Any:
    """Equality key of a model leaf: a ``State`` equals the one-part ``Concat`` it encodes."""
    if isinstance(leaf, (State, Concat)):
        parts = (
            (_part_key(leaf),)
            if isinstance(leaf, State)
            else tuple(_part_key(p) for p in leaf.parts)
        )
        return ("state", parts, leaf.pad_to, leaf.dtype, leaf.reshape, leaf.container, leaf.clip)
    if isinstance(leaf, UnknownLeaf):
        return ("unknown", id(leaf))
    return leaf
