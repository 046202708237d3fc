"""Parsing the wire form of tags and specs: the strict and the tolerant door (ADP-44..54).

The *strict* door (``from_dict``, ``tag()``, ``EnvServer``) rejects unknown
fields not prefixed ``x-``/``ext.`` (``ext-`` too, ADP-6) and unknown leaf
kinds. The *tolerant* door (``resolve_from_contract`` reading a peer's raw
tags) keeps unknown kinds as :class:`UnknownLeaf` and records unknown bare
fields as a taint that resolve refuses (ADP-54/61). Envelopes (actions,
splits, fields, parts, custom encodings) are strict in both doors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ..errors import AdapterResolutionError
from ._action import Action, Actuator, CustomEncoding, Rotation
from ._check import MAX_COUNT, fail
from ._model import Concat, Constant, Custom, Image, State, Text
from ._roles import identity
from ._tags import Field, ImageTag, Split, StateTag, TextTag, UnknownLeaf

__all__ = [
    "action_from_dict",
    "build",
    "env_tags_parts",
    "model_spec_parts",
    "unknown_field_message",
    "unknown_fields",
]

_EXT_PREFIXES = ("x-", "ext.", "ext-")
_TAINT = "_rlmesh_unknown_fields"


def unknown_fields(obj: Any) -> tuple[str, ...]:
    """Bare unknown field names the tolerant door recorded on a leaf or actuator."""
    return tuple(getattr(obj, _TAINT, ()))


class _Obj:
    """A JSON object being read: tracks used keys, then judges the leftovers."""

    def __init__(self, raw: Any, where: str) -> None:
        if not isinstance(raw, Mapping):
            raise fail("invalid_tag", f"{where}: expected a JSON object, got {_json_type(raw)}")
        self.raw = raw
        self.where = where
        self.used: set[str] = set()

    def has(self, key: str) -> bool:
        return key in self.raw

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.raw.get(key, default)

    def require(self, key: str) -> Any:
        self.used.add(key)
        if key not in self.raw:
            raise self.invalid(f"missing required field {key!r}")
        return self.raw[key]

    def invalid(self, problem: str) -> AdapterResolutionError:
        """The ``invalid_tag`` error for ``problem`` in this object (prefixed with where it is)."""
        return fail("invalid_tag", f"{self.where}: {problem}")

    def finish(
        self, *, strict: bool, envelope: bool = False, label: str | None = None
    ) -> tuple[str, ...]:
        bare = [k for k in self.raw if k not in self.used and not str(k).startswith(_EXT_PREFIXES)]
        if bare and (strict or envelope):
            raise fail(
                "unsupported_kind",
                unknown_field_message(label or f'feature "{self.where}"', bare[0]),
            )
        return tuple(bare)


def unknown_field_message(subject: str, name: str) -> str:
    """``<subject> declares unrecognized field "<f>"; ...`` (ADP-54)."""
    return (
        f'{subject} declares unrecognized field "{name}"; this core does not understand it: '
        'upgrade rlmesh, drop the field, or prefix it with "x-" to mark it as an ignorable extension'
    )


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return f"the number {v}"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, (list, tuple)):
        return "an array"
    return "an object" if isinstance(v, Mapping) else type(v).__name__


def _bool(o: _Obj, key: str, default: bool = False) -> bool:
    v = o.get(key, default)
    if not isinstance(v, bool):
        raise o.invalid(f"{key} must be true or false, got {_json_type(v)}")
    return v


def _optional(o: _Obj, key: str, parse: Callable[[_Obj, str, Any], Any]) -> Any:
    """Field ``key`` of ``o`` read by ``parse(o, key, value)``, or ``None`` when absent or null."""
    v = o.get(key)
    return None if v is None else parse(o, key, v)


def _count_field(o: _Obj, key: str) -> Any:
    return _optional(o, key, _count)


def _count(o: _Obj, key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise o.invalid(f"{key} must be a non-negative integer, got {_json_type(v)}")
    if v < 0:
        raise o.invalid(f"{key} must be a non-negative integer, got {v}")
    if v > MAX_COUNT:
        raise o.invalid(f"{key} must be no larger than {MAX_COUNT}, got {v}")
    return v


def _pair_field(o: _Obj, key: str) -> Any:
    return _optional(o, key, _pair)


def _pair(o: _Obj, key: str, v: Any) -> tuple[float, float]:
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        n = len(v) if isinstance(v, (list, tuple)) else _json_type(v)
        raise o.invalid(f"{key} must be a pair of numbers [min, max], got {n}")
    lo, hi = _number(o, key, v[0]), _number(o, key, v[1])
    if v[0] > v[1]:
        raise o.invalid(
            f"{key} [{v[0]}, {v[1]}] must have min <= max (min must be <= max)",
        )
    return (lo, hi)


def _num_field(o: _Obj, key: str) -> Any:
    return _optional(o, key, _number)


def _number(o: _Obj, key: str, x: Any) -> float:
    """A JSON number (not a boolean) of field ``key``, as a float."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise o.invalid(f"{key}: expected a number, got {_json_type(x)}")
    return float(x)


