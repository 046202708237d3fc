"""Environment tag leaves and tag trees: one role per space entry plus the facts a space cannot carry (ADP-20..27).

The leaves (:class:`ImageTag`, :class:`StateTag`, :class:`TextTag`, :class:`Split` of
:class:`Field`) and the tree rules (validation, duplicate roles, value keys) shared by
the codec; the :class:`~rlmesh.adapters.EnvTags` document that holds a tree lives in
``_env_tags``, above the codec.

>>> Split(Field(EEF_POS, 3), Field(dim=2)).dim
5
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, Union

from ._action import CustomEncoding
from ._check import (
    check_choice,
    check_encoding_set,
    check_labels,
    check_optional_str,
    check_pair,
    check_role,
    check_width,
)
from ._roles import (
    EEF_POS,
    FRAMES,
    IMAGE_LAYOUTS,
    PROVENANCES,
    identity,
)

__all__ = [
    "Field",
    "ImageTag",
    "ObsLeaf",
    "ObsNode",
    "ObservationRoles",
    "Split",
    "StateTag",
    "TextTag",
    "UnknownLeaf",
]


def _env_encoding(value: Any, where: str) -> str | tuple[str, ...] | None:
    if isinstance(value, CustomEncoding):
        raise TypeError(
            f"{where}: a CustomEncoding is a model-side shim; an env declares its native encoding by name"
        )
    return check_encoding_set(value, f"{where} encoding")


@dataclass(frozen=True)
class ImageTag:
    """One camera: ``ImageTag(role, layout="hwc", upside_down=False, *, part=None)`` (ADP-22).

    Height, width and channels come from the space (a 3-D Box). ``upside_down``
    means the camera renders rotated 180 degrees.
    """

    role: str
    layout: str = "hwc"
    upside_down: bool = False
    _: KW_ONLY
    part: str | None = None

    def __post_init__(self) -> None:
        check_role(self.role, "ImageTag role")
        check_choice(self.layout, IMAGE_LAYOUTS, f"ImageTag {self.role!r} layout")
        object.__setattr__(self, "upside_down", bool(self.upside_down))
        if self.part is not None:
            check_role(self.part, f"ImageTag {self.role!r} part")


@dataclass(frozen=True)
class StateTag:
    """One numeric leaf: ``StateTag(role, encoding=None, range=None, *, frame, provenance, part, labels)``.

    ``encoding`` is a rotation accept-set whose first recognized entry is the
    env's native encoding (ADP-23); ``range`` supplies bounds only where the
    space lacks finite uniform bounds.
    """

    role: str
    encoding: str | tuple[str, ...] | None = None
    range: tuple[float, float] | None = None
    _: KW_ONLY
    frame: str | None = None
    provenance: str | None = None
    part: str | None = None
    labels: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        where = f"StateTag {self.role!r}"
        check_role(self.role, "StateTag role")
        _check_state_qualifiers(self, where, where)
        object.__setattr__(self, "labels", check_labels(self.labels, f"{where} labels"))


@dataclass(frozen=True)
class TextTag:
    """One text leaf: ``TextTag(role)`` (ADP-24)."""

    role: str

    def __post_init__(self) -> None:
        check_role(self.role, "TextTag role")


@dataclass(frozen=True)
class Field:
    """One slice of a :class:`Split`: ``Field(role=None, dim, encoding=None, range=None, ...)``.

    A role-less field is a *skip*: it advances the offset and produces nothing
    (ADP-25), so it may not carry encoding, range or any qualifier.
    """

    role: str | None = None
    dim: int | None = None
    encoding: str | tuple[str, ...] | None = None
    range: tuple[float, float] | None = None
    _: KW_ONLY
    frame: str | None = None
    provenance: str | None = None
    part: str | None = None
    labels: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        where = f"state field {self.role!r}"
        if self.role is not None:
            check_role(self.role, "Field role")
        labels = check_labels(self.labels, f"{where} labels")
        set_(self, "labels", labels)
        d = check_width(self.dim, labels, where, too_small="state field dim must be >= 1")
        set_(self, "dim", d)
        if self.role is None:
            extra = [
                n
                for n in ("encoding", "range", "frame", "provenance", "part", "labels")
                if getattr(self, n) is not None
            ]
            if extra:
                raise ValueError(
                    f"a role-less field (a skip) cannot carry {extra}; give it a role or drop them"
                )
            return
        _check_state_qualifiers(self, where, f"Field {self.role!r}")


def _check_state_qualifiers(leaf: StateTag | Field, where: str, encoding_where: str) -> None:
    """Check and normalise what a state leaf (a ``StateTag``, or a ``Split``'s ``Field`` with a
    role) qualifies itself with: its rotation accept-set, range, frame, provenance and part."""
    set_ = object.__setattr__
    set_(leaf, "encoding", _env_encoding(leaf.encoding, encoding_where))
    if leaf.range is not None:
        set_(leaf, "range", check_pair(leaf.range, f"{where} range"))
    check_optional_str(leaf.frame, FRAMES, f"{where} frame")
    check_optional_str(leaf.provenance, PROVENANCES, f"{where} provenance")
    if leaf.part is not None:
        check_role(leaf.part, f"{where} part")


@dataclass(frozen=True, init=False)
class Split:
    """A flat numeric leaf tagged as ordered :class:`Field` slices (ADP-25).

    >>> Split(Field(EEF_POS, 3), Field(dim=2)).dim
    5
    """

    fields: tuple[Field, ...]

    def __init__(self, *fields: Field) -> None:
        if len(fields) == 1 and isinstance(fields[0], (list, tuple)):
            fields = tuple(fields[0])
        if not fields:
            raise ValueError("Split needs at least one field")
        seen: set[Any] = set()
        for i, f in enumerate(fields):
            if not isinstance(f, Field):
                raise TypeError(f"Split field[{i}] must be a Field, got {type(f).__name__}")
            if f.role is not None:
                key = (identity(f.role, f.part), f.provenance)
                if key in seen:
                    raise ValueError(
                        f"Split declares the same role more than once: state role "
                        f"{_ident_text(f.role, f.part, f.provenance)}"
                    )
                seen.add(key)
        object.__setattr__(self, "fields", tuple(fields))

    @property
    def dim(self) -> int:
        """The total width the split covers."""
        return sum(int(f.dim or 0) for f in self.fields)


@dataclass(frozen=True, eq=False)
class UnknownLeaf:
    """A leaf of a kind this build does not know, kept by the tolerant read door (ADP-61)."""

    kind: str
    raw: Mapping[str, Any]
    role: str | None = None


ObsLeaf = ImageTag | StateTag | TextTag | Split
ObsNode = Union[ObsLeaf, "dict[str, ObsNode]", "tuple[ObsNode, ...]"]
_LEAVES = (ImageTag, StateTag, TextTag, Split)


@dataclass(frozen=True)
class ObservationRoles:
    """Declared observation roles grouped by kind, in declaration order (ADP-26)."""

    images: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()


def _ident_text(role: str, part: str | None, provenance: str | None) -> str:
    s = f"'{role}'"
    if part is not None:
        s += f" under part '{part}'"
    if provenance is not None:
        s += f" with provenance '{provenance}'"
    return s


def iter_leaves(node: Any, path: tuple[str | int, ...] = ()) -> Any:
    """Yield ``(path, leaf)`` depth-first in declaration order."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from iter_leaves(v, (*path, k))
    elif isinstance(node, tuple):
        for i, v in enumerate(node):
            yield from iter_leaves(v, (*path, i))
    else:
        yield path, node


