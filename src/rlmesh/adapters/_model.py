"""Model input leaves: what a model ingests, slot by slot (ADP-31..36).

:class:`State`, :class:`Concat`, :class:`Constant`, :class:`Text`, :class:`Custom` (and
:class:`Image`, from ``_model_image``) and the input-tree rule; the
:class:`~rlmesh.adapters.ModelSpec` document that pairs an input tree with an
:class:`Action` lives in ``_model_spec``, above the codec.

>>> Concat(EEF_POS, GRIPPER_POS).parts
('proprio/eef_pos', 'proprio/gripper')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, Union

from ._action import CustomEncoding, Rotation
from ._check import (
    check_choice,
    check_count,
    check_encoding_set,
    check_labels,
    check_number,
    check_optional_str,
    check_pair,
    check_reshape,
    check_role,
    check_scale,
)
from ._model_image import Image, positive
from ._roles import (
    ACTION_GRIPPER,
    EEF_POS,
    FRAMES,
    GRIPPER_POS,
    PROVENANCES,
)
from ._tags import check_tree

__all__ = [
    "ConcatPart",
    "Concat",
    "Constant",
    "Custom",
    "Image",
    "InputNode",
    "ModelLeaf",
    "ObsTransform",
    "Previous",
    "State",
    "Text",
]

#: A ``Custom(transform=...)`` callable: the raw observation mapping -> one payload slot.
ObsTransform = Callable[[Mapping[str, Any]], Any]


def _check_provenance(value: Any, where: str) -> str | tuple[str, ...] | None:
    if value is None or isinstance(value, str):
        return check_optional_str(value, PROVENANCES, where)
    items = tuple(dict.fromkeys(value))
    if not items:
        raise ValueError(f"{where} must name at least one provenance")
    for x in items:
        check_choice(x, PROVENANCES, where)
    return items[0] if len(items) == 1 else items


_CONTAINER_DEFAULTS = {
    "pad_to": None,
    "dtype": "float32",
    "reshape": None,
    "container": "array",
    "clip": None,
}


@dataclass(frozen=True)
class State:
    """A one-part numeric input (ADP-33, DELTA-63..66).

    ``dim`` keeps the leading N elements (after any rotation conversion),
    ``index`` picks one; ``optional`` zero-fills (or ``fill``-fills) an absent
    role; ``range`` is the model's target range (affine map, never a clamp).
    """

    role: str
    encoding: str | tuple[str, ...] | CustomEncoding | None = None
    dim: int | None = None
    index: int | None = None
    optional: bool = False
    range: tuple[float, float] | None = None
    pad_to: int | None = None
    dtype: str = "float32"
    reshape: tuple[int, ...] | None = None
    container: str = "array"
    _: KW_ONLY
    fill: float = 0.0
    post_rotate: Rotation | None = None
    scale: float | tuple[float, ...] | None = None
    offset: float | tuple[float, ...] | None = None
    frame: str | None = None
    provenance: str | tuple[str, ...] | None = None
    part: str | None = None
    labels: tuple[str, ...] | None = None
    source: str = "observation"
    clip: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        role = check_role(self.role, "State role")
        w = f"State {role!r}"
        if not isinstance(self.encoding, CustomEncoding):
            set_(self, "encoding", check_encoding_set(self.encoding, f"{w} encoding"))
        labels = check_labels(self.labels, f"{w} labels")
        set_(self, "labels", labels)
        if self.dim is not None and self.index is not None:
            raise ValueError(f"{w}: set dim or index, not both dim and index")
        if labels is not None and self.index is not None:
            raise ValueError(f"{w}: labels cannot be combined with index")
        dim = self.dim if self.dim is not None or labels is None else len(labels)
        if dim is not None:
            set_(self, "dim", positive(dim, f"{w} dim"))
            if labels is not None and len(labels) != dim:
                raise ValueError(f"{w}: {len(labels)} labels do not match dim {dim}")
        if self.index is not None:
            set_(self, "index", check_count(self.index, f"{w} index"))
        set_(self, "optional", bool(self.optional))
        if self.range is not None:
            set_(self, "range", check_pair(self.range, f"{w} range"))
        if self.pad_to is not None:
            set_(self, "pad_to", check_count(self.pad_to, f"{w} pad_to"))
        if not isinstance(self.dtype, str):
            raise TypeError(f"{w} dtype must be a dtype name string, got {self.dtype!r}")
        if self.reshape is not None:
            set_(self, "reshape", check_reshape(self.reshape))
        check_choice(self.container, ("array", "list"), f"{w} container")
        if isinstance(self.fill, bool):
            raise ValueError(f"{w}: fill must be a single number, got {self.fill!r}")
        set_(self, "fill", check_number(self.fill, f"{w} fill"))
        if self.source not in ("observation", "action"):
            raise ValueError(f"{w} source must be 'observation' or 'action', got {self.source!r}")
        if self.source == "action":
            bad = [
                n
                for n in (
                    "encoding",
                    "index",
                    "range",
                    "pad_to",
                    "reshape",
                    "post_rotate",
                    "scale",
                    "offset",
                    "frame",
                    "provenance",
                    "clip",
                )
                if getattr(self, n) is not None
            ]
            bad += [n for n in ("optional",) if getattr(self, n)]
            bad += [
                n
                for n, d in (("dtype", "float32"), ("container", "array"))
                if getattr(self, n) != d
            ]
            if bad:
                raise ValueError(
                    f"{w}: a previous-action part (source='action') allows only part, labels, dim and fill; it also sets {bad}"
                )
        elif self.fill != 0.0 and not self.optional:
            raise ValueError(
                f"{w}: fill applies only to an optional part; set optional=True or drop fill"
            )
        if self.post_rotate is not None:
            if not isinstance(self.post_rotate, Rotation):
                raise TypeError(
                    f"{w} post_rotate must be a Rotation, got {type(self.post_rotate).__name__}"
                )
            if self.encoding is None or isinstance(self.encoding, CustomEncoding):
                raise ValueError(
                    f"{w}: post_rotate needs a native rotation encoding (not None or a CustomEncoding)"
                )
        for name in ("scale", "offset"):
            v = getattr(self, name)
            if v is not None:
                set_(self, name, check_scale(v, f"{w} {name}"))
        check_optional_str(self.frame, FRAMES, f"{w} frame")
        set_(self, "provenance", _check_provenance(self.provenance, f"{w} provenance"))
        if self.part is not None:
            check_role(self.part, f"{w} part")
        if self.clip is not None:
            set_(self, "clip", check_pair(self.clip, f"{w} clip"))

    @property
    def parts(self) -> tuple[State]:
        """The single part (uniform with :attr:`Concat.parts`)."""
        return (self,)


def Previous(role: str, *, part: str | None = None, fill: float = 0.0) -> State:
    """A state part reading the model's own previous raw action for ``role`` (DELTA-66).

    >>> Previous(ACTION_GRIPPER, fill=-1.0).source
    'action'
    """
    return State(role, part=part, fill=fill, source="action")


@dataclass(frozen=True)
class Constant:
    """A fixed block of ``dim`` copies of ``fill`` inside a :class:`Concat` (DELTA-66)."""

    _: KW_ONLY
    dim: int = 1
    fill: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "dim", positive(self.dim, "Constant dim"))
        if isinstance(self.fill, bool):
            raise ValueError(f"Constant fill must be a single number, got {self.fill!r}")
        object.__setattr__(self, "fill", check_number(self.fill, "Constant fill"))


ConcatPart = str | State | Constant


@dataclass(frozen=True, init=False)
class Concat:
    """A multi-part numeric input, parts concatenated in order (ADP-34).

    Each part is a bare role string (a role-only :class:`State`), a
    :class:`State`, or a :class:`Constant`.

    >>> Concat(EEF_POS, State(GRIPPER_POS, dim=1), pad_to=8).pad_to
    8
    """

    parts: tuple[ConcatPart, ...]
    pad_to: int | None
    dtype: str
    reshape: tuple[int, ...] | None
    container: str
    clip: tuple[float, float] | None

    def __init__(
        self,
        *parts: ConcatPart,
        pad_to: int | None = None,
        dtype: str = "float32",
        reshape: Sequence[int] | None = None,
        container: str = "array",
        clip: Sequence[float] | None = None,
    ) -> None:
        if not parts:
            raise ValueError("Concat needs at least one component (part)")
        for i, p in enumerate(parts):
            if isinstance(p, str):
                check_role(p, f"Concat part[{i}]")
            elif isinstance(p, State):
                bad = [k for k, d in _CONTAINER_DEFAULTS.items() if getattr(p, k) != d]
                if bad:
                    raise ValueError(
                        f"Concat part[{i}] ({p.role!r}) sets leaf-level container fields {bad}; set them on the Concat instead"
                    )
            elif not isinstance(p, Constant):
                raise TypeError(
                    f"Concat part[{i}] must be a role string, a State or a Constant, got {type(p).__name__}"
                )
        if all(isinstance(p, Constant) for p in parts):
            raise ValueError(
                "Concat of only Constant parts reads nothing from the env; add a role part"
            )
        set_ = object.__setattr__
        set_(self, "parts", tuple(parts))
        set_(self, "pad_to", None if pad_to is None else check_count(pad_to, "Concat pad_to"))
        if not isinstance(dtype, str):
            raise TypeError(f"Concat dtype must be a dtype name string, got {dtype!r}")
        set_(self, "dtype", dtype)
        set_(self, "reshape", None if reshape is None else check_reshape(reshape))
        set_(self, "container", check_choice(container, ("array", "list"), "Concat container"))
        set_(self, "clip", None if clip is None else check_pair(clip, "Concat clip"))


@dataclass(frozen=True)
class Text:
    """A text input: ``Text(role, container="str", fill=None)`` (ADP-35).

    ``container="list"`` yields ``[text]``; ``fill`` is the fallback when the
    env lacks the role or the observation omits it.
    """

    role: str
    container: str = "str"
    fill: str | None = None

    def __post_init__(self) -> None:
        check_role(self.role, "Text role")
        check_choice(self.container, ("str", "list"), f"Text {self.role!r} container")
        if self.fill is not None and not isinstance(self.fill, str):
            raise TypeError(f"Text {self.role!r} fill must be a string, got {self.fill!r}")


@dataclass(frozen=True)
class Custom:
    """A host-code payload slot: exactly one of ``transform`` or ``entrypoint`` (ADP-36).

    The callable receives the full raw observation mapping and returns the
    whole slot. An ``entrypoint="module:callable"`` is imported only under
    ``resolve(..., trust_entrypoints=True)``.
    """

    transform: ObsTransform | None = None
    entrypoint: str | None = None

    def __post_init__(self) -> None:
        if (self.transform is None) == (self.entrypoint is None):
            raise ValueError(
                "Custom needs exactly one of transform= (a callable) or entrypoint= ('module:callable')"
            )
        if self.transform is not None and not callable(self.transform):
            raise TypeError(
                f"Custom transform must be callable, got {type(self.transform).__name__}"
            )
        if self.entrypoint is not None:
            ep = self.entrypoint
            if (
                not isinstance(ep, str)
                or ep.count(":") != 1
                or ep.startswith(":")
                or ep.endswith(":")
            ):
                raise ValueError(
                    f"Custom entrypoint must be a 'module:callable' string, got {ep!r}"
                )


ModelLeaf = Image | State | Concat | Text | Custom
InputNode = Union[ModelLeaf, "dict[str, InputNode]", "tuple[InputNode, ...]"]
_MODEL_LEAVES = (Image, State, Concat, Text, Custom)


def check_input_tree(node: Any, where: str = "input") -> Any:
    """Validate a model input tree (ADP-31): dict -> dict payload, tuple -> list payload."""
    return check_tree(
        node,
        where,
        _MODEL_LEAVES,
        slot="a slot",
        list_hint="for a positional payload",
        expected="a leaf (Image, State, Concat, Text, Custom)",
    )


_ = (EEF_POS, GRIPPER_POS, ACTION_GRIPPER, math)  # doctest names