def _scale_field(o: _Obj, name: str) -> Any:
    scalar, axis = _num_field(o, name), o.get(f"axis_{name}")
    if axis is None:
        return scalar
    if scalar is not None:
        raise o.invalid(f"give {name} or axis_{name}, not both")
    if not isinstance(axis, list) or not axis:
        raise o.invalid(f"axis_{name} must be a non-empty array of numbers")
    return tuple(_number(o, f"axis_{name}", x) for x in axis)


def _str_field(o: _Obj, key: str, *, required: bool = False) -> Any:
    v = o.require(key) if required else o.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str):
        raise o.invalid(f"{key} must be a string, got {_json_type(v)}")
    return v


def _reshape_field(o: _Obj) -> Any:
    return _optional(o, "reshape", _reshape)


def _reshape(o: _Obj, key: str, v: Any) -> list[int]:
    if not isinstance(v, list):
        raise o.invalid(f"reshape must be an array of sizes, got {_json_type(v)}")
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int):
            raise o.invalid(
                f"reshape sizes must each be a whole number, got {_json_type(x)}",
            )
    return v


def _labels_field(o: _Obj) -> Any:
    v = o.get("labels")
    if v is not None and not isinstance(v, list):
        raise o.invalid("labels must be an array of strings")
    return v


def _custom_encoding(raw: Any, where: str) -> CustomEncoding:
    o = _Obj(raw, f"{where} encoding")
    base = _str_field(o, "base", required=True)
    name = _str_field(o, "name") or "custom"
    arms = {a: _str_field(o, a) for a in ("from_base", "to_base")}
    o.finish(strict=True, envelope=True)
    if arms["from_base"] is None and arms["to_base"] is None:
        raise fail(
            "invalid_tag", f"{where}: a custom encoding needs at least one of from_base or to_base"
        )
    return build(CustomEncoding, where, base, name=name, **arms)


def _encoding_field(o: _Obj, *, allow_list: bool, allow_custom: bool) -> Any:
    v = o.get("encoding")
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, list):
        if not allow_list:
            raise o.invalid(
                "an action encoding is one name (or a custom encoding object), not a list",
            )
        if not v:
            raise o.invalid("encoding accept-set must name at least one encoding")
        if not all(isinstance(x, str) for x in v):
            raise o.invalid("encoding accept-set members must be names")
        return v
    if isinstance(v, Mapping) and allow_custom:
        return _custom_encoding(v, o.where)
    raise o.invalid(f"encoding must be a name or a list of names, got {_json_type(v)}")


_T = TypeVar("_T")


def build(cls: Callable[..., _T], where: str, *args: Any, **kwargs: Any) -> _T:
    """``cls(*args, **kwargs)``; a ``ValueError``/``TypeError`` becomes ``invalid_tag`` at ``where``."""
    try:
        return cls(*args, **kwargs)
    except AdapterResolutionError:
        raise
    except (ValueError, TypeError) as exc:
        raise fail("invalid_tag", f"{where}: {exc}") from None


def _taint(obj: _T, names: tuple[str, ...]) -> _T:
    if names:
        object.__setattr__(obj, _TAINT, names)
    return obj


