"""The join: validate env tags against the spaces and derive env features (ADP-55..66).

The tags stay sparse; widths, dtypes and bounds come from the spaces. The
observation tree is walked in lockstep with the space (dict keys in sorted
order); the action layout is checked against a Box action space.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._action import Action, Actuator, CustomEncoding
from ._check import fail
from ._roles import (
    ROTATION_DIMS,
    dim_law,
    fmt_pair,
    is_sanctioned,
)
from ._space_outline import SpaceOutline
from ._tags import ImageTag, Split, StateTag, TextTag, UnknownLeaf

__all__ = [
    "Advisory",
    "EnvActuator",
    "ImageFeature",
    "Joined",
    "StateFeature",
    "TextFeature",
    "UnknownFeature",
    "join",
    "render_path",
]

Path = tuple[str | int, ...]


class Advisory:
    """A non-fatal note from resolution (ADP-94): ``severity`` is ``info`` or ``caution``."""

    __slots__ = ("message", "severity")

    def __init__(self, severity: str, message: str) -> None:
        if severity not in ("info", "caution"):
            raise ValueError(f"Advisory severity must be 'info' or 'caution', got {severity!r}")
        self.severity = severity
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"Advisory({self.severity!r}, {self.message!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Advisory):
            return NotImplemented
        return (self.severity, self.message) == (other.severity, other.message)

    def __hash__(self) -> int:
        return hash((self.severity, self.message))


def render_path(path: Path) -> str:
    """``<root>``, ``robot.eef_pos``, ``sensors[0]``, ``[1].cam`` (section 1.1)."""
    if not path:
        return "<root>"
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        else:
            out += f".{seg}" if out else seg
    return out


@dataclass
class ImageFeature:
    path: Path
    role: str
    part: str | None
    layout: str
    upside_down: bool
    height: int
    width: int
    channels: int
    value_range: tuple[float, float] | None
    dtype: str
    shape: tuple[int, ...]


@dataclass
class StateFeature:
    path: Path
    role: str
    part: str | None
    provenance: str | None
    frame: str | None
    labels: tuple[str, ...] | None
    encodings: tuple[str, ...]  # the declared accept-set (may hold unknown names)
    native: str | None  # first recognized entry: the raw values' format
    width: int
    offset: int | None  # slice offset inside a Split leaf, else None (whole leaf)
    range: tuple[float, float] | None


@dataclass
class TextFeature:
    path: Path
    role: str


@dataclass
class UnknownFeature:
    path: Path
    role: str | None
    kind: str


@dataclass
class EnvActuator:
    index: int
    actuator: Actuator
    offset: int
    encoding: str | None  # the native name (a custom encoding's base)
    range: tuple[float, float] | None


@dataclass
class Joined:
    images: list[ImageFeature] = field(default_factory=list)
    states: list[StateFeature] = field(default_factory=list)
    texts: list[TextFeature] = field(default_factory=list)
    unknowns: list[UnknownFeature] = field(default_factory=list)
    actuators: list[EnvActuator] = field(default_factory=list)
    action_width: int = 0
    action_clip: tuple[float, float] | None = None
    advisories: list[Advisory] = field(default_factory=list)
    obs_root_kind: str = "dict"


def _mismatch(path: Path, expected: str, outline: SpaceOutline) -> Exception:
    return fail(
        "invalid_tag",
        f'observation "{render_path(path)}" is tagged as {expected} but the space is {outline.describe()}',
    )


def reconcile(
    key: str, space: tuple[float, float] | None, tag: tuple[float, float] | None
) -> tuple[float, float] | None:
    """ADP-65: both -> must agree (tag kept); one -> it; neither -> None."""
    if space is not None and tag is not None:
        for x, y in zip(space, tag, strict=True):
            if abs(x - y) > 1e-6 * max(abs(x), abs(y), 1.0):
                raise fail(
                    "invalid_tag",
                    f'"{key}" tag range {fmt_pair(tag)} disagrees with the space\'s finite bounds {fmt_pair(space)}',
                )
        return tag
    return tag if tag is not None else space


def _accept_set(enc: Any) -> tuple[str, ...]:
    if enc is None:
        return ()
    return (enc,) if isinstance(enc, str) else tuple(enc)


def _native(encs: tuple[str, ...], where: str) -> str | None:
    if len(encs) == 1 and encs[0] not in ROTATION_DIMS:
        raise fail(
            "encoding_mismatch",
            f'{where} declares unknown rotation encoding "{encs[0]}"; expected one of {sorted(ROTATION_DIMS)}',
        )
    return next((e for e in encs if e in ROTATION_DIMS), None)


class _Join:
    def __init__(self) -> None:
        self.out = Joined()

    def role_checks(self, role: str, path: Path) -> None:
        if role.startswith("action/"):
            raise fail(
                "invalid_tag",
                f'observation "{render_path(path)}" declares role "{role}", an action kind; an env observation '
                "cannot carry an action role (a model reads its previous action with Previous(...))",
            )
        self.nudge(role, f'observation "{render_path(path)}"')

    def nudge(self, role: str, subject: str) -> None:
        if not is_sanctioned(role):
            self.out.advisories.append(Advisory(
                "info",
                f'{subject} declares role "{role}", which is not in the role registry; it matches only the exact '
                'string -- use a registered role, or the "x/" namespace to mark it intentionally non-standard',
            ))  # fmt: skip

    def law(self, role: str, width: int, key: str) -> None:
        law = dim_law(role)
        if law is not None and law != width:
            raise fail(
                "dim_mismatch",
                f'"{key}" declares role "{role}", which is {law}-D by convention, but its width is {width}',
            )

    def walk(self, node: Any, outline: SpaceOutline, path: Path) -> None:
        if isinstance(node, Mapping):
            if outline.kind != "dict":
                raise _mismatch(path, "a Dict space", outline)
            for key in sorted(node):
                child = outline.child(key)
                if child is None:
                    raise fail(
                        "invalid_tag",
                        f'observation key "{render_path((*path, key))}" does not resolve to a leaf of the observation space',
                    )
                self.walk(node[key], child, (*path, key))
        elif isinstance(node, tuple):
            if outline.kind != "tuple":
                raise _mismatch(path, "a Tuple space", outline)
            if len(node) != len(outline.children):
                raise fail(
                    "invalid_tag",
                    f'observation tuple at "{render_path(path)}" declares {len(node)} item(s) but the space has {len(outline.children)}',
                )
            for i, child_node in enumerate(node):
                self.walk(child_node, outline.children[i], (*path, i))
        elif isinstance(node, ImageTag):
            self.image(node, outline, path)
        elif isinstance(node, StateTag):
            self.state(node, outline, path)
        elif isinstance(node, TextTag):
            if outline.kind != "text":
                raise _mismatch(path, "a text space", outline)
            self.role_checks(node.role, path)
            self.out.texts.append(TextFeature(path, node.role))
        elif isinstance(node, Split):
            self.split(node, outline, path)
        elif isinstance(node, UnknownLeaf):
            self.out.unknowns.append(UnknownFeature(path, node.role, node.kind))
        else:  # pragma: no cover - trees are validated on construction
            raise fail("invalid_tag", f'observation "{render_path(path)}": not a tag: {node!r}')

    def image(self, tag: ImageTag, outline: SpaceOutline, path: Path) -> None:
        if outline.kind != "box" or len(outline.shape) != 3:
            raise _mismatch(path, "an image (3-D Box)", outline)
        self.role_checks(tag.role, path)
        s = outline.shape
        h, w, c = (s[0], s[1], s[2]) if tag.layout == "hwc" else (s[1], s[2], s[0])
        other = "chw" if tag.layout == "hwc" else "hwc"
        other_c = s[0] if tag.layout == "hwc" else s[2]
        if c > 4 and 1 <= other_c <= 4:  # ADP-66 layout hint
            self.out.advisories.append(Advisory(
                "info",
                f'image "{tag.role}": shape implies {c} channels under layout={tag.layout}; this looks like '
                f'{other} -- declare layout="{other}" if so',
            ))  # fmt: skip
        self.out.images.append(
            ImageFeature(
                path,
                tag.role,
                tag.part,
                tag.layout,
                tag.upside_down,
                h,
                w,
                c,
                outline.uniform_range(),
                outline.dtype,
                s,
            )
        )

    def state(self, tag: StateTag, outline: SpaceOutline, path: Path) -> None:
        if not outline.numeric:
            raise _mismatch(path, "a numeric state", outline)
        self.role_checks(tag.role, path)
        p = render_path(path)
        width = outline.width
        encs = _accept_set(tag.encoding)
        native = _native(encs, f'state "{p}"')
        if native is not None and ROTATION_DIMS[native] != width:
            raise fail(
                "dim_mismatch",
                f'state "{p}" declares encoding {native} ({ROTATION_DIMS[native]} dims) but the space width is {width}',
            )
        self.law(tag.role, width, p)
        if tag.labels is not None and len(tag.labels) != width:
            raise fail(
                "dim_mismatch",
                f'state "{p}" declares {len(tag.labels)} labels but the space width is {width}',
            )
        rng = reconcile(p, outline.uniform_range(), tag.range)
        self.out.states.append(
            StateFeature(
                path,
                tag.role,
                tag.part,
                tag.provenance,
                tag.frame,
                tag.labels,
                encs,
                native,
                width,
                None,
                rng,
            )
        )

    def split(self, tag: Split, outline: SpaceOutline, path: Path) -> None:
        if not outline.numeric:
            raise _mismatch(path, "a numeric state", outline)
        p = render_path(path)
        total = sum(int(f.dim or 0) for f in tag.fields)
        if total != outline.width:
            raise fail(
                "dim_mismatch",
                f'state layout for "{p}" sums to {total} dims but the space width is {outline.width}',
            )
        off = 0
        for f in tag.fields:
            dim = int(f.dim or 0)
            if f.role is not None:
                self.role_checks(f.role, path)
                encs = _accept_set(f.encoding)
                native = _native(encs, f'state field "{f.role}" in "{p}"')
                if native is not None and ROTATION_DIMS[native] != dim:
                    raise fail(
                        "dim_mismatch",
                        f'state field "{f.role}" in "{p}" declares encoding {native} ({ROTATION_DIMS[native]} dims) '
                        f"but its dim is {dim}",
                    )
                self.law(f.role, dim, p)
                rng = reconcile(
                    f"{p}[{off}:{off + dim}]", outline.slice_range(off, off + dim), f.range
                )
                self.out.states.append(
                    StateFeature(
                        path,
                        f.role,
                        f.part,
                        f.provenance,
                        f.frame,
                        f.labels,
                        encs,
                        native,
                        dim,
                        off,
                        rng,
                    )
                )
            off += dim

    def action(self, action: Action, outline: SpaceOutline) -> None:
        if outline.kind != "box":
            raise fail(
                "invalid_tag", f"the action space must be a flat Box but it is {outline.describe()}"
            )
        total = sum(int(a.dim or 0) for a in action.components)
        if total != outline.width:
            raise fail(
                "dim_mismatch",
                f"action component dims sum to {total} but the action space width is {outline.width}",
            )
        self.out.action_width = outline.width
        self.out.action_clip = action.clip
        off = 0
        for i, a in enumerate(action.components):
            dim = int(a.dim or 0)
            enc: str | None = None
            if a.role is not None:
                self.nudge(a.role, f'action component "{a.role}"')
                raw = a.encoding
                enc = raw.base if isinstance(raw, CustomEncoding) else raw
                if enc is not None and enc not in ROTATION_DIMS:
                    raise fail(
                        "encoding_mismatch",
                        f'action component "{a.role}" declares unknown rotation encoding "{enc}"; '
                        f"expected one of {sorted(ROTATION_DIMS)}",
                    )
                if enc is not None and ROTATION_DIMS[enc] != dim:
                    raise fail(
                        "dim_mismatch",
                        f'action component "{a.role}" declares encoding {enc} ({ROTATION_DIMS[enc]} dims) but its dim is {dim}',
                    )
                self.law(a.role, dim, a.role)
                rng = reconcile(a.role, outline.slice_range(off, off + dim), a.range)
            else:
                rng = None
            self.out.actuators.append(EnvActuator(i, a, off, enc, rng))
            off += dim


def join(
    observation: Any, action: Action, obs_outline: SpaceOutline, act_outline: SpaceOutline
) -> Joined:
    """Join an env tag tree and action layout with their spaces (ADP-56..66).

    Raises:
        AdapterResolutionError: a tag disagrees with its space.
    """
    j = _Join()
    j.out.obs_root_kind = obs_outline.kind
    j.walk(observation, obs_outline, ())
    j.action(action, act_outline)
    return j.out