def check_tree(
    node: Any, where: str, leaves: tuple[type, ...], *, slot: str, list_hint: str, expected: str
) -> Any:
    """Validate a tag or model-input tree: dict -> plain dict, tuple stays tuple, leaves as given.

    Args:
        leaves: Leaf classes allowed (``UnknownLeaf`` is always allowed: ignorable fields).
        slot: What a dict key names (``"an entry"`` / ``"a slot"``), for the reserved-key error.
        list_hint: Why a list is refused (ends the message).
        expected: The allowed leaf names, for the type error.
    """
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for k, v in node.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: dict keys must be strings, got {k!r}")
            if k == "type":
                raise ValueError(
                    f"{where}: the key 'type' is reserved by the wire format and cannot name {slot}"
                )
            out[k] = check_tree(
                v, f"{where}.{k}", leaves, slot=slot, list_hint=list_hint, expected=expected
            )
        return out
    if isinstance(node, tuple):
        return tuple(
            check_tree(
                v, f"{where}[{i}]", leaves, slot=slot, list_hint=list_hint, expected=expected
            )
            for i, v in enumerate(node)
        )
    if isinstance(node, (*leaves, UnknownLeaf)):
        return node
    if isinstance(node, list):
        raise TypeError(
            f"{where} must be a leaf, a dict, or a tuple: use a tuple (not a list) {list_hint}"
        )
    raise TypeError(f"{where}: expected a dict, a tuple, or {expected}, got {type(node).__name__}")


def check_obs_tree(node: Any, where: str = "observation") -> Any:
    """Validate an env tag tree (ADP-20); dict -> plain dict, tuple stays tuple."""
    return check_tree(
        node,
        where,
        _LEAVES,
        slot="an entry",
        list_hint="to tag a Tuple space",
        expected="a tag (ImageTag, StateTag, TextTag, Split)",
    )


def check_duplicates(observation: Any) -> None:
    """The same (role, part, provenance) twice within one kind is an error (ADP-21, DELTA-60)."""
    seen: set[Any] = set()
    for _path, leaf in iter_leaves(observation):
        if isinstance(leaf, ImageTag):
            keys: list[tuple[str, Any, str | None, str | None, str | None]] = [
                ("image", identity(leaf.role, leaf.part), None, leaf.role, leaf.part)
            ]
        elif isinstance(leaf, StateTag):
            keys = [
                ("state", identity(leaf.role, leaf.part), leaf.provenance, leaf.role, leaf.part)
            ]
        elif isinstance(leaf, TextTag):
            keys = [("text", (leaf.role, None), None, leaf.role, None)]
        elif isinstance(leaf, Split):
            keys = [
                ("state", identity(f.role, f.part), f.provenance, f.role, f.part)
                for f in leaf.fields
                if f.role is not None
            ]
        else:
            continue
        for kind, ident, prov, role, part in keys:
            key = (kind, ident, prov)
            if key in seen:
                raise ValueError(
                    f"env tags declare {kind} role {_ident_text(str(role), part, prov)} more than once"
                )
            seen.add(key)


def _leaf(node: Any) -> Any:
    return ("unknown", id(node)) if isinstance(node, UnknownLeaf) else node


def node_key(node: Any, leaf: Callable[[Any], Any] = _leaf) -> Any:
    """A hashable rendering of a tree with dict-node key order ignored (ADP-27); ``leaf`` renders leaves."""
    if isinstance(node, Mapping):
        return ("dict", tuple(sorted((k, node_key(v, leaf)) for k, v in node.items())))
    if isinstance(node, tuple):
        return ("tuple", tuple(node_key(v, leaf) for v in node))
    return leaf(node)


_ = EEF_POS  # a name used by the doctests