# -- action ------------------------------------------------------------------------
def _actuator_from_dict(raw: Any, where: str, strict: bool) -> Actuator:
    o = _Obj(raw, where)
    role = o.get("role")
    if role is not None and not isinstance(role, str):
        raise fail("invalid_tag", f"{where}: role must be a string or null, got {_json_type(role)}")
    if not o.has("dim"):
        raise fail("invalid_tag", f"{where} (role {role!r}): missing required field 'dim'")
    kwargs = {
        "dim": _count_field(o, "dim"),
        "encoding": _encoding_field(o, allow_list=False, allow_custom=True),
        "range": _pair_field(o, "range"),
        "binary": _bool(o, "binary"),
        "scale": _scale_field(o, "scale"),
        "offset": _scale_field(o, "offset"),
        "invert": _bool(o, "invert"),
        "threshold": _num_field(o, "threshold"),
        "clip": _bool(o, "clip"),
        "fill": _num_field(o, "fill") or 0.0,
        "optional": _bool(o, "optional"),
        "frame": _str_field(o, "frame"),
        "reference": _str_field(o, "reference"),
        "part": _str_field(o, "part"),
        "labels": _labels_field(o),
    }
    label = f'{where.rsplit(" ", 1)[-1]} (role "{role}")' if role else where.rsplit(" ", 1)[-1]
    bare = o.finish(strict=strict, label=f"action {label}")
    return _taint(build(Actuator, f"{where} (role {role!r})", role, **kwargs), bare)


def action_from_dict(raw: Any, where: str = "action", *, strict: bool = True) -> Action:
    """Parse an action layout (ADP-28); a repeated role is refused (``more than once``)."""
    o = _Obj(raw, where)
    comps = o.require("components")
    if not isinstance(comps, list):
        raise fail("invalid_tag", f"{where}: components must be an array, got {_json_type(comps)}")
    clip = _pair_field(o, "clip")
    o.finish(strict=True, envelope=True)
    acts = [_actuator_from_dict(c, f"{where} component[{i}]", strict) for i, c in enumerate(comps)]
    if strict:
        seen: set[Any] = set()
        for a in acts:
            if a.role is None:
                continue
            key = identity(a.role, a.part)
            if key in seen:
                raise fail("duplicate", f"{where}: role {a.role!r} appears more than once")
            seen.add(key)
    return Action._unchecked(acts, clip)


# -- env tags -------------------------------------------------------------------------
def _field_from_dict(raw: Any, where: str) -> Field:
    o = _Obj(raw, where)
    role = o.get("role")
    if role is not None and not isinstance(role, str):
        raise fail("invalid_tag", f"{where}: role must be a string or null")
    kwargs = {
        "dim": _count_field(o, "dim"),
        "encoding": _encoding_field(o, allow_list=True, allow_custom=False),
        "range": _pair_field(o, "range"),
        "frame": _str_field(o, "frame"),
        "provenance": _str_field(o, "provenance"),
        "part": _str_field(o, "part"),
        "labels": _labels_field(o),
    }
    o.finish(strict=True, envelope=True)
    if role is None and (kwargs["encoding"] is not None or kwargs["range"] is not None):
        raise fail(
            "invalid_tag", f"{where}: a role-less field (a skip) cannot carry encoding or range"
        )
    if kwargs["dim"] is not None and kwargs["dim"] < 1:
        raise fail("invalid_tag", f"{where}: state field dim must be >= 1, got {kwargs['dim']}")
    return build(Field, where, role, **kwargs)


def _env_leaf_from_dict(raw: Mapping[str, Any], where: str, strict: bool) -> Any:
    kind = raw["type"]
    o = _Obj(raw, where)
    o.get("type")
    leaf: Any
    if kind == "image":
        leaf = build(ImageTag, where, _str_field(o, "role", required=True), o.get("layout", "hwc"),
                     _bool(o, "upside_down"), part=_str_field(o, "part"))  # fmt: skip
    elif kind == "state":
        leaf = build(StateTag, where, _str_field(o, "role", required=True),
                     _encoding_field(o, allow_list=True, allow_custom=False), _pair_field(o, "range"),
                     frame=_str_field(o, "frame"), provenance=_str_field(o, "provenance"),
                     part=_str_field(o, "part"), labels=_labels_field(o))  # fmt: skip
    elif kind == "text":
        leaf = build(TextTag, where, _str_field(o, "role", required=True))
    elif kind == "split":
        fields = o.require("fields")
        if not isinstance(fields, list) or not fields:
            raise fail("invalid_tag", f"{where}: a split needs at least one field")
        o.finish(strict=True, envelope=True)
        parsed = [_field_from_dict(f, f"{where} field[{i}]") for i, f in enumerate(fields)]
        try:
            return Split(*parsed)
        except ValueError as exc:
            raise fail("duplicate", f"{where}: {exc}") from None
    else:
        role = raw.get("role")
        if strict:
            raise fail(
                "unsupported_kind",
                f'observation "{where}" declares unrecognized kind "{kind}"; this core cannot build it '
                "(upgrade rlmesh, or drop the leaf)",
            )
        return UnknownLeaf(kind, dict(raw), role if isinstance(role, str) else None)
    return _taint(leaf, o.finish(strict=strict, label=f'feature "{where}"'))


