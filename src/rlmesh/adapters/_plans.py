"""Resolved plans: the pure data the resolver derives and the engine compiles.

Each observation plan produces one payload value at one placement; the action
plan lists env segments in env order (ADP-75, ADP-81, ADP-85).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._action import Actuator, CustomEncoding
from ._join import Advisory, EnvActuator, ImageFeature, Path, StateFeature
from ._model import Image

__all__ = [
    "ActionPlan",
    "CustomPlan",
    "ImagePlan",
    "Piece",
    "Plan",
    "Segment",
    "StatePlan",
    "TextPlan",
]


@dataclass
class ImagePlan:
    placement: Path
    leaf: Image
    feature: ImageFeature | None  # None for a zero-filled camera
    flip: bool = False
    size: tuple[int, int] | None = None  # resize target when resizing
    fit: str = "stretch"
    normalize: tuple[float, float] | None = None
    zero_fill: tuple[int, int, int] | None = None
    crop_box: tuple[float, float, float, float] | None = None  # (y0, x0, h, w) in env pixels
    crop_slice: bool = False

    @property
    def stack(self) -> int:
        return self.leaf.stack


@dataclass
class Piece:
    kind: str  # "source" | "zero" | "const" | "previous"
    width: int  # output width
    feature: StateFeature | None = None
    src_enc: str | None = None
    dst_enc: str | None = None
    converting: bool = False
    custom: CustomEncoding | None = None
    dim: int | None = None
    index: int | None = None
    src_range: tuple[float, float] | None = None
    dst_range: tuple[float, float] | None = None
    scale: float | tuple[float, ...] | None = None
    offset: float | tuple[float, ...] | None = None
    post: list[list[float]] | None = None
    perm: tuple[int, ...] | None = None
    fill: float = 0.0
    part: str | None = None  # the model's part (zero-fill rendering)
    role: str = ""
    prev_slice: tuple[int, int] | None = None  # model action slice for "previous"
    frame: str | None = None
    provenance: str | None = None


@dataclass
class StatePlan:
    placement: Path
    pieces: list[Piece]
    pad_to: int | None
    dtype: str
    reshape: tuple[int, ...] | None
    container: str
    clip: tuple[float, float] | None
    zero_count: int = 0

    @property
    def width(self) -> int:
        return sum(p.width for p in self.pieces)


@dataclass
class TextPlan:
    placement: Path
    source: Path | None
    fill: str | None
    container: str


@dataclass
class CustomPlan:
    placement: Path
    fn: Any


Plan = ImagePlan | StatePlan | TextPlan | CustomPlan


@dataclass
class Segment:
    env: EnvActuator
    kind: str  # "fill" (opaque) | "opt_fill" (absent optional role) | "map"
    dim: int
    fill: float = 0.0
    start: int = 0
    stop: int = 0
    model: Actuator | None = None
    src_enc: str | None = None  # model side native encoding
    dst_enc: str | None = None  # env side native encoding
    custom: CustomEncoding | None = None  # model-side to_base shim
    src_range: tuple[float, float] | None = None
    dst_range: tuple[float, float] | None = None
    binarize: bool = False
    clip: tuple[float, float] | None = None
    perm: tuple[int, ...] | None = None


@dataclass
class ActionPlan:
    in_dim: int
    out_dim: int
    segments: list[Segment]
    clip: tuple[float, float] | None
    model_slices: dict[Any, tuple[int, int]] = field(
        default_factory=dict
    )  # identity -> model slice


@dataclass
class Resolved:
    plans: list[Plan]
    action: ActionPlan
    root_dict: bool
    resolve_advisories: list[Advisory]
    join_advisories: list[Advisory]
    loss_advisories: list[Advisory]
    silent_advisories: list[Advisory]  # in advisories() but never under "dropped:" (DEC-D2)
    referenced_keys: tuple[str, ...]
