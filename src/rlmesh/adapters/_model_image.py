"""The model-side camera input ``Image`` (ADP-32, DELTA-67).

>>> Image(IMAGE_PRIMARY, size=224, stack=4, stride=2).offsets
(-6, -4, -2, 0)
"""

from __future__ import annotations

import itertools
from dataclasses import KW_ONLY, InitVar, dataclass
from typing import Any

from ._check import check_choice, check_count, check_number, check_pair, check_role
from ._roles import CHANNEL_ORDERS, CROP_MODES, IMAGE_LAYOUTS, IMAGE_PRIMARY, STACK_PADS

__all__ = ["Image", "positive"]


def positive(value: Any, name: str) -> int:
    v = check_count(value, name)
    if v < 1:
        raise ValueError(f"{name} must be >= 1, got {v}")
    return v


@dataclass(frozen=True)
class Image:
    """A camera input in the model's conventions (ADP-32, DELTA-67).

    ``size=`` (construction-only) sets height and width together. ``height``/
    ``width`` left ``None`` keep the env's value for that axis.

    >>> img = Image(IMAGE_PRIMARY, size=224)
    >>> img.height, img.width, img.resample
    (224, 224, 'bilinear')
    """

    role: str
    height: int | None = None
    width: int | None = None
    layout: str = "hwc"
    channels: int | None = None
    dtype: str = "uint8"
    normalize: bool | tuple[float, float] = False
    lead_dims: int = 0
    upside_down: bool = False
    resample: str = "bilinear"
    allow_upscale: bool = False
    fit: str | tuple[str, ...] | None = None
    optional: bool = False
    fill: int | None = None
    stack: int = 1
    _: KW_ONLY
    size: InitVar[int | None] = None
    crop: float | None = None
    crop_area: float | None = None
    crop_mode: str = "zoom"
    jpeg_quality: int | None = None
    channel_order: str = "rgb"
    render: tuple[int, int] | None = None
    offsets: tuple[int, ...] | None = None
    stride: InitVar[int | None] = None
    stack_pad: str = "first"
    part: str | None = None

    def __post_init__(self, size: int | None, stride: int | None) -> None:
        set_ = object.__setattr__
        role = check_role(self.role, "Image role")
        w = f"Image {role!r}"
        if size is not None:
            if self.height is not None or self.width is not None:
                raise ValueError(f"{w}: give either size=, or height=/width=, not both")
            s = positive(size, f"{w} size")
            set_(self, "height", s)
            set_(self, "width", s)
        for name in ("height", "width", "channels"):
            v = getattr(self, name)
            if v is not None:
                set_(self, name, positive(v, f"{w} {name}"))
        check_choice(self.layout, IMAGE_LAYOUTS, f"{w} layout")
        if not isinstance(self.dtype, str):
            raise TypeError(f"{w} dtype must be a dtype name string, got {self.dtype!r}")
        if not isinstance(self.resample, str):
            raise TypeError(f"{w} resample must be a string, got {self.resample!r}")
        norm = self.normalize
        if isinstance(norm, bool) or norm is None:
            set_(self, "normalize", bool(norm))
        else:
            set_(self, "normalize", check_pair(norm, f"{w} normalize"))
        set_(self, "lead_dims", check_count(self.lead_dims, f"{w} lead_dims"))
        for name in ("upside_down", "allow_upscale", "optional"):
            set_(self, name, bool(getattr(self, name)))
        fit = self.fit
        if fit is not None and not isinstance(fit, str):
            items = tuple(fit)
            if not items or not all(isinstance(x, str) for x in items):
                raise ValueError(
                    f"{w} fit must be a mode or a non-empty list of modes, got {fit!r}"
                )
            set_(self, "fit", items)
        if self.fill is not None:
            if not self.optional:
                raise ValueError(
                    f"{w}: fill only applies to an optional camera; set optional=True or drop fill"
                )
            f = check_count(self.fill, f"{w} fill")
            if f > 255:
                raise ValueError(f"{w} fill must be a raw 8-bit level 0..255, got {f}")
            set_(self, "fill", f)
        if (
            isinstance(self.stack, bool)
            or not isinstance(self.stack, int)
            or not 1 <= self.stack <= 64
        ):
            raise ValueError(f"stack must be between 1 and 64, got {self.stack}")
        self._check_delta_fields(w, stride)

    def _check_delta_fields(self, w: str, stride: int | None) -> None:
        set_ = object.__setattr__
        if self.crop is not None and self.crop_area is not None:
            raise ValueError(f"{w}: give crop= (side fraction) or crop_area=, not both")
        for name in ("crop", "crop_area"):
            v = getattr(self, name)
            if v is not None:
                f = check_number(v, f"{w} {name}")
                if not 0.0 < f <= 1.0:
                    raise ValueError(f"{w} {name} must be a fraction in (0, 1], got {f}")
                set_(self, name, f)
        check_choice(self.crop_mode, CROP_MODES, f"{w} crop_mode")
        if self.jpeg_quality is not None:
            q = check_count(self.jpeg_quality, f"{w} jpeg_quality")
            if not 1 <= q <= 100:
                raise ValueError(f"{w} jpeg_quality must be between 1 and 100, got {q}")
            set_(self, "jpeg_quality", q)
        check_choice(self.channel_order, CHANNEL_ORDERS, f"{w} channel_order")
        if self.render is not None:
            r = self.render
            hw = (r, r) if isinstance(r, int) and not isinstance(r, bool) else tuple(r)
            if len(hw) != 2:
                raise ValueError(f"{w} render must be an int or (height, width), got {r!r}")
            for v in hw:
                if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 4096:
                    raise ValueError(f"{w} render sizes must be integers in 1..4096, got {r!r}")
            set_(self, "render", (int(hw[0]), int(hw[1])))
        if stride is not None:
            if self.offsets is not None:
                raise ValueError(f"{w}: give stride= or offsets=, not both")
            if isinstance(stride, bool) or not isinstance(stride, int) or stride < 1:
                raise ValueError(f"{w} stride must be an integer >= 1, got {stride!r}")
            set_(self, "offsets", tuple(-(self.stack - 1 - k) * stride for k in range(self.stack)))
        if self.offsets is not None:
            offs = tuple(self.offsets)
            if not all(isinstance(o, int) and not isinstance(o, bool) for o in offs):
                raise ValueError(f"{w} offsets must be integers, got {list(offs)}")
            if len(offs) != self.stack:
                raise ValueError(
                    f"{w} offsets must have stack={self.stack} entries, got {len(offs)}"
                )
            if offs[-1] != 0 or any(b <= a for a, b in itertools.pairwise(offs)) or offs[0] > 0:
                raise ValueError(
                    f"{w} offsets must be <= 0, strictly increasing and end at 0, got {list(offs)}"
                )
            if -offs[0] > 128:
                raise ValueError(f"{w} offsets span {-offs[0]} frames; at most 128 is supported")
            set_(self, "offsets", offs)
        check_choice(self.stack_pad, STACK_PADS, f"{w} stack_pad")
        if self.stack_pad != "first" and self.stack <= 1:
            raise ValueError(f"{w}: stack_pad={self.stack_pad!r} requires stack > 1")
        if self.part is not None:
            check_role(self.part, f"{w} part")

    @property
    def span(self) -> int:
        """Consecutive frames the window needs (1 without stacking)."""
        if self.offsets is not None:
            return 1 - self.offsets[0]
        return self.stack


_ = IMAGE_PRIMARY  # doctest name
