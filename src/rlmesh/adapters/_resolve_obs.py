"""Observation planning: match each model input leaf to env features (ADP-69..83, DELTA-60..68).

Every failure is a resolve-time :class:`AdapterResolutionError` whose message
starts with the model input's placement; fragments pinned by the spec are kept
verbatim.
"""

from __future__ import annotations

import math
from typing import Any

from ._check import fail
from ._join import Advisory, ImageFeature, Joined, Path, StateFeature, render_path
from ._model import Concat, Custom, Image, State, Text
from ._ops_image import fit_geometry, round_half_away
from ._plans import CustomPlan, ImagePlan, StatePlan, TextPlan
from ._resolve_state import plan_state
from ._roles import (
    DTYPES,
    FIT_MODES,
    RESAMPLES,
    identity,
    is_sanctioned,
    quote,
    render_identity,
)

__all__ = ["ObsPlanner"]


def _offers(items: list[tuple[str, str | None]]) -> str:
    return (
        "[" + ", ".join(quote(s) for s in sorted({render_identity(r, p) for r, p in items})) + "]"
    )


class ObsPlanner:
    """Plans one model leaf at a time against a :class:`Joined` env."""

    def __init__(
        self, joined: Joined, model_slices: dict[Any, tuple[int, int]], model_labels: dict[Any, Any]
    ) -> None:
        self.j = joined
        self.model_slices = model_slices
        self.model_labels = model_labels
        self.resolve_adv: list[Advisory] = []
        self.loss_adv: list[Advisory] = []
        self.silent_adv: list[Advisory] = []
        self.used_unknown: set[int] = set()
        self.images: dict[Any, list[ImageFeature]] = {}
        self.states: dict[Any, list[StateFeature]] = {}
        self.texts: dict[str, Any] = {}
        self._index()

    # -- indexes (ADP-67 step 5) -----------------------------------------------------
    def _index(self) -> None:
        for f in self.j.images:
            key = identity(f.role, f.part)
            if key in self.images:
                raise fail(
                    "duplicate",
                    f"duplicate env image role {quote(render_identity(f.role, f.part))}",
                )
            self.images[key] = [f]
        for s in self.j.states:
            key = identity(s.role, s.part)
            lst = self.states.setdefault(key, [])
            if any(o.provenance == s.provenance for o in lst):
                raise fail(
                    "duplicate",
                    f"duplicate env state role {quote(render_identity(s.role, s.part))}",
                )
            lst.append(s)
        for t in self.j.texts:
            if t.role in self.texts:
                raise fail("duplicate", f"duplicate env text role {quote(t.role)}")
            self.texts[t.role] = t

    def _unknown_check(self, p: str, role: str) -> None:
        for i, u in enumerate(self.j.unknowns):
            if u.role == role:
                self.used_unknown.add(i)
                raise fail(
                    "unsupported_kind",
                    f'model input "{p}" needs role "{role}" but the env declares it as unrecognized observation '
                    f'kind "{u.kind}"; upgrade the runtime',
                )

    def _lookup(
        self, table: dict[Any, list[Any]], role: str, part: str | None, p: str, kind: str
    ) -> list[Any] | None:
        """DELTA-60 matching; ``None`` when the env lacks the (role, part)."""
        ident = identity(role, part)
        if ident in table:
            return table[ident]
        if ident != (role, None):
            return None
        lone = [(k, v) for k, v in table.items() if k[0] == role]
        if not lone:
            return None
        if len(lone) > 1:
            parts = sorted(str(k[1]) for k, _ in lone)
            raise fail(
                "missing_role",
                f'model input "{p}" needs {kind} role "{role}" but the env declares it under parts '
                f"[{', '.join(quote(x) for x in parts)}]; declare part=",
            )
        k, v = lone[0]
        self.resolve_adv.append(Advisory(
            "info",
            f'model input "{p}": {kind} role "{role}" declares no part and the env declares it only under part '
            f'"{k[1]}"; bound to that leaf (declare part= to pin it)',
        ))  # fmt: skip
        return v

    # -- images (ADP-70..75) -----------------------------------------------------------
    def image(self, leaf: Image, placement: Path) -> ImagePlan:
        p = render_path(placement)
        if leaf.fill is not None and not leaf.optional:
            raise fail(
                "invalid_tag",
                f'model input "{p}": fill only applies to an optional camera; set optional or drop fill',
            )
        found = self._lookup(self.images, leaf.role, leaf.part, p, "image")
        feat = found[0] if found else None
        if feat is None:
            self._unknown_check(p, leaf.role)
            if (
                not leaf.optional
                and len(self.j.images) == 1
                and is_sanctioned(leaf.role)
                and leaf.part is None
            ):
                feat = self.j.images[0]
                self.resolve_adv.append(Advisory(
                    "caution",
                    f'model input "{p}" wants image role "{leaf.role}" but the env has a single camera with role '
                    f'"{feat.role}"; bound to that camera',
                ))  # fmt: skip
            elif leaf.optional:
                return self._zero_image(leaf, placement, p)
            else:
                extra = f' (part "{leaf.part}")' if leaf.part is not None else ""
                offers = _offers([(f.role, f.part) for f in self.j.images])
                raise fail(
                    "missing_role",
                    f'model input "{p}" wants an image with role "{leaf.role}"{extra} but the env offers {offers}',
                )
        self._image_checks(leaf, p, feat.channels)
        if leaf.render is not None and leaf.render != (feat.height, feat.width):
            rh, rw = leaf.render
            raise fail(
                "dim_mismatch",
                f'model input "{p}": the model was trained at render {rh}x{rw} but the env image is '
                f"{feat.height}x{feat.width}; serve the env at the trained resolution or drop render",
            )
        plan = ImagePlan(placement, leaf, feat, flip=feat.upside_down != leaf.upside_down)
        plan.normalize = _norm(leaf.normalize)
        eh, ew = self._crop(plan, feat)
        self._fit(plan, p, eh, ew)
        return plan

    def _image_checks(self, leaf: Image, p: str, env_channels: int | None) -> None:
        if leaf.resample not in RESAMPLES:
            raise fail(
                "unsupported",
                f"model input \"{p}\": unsupported resample {quote(leaf.resample)}; expected 'bilinear' or 'bilinear_aa'",
            )
        if leaf.dtype not in DTYPES:
            raise fail("unsupported", f'model input "{p}": unknown dtype {quote(leaf.dtype)}')
        if leaf.normalize is not False and leaf.dtype not in ("float16", "float32", "float64"):
            raise fail(
                "unsupported",
                f'model input "{p}": normalize yields fractional values that dtype "{leaf.dtype}" cannot hold; use a float dtype',
            )
        if env_channels is not None and leaf.channels is not None and leaf.channels != env_channels:
            raise fail(
                "dim_mismatch",
                f'model input "{p}": expects {leaf.channels} channel(s) but the env image has {env_channels}; the '
                "adapter does not convert between channel counts (e.g. RGB vs grayscale)",
            )
        if (leaf.channel_order == "bgr" or leaf.jpeg_quality is not None) and env_channels not in (
            None,
            3,
        ):
            raise fail(
                "unsupported",
                f'model input "{p}": channel_order/jpeg_quality need a 3-channel image, got {env_channels}',
            )

    def _zero_image(self, leaf: Image, placement: Path, p: str) -> ImagePlan:
        if leaf.height is None or leaf.width is None or leaf.channels is None:
            raise fail(
                "missing_width",
                f'model input "{p}": an optional image the env does not provide needs height, width, and channels '
                "to size the zero-filled frame",
            )
        self._image_checks(leaf, p, None)
        hwc = (leaf.height, leaf.width, leaf.channels)
        self.loss_adv.append(Advisory(
            "caution",
            f'model input "{p}": the env has no camera with role "{leaf.role}"; feeding a blank '
            f"{hwc[0]}x{hwc[1]}x{hwc[2]} frame",
        ))  # fmt: skip
        return ImagePlan(placement, leaf, None, zero_fill=hwc, normalize=_norm(leaf.normalize))

    def _crop(self, plan: ImagePlan, feat: ImageFeature) -> tuple[int, int]:
        leaf = plan.leaf
        side = (
            leaf.crop
            if leaf.crop is not None
            else (math.sqrt(leaf.crop_area) if leaf.crop_area is not None else None)
        )
        if side is None or side >= 1.0:
            return feat.height, feat.width
        H, W = feat.height, feat.width
        if leaf.crop_mode == "slice":
            ch, cw = max(1, round_half_away(H * side)), max(1, round_half_away(W * side))
            plan.crop_box = (float((H - ch) // 2), float((W - cw) // 2), float(ch), float(cw))
            plan.crop_slice = True
            return ch, cw
        bh, bw = H * side, W * side
        plan.crop_box = ((H - bh) / 2.0, (W - bw) / 2.0, bh, bw)
        return max(1, round_half_away(bh)), max(1, round_half_away(bw))

    def _fit(self, plan: ImagePlan, p: str, eh: int, ew: int) -> None:
        leaf = plan.leaf
        th = leaf.height if leaf.height is not None else eh
        tw = leaf.width if leaf.width is not None else ew
        if (th, tw) == (eh, ew):
            if plan.crop_box is not None and not plan.crop_slice:
                plan.size = (th, tw)
            return
        plan.size = (th, tw)
        fits = (
            ()
            if leaf.fit is None
            else ((leaf.fit,) if isinstance(leaf.fit, str) else tuple(leaf.fit))
        )
        modes = [m for m in fits if m in FIT_MODES]

        def upscales(m: str) -> bool:
            return (th > eh and tw > ew) if m == "pad" else (th > eh or tw > ew)

        if fits and not modes:
            raise fail(
                "unsupported",
                f"model input \"{p}\": fit {list(fits)} names no mode this build recognizes; expected 'stretch', 'crop', or 'pad'",
            )
        if eh * tw != ew * th:
            if not fits:
                raise fail(
                    "unsupported",
                    f'model input "{p}": target {th}x{tw} changes the env\'s {eh}x{ew} aspect ratio; set fit to '
                    "'stretch', 'crop', or 'pad'",
                )
            usable = [m for m in modes if leaf.allow_upscale or not upscales(m)]
            if not usable:
                raise fail(
                    "unsupported",
                    f'model input "{p}": every declared fit would upscale the env\'s {eh}x{ew} image to {th}x{tw}; '
                    "set allow_upscale or declare a fit that downscales (e.g. 'pad')",
                )
            mode = usable[0]
        else:
            mode = modes[0] if modes else "stretch"
            if upscales(mode) and not leaf.allow_upscale:
                raise fail(
                    "unsupported",
                    f'model input "{p}": target {th}x{tw} upscales the env\'s {eh}x{ew} image; set allow_upscale to '
                    "interpolate detail that is not there",
                )
        plan.fit = mode
        ih, iw, _, _ = fit_geometry(eh, ew, th, tw, mode)
        if mode == "crop" and (ih, iw) != (th, tw):
            self.loss_adv.append(
                Advisory(
                    "info",
                    f'model input "{p}": aspect crop drops edge pixels ({eh}x{ew} -> {th}x{tw})',
                )
            )
        elif mode == "pad" and (ih, iw) != (th, tw):
            self.loss_adv.append(
                Advisory(
                    "info",
                    f'model input "{p}": aspect pad adds letterbox borders ({eh}x{ew} -> {th}x{tw})',
                )
            )

    # -- text / custom (ADP-82/83) ----------------------------------------------------------
    def text(self, leaf: Text, placement: Path) -> TextPlan:
        p = render_path(placement)
        t = self.texts.get(leaf.role)
        if t is not None:
            return TextPlan(placement, t.path, leaf.fill, leaf.container)
        self._unknown_check(p, leaf.role)
        if leaf.fill is None:
            offers = "[" + ", ".join(quote(r) for r in sorted(self.texts)) + "]"
            raise fail(
                "missing_role",
                f'model input "{p}" needs text role "{leaf.role}" but the env offers {offers} and no fill is set',
            )
        return TextPlan(placement, None, leaf.fill, leaf.container)

    def custom(self, leaf: Custom, placement: Path, fn: Any) -> CustomPlan:
        return CustomPlan(placement, fn)

    # -- state (ADP-76..81) ------------------------------------------------------------------
    def state(self, leaf: State | Concat, placement: Path) -> StatePlan:
        return plan_state(self, leaf, placement)


def _norm(n: Any) -> tuple[float, float] | None:
    if n is True:
        return (0.0, 1.0)
    if n is False or n is None:
        return None
    return (float(n[0]), float(n[1]))