def _tree_from_wire(raw: Any, path: str, leaf_fn: Callable[[Mapping[str, Any], str], Any]) -> Any:
    if isinstance(raw, list):
        return tuple(_tree_from_wire(v, f"{path}[{i}]", leaf_fn) for i, v in enumerate(raw))
    if isinstance(raw, Mapping):
        if "type" in raw:
            if not isinstance(raw["type"], str):
                raise fail(
                    "invalid_tag",
                    f'{path or "<root>"}: "type" must be a string, got {_json_type(raw["type"])}',
                )
            return leaf_fn(raw, path or "<root>")
        return {
            k: _tree_from_wire(v, f"{path}.{k}" if path else str(k), leaf_fn)
            for k, v in raw.items()
        }
    raise fail(
        "invalid_tag", f"{path or '<root>'}: expected an object or an array, got {_json_type(raw)}"
    )


def env_tags_parts(data: Any, *, strict: bool = True) -> tuple[Any, Action]:
    """The observation tree and action of an ``{"observation", "action"}`` document (ADP-44, ADP-54).

    ``EnvTags`` is built from them by ``env_tags_from_dict`` (in ``_env_tags``, above this module).
    """
    o = _Obj(data, "env tags")
    obs_raw, act_raw = o.require("observation"), o.require("action")
    o.finish(strict=True, envelope=True)
    obs = _tree_from_wire(obs_raw, "", lambda r, w: _env_leaf_from_dict(r, w, strict))
    return obs, action_from_dict(act_raw, "action", strict=strict)


# -- model spec ------------------------------------------------------------------------
def _part_from_wire(raw: Any, where: str) -> Any:
    if isinstance(raw, str):
        return raw
    o = _Obj(raw, where)
    if not o.has("role"):
        dim, fill = _count_field(o, "dim"), _num_field(o, "fill")
        o.finish(strict=True, envelope=True)
        if dim is None:
            raise fail("invalid_tag", f"{where}: a part needs a role (or dim for a constant block)")
        return build(Constant, where, dim=dim, fill=fill or 0.0)
    role = _str_field(o, "role", required=True)
    dim, index = _count_field(o, "dim"), _count_field(o, "index")
    if dim is not None and index is not None:
        raise fail("invalid_tag", f"{where} ({role!r}): a part cannot set both dim and index")
    pr = o.get("post_rotate")
    if pr is not None:
        po = _Obj(pr, f"{where} post_rotate")
        enc, val = _str_field(po, "encoding", required=True), po.require("value")
        po.finish(strict=True, envelope=True)
        pr = build(Rotation, f"{where} post_rotate", encoding=enc, value=val)
    prov = o.get("provenance")
    kwargs = {
        "encoding": _encoding_field(o, allow_list=True, allow_custom=True),
        "dim": dim,
        "index": index,
        "optional": _bool(o, "optional"),
        "range": _pair_field(o, "range"),
        "fill": _num_field(o, "fill") or 0.0,
        "post_rotate": pr,
        "scale": _scale_field(o, "scale"),
        "offset": _scale_field(o, "offset"),
        "frame": _str_field(o, "frame"),
        "provenance": tuple(prov) if isinstance(prov, list) else prov,
        "part": _str_field(o, "part"),
        "labels": _labels_field(o),
        "source": o.get("source", "observation"),
    }
    o.finish(strict=True, envelope=True)
    return (role, kwargs)


def _model_leaf_from_dict(raw: Mapping[str, Any], where: str, strict: bool) -> Any:
    kind = raw["type"]
    o = _Obj(raw, where)
    o.get("type")
    leaf: Any
    if kind == "image":
        stack = o.get("stack", 1)
        if isinstance(stack, bool) or not isinstance(stack, int) or not 1 <= stack <= 64:
            raise fail("invalid_tag", f"{where}: stack must be between 1 and 64, got {stack}")
        norm = o.get("normalize", False)
        if not isinstance(norm, bool):
            norm = _pair_field(o, "normalize")
        fill = _count_field(o, "fill")
        if fill is not None and fill > 255:
            raise fail("invalid_tag", f"{where}: fill must be a raw 8-bit level 0..255, got {fill}")
        render = o.get("render")
        offsets = o.get("offsets")
        leaf = build(
            Image, where, _str_field(o, "role", required=True),
            height=_count_field(o, "height"), width=_count_field(o, "width"), layout=o.get("layout", "hwc"),
            channels=_count_field(o, "channels"), dtype=o.get("dtype", "uint8"), normalize=norm,
            lead_dims=_count_field(o, "lead_dims") or 0, upside_down=_bool(o, "upside_down"),
            resample=o.get("resample", "bilinear"), allow_upscale=_bool(o, "allow_upscale"),
            fit=tuple(f) if isinstance(f := o.get("fit"), list) else f, optional=_bool(o, "optional"),
            fill=fill, stack=stack, crop=_num_field(o, "crop"), crop_area=_num_field(o, "crop_area"),
            crop_mode=o.get("crop_mode", "zoom"), jpeg_quality=_count_field(o, "jpeg_quality"),
            channel_order=o.get("channel_order", "rgb"),
            render=tuple(render) if isinstance(render, list) else render,
            offsets=tuple(offsets) if isinstance(offsets, list) else offsets,
            stack_pad=o.get("stack_pad", "first"), part=_str_field(o, "part"),
        )  # fmt: skip
    elif kind == "state":
        comps = o.require("components")
        if not isinstance(comps, list) or not comps:
            raise fail("invalid_tag", f"{where}: a state leaf needs at least one component")
        parts = [_part_from_wire(c, f"{where} component[{i}]") for i, c in enumerate(comps)]
        leaf_kw = {
            "pad_to": _count_field(o, "pad_to"),
            "dtype": o.get("dtype", "float32"),
            "reshape": _reshape_field(o),
            "container": o.get("container", "array"),
            "clip": _pair_field(o, "clip"),
        }
        if len(parts) == 1 and isinstance(parts[0], tuple):
            role, kw = parts[0]
            leaf = build(State, where, role, **kw, **leaf_kw)
        else:
            built = [
                build(State, where, p[0], **p[1]) if isinstance(p, tuple) else p for p in parts
            ]
            leaf = build(Concat, where, *built, **leaf_kw)
    elif kind == "text":
        leaf = build(
            Text,
            where,
            _str_field(o, "role", required=True),
            o.get("container", "str"),
            o.get("fill"),
        )
    elif kind == "custom":
        tr = _str_field(o, "transform", required=True)
        if tr.startswith("host:") or tr == "<local>":
            raise fail(
                "invalid_tag",
                f"{where}: custom transform {tr!r} is a host-internal placeholder, not an entrypoint",
            )
        leaf = build(Custom, where, entrypoint=tr)
    else:
        if strict:
            raise fail(
                "unsupported_kind",
                f'model input "{where}" declares unrecognized kind "{kind}"; this core cannot build it '
                "(upgrade rlmesh, or drop the leaf)",
            )
        role = raw.get("role")
        return UnknownLeaf(kind, dict(raw), role if isinstance(role, str) else None)
    return _taint(leaf, o.finish(strict=strict, label=f'feature "{where}"'))


def model_spec_parts(data: Any, *, strict: bool = True) -> tuple[Any, Action]:
    """The input tree and output action of an ``{"input", "output"}`` document (ADP-44, ADP-54).

    ``ModelSpec`` is built from them by ``model_spec_from_dict`` (in ``_model_spec``).
    """
    o = _Obj(data, "model spec")
    inp_raw, out_raw = o.require("input"), o.require("output")
    o.finish(strict=True, envelope=True)
    inp = _tree_from_wire(inp_raw, "", lambda r, w: _model_leaf_from_dict(r, w, strict))
    return inp, action_from_dict(out_raw, "output", strict=strict)
