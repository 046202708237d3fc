"""``transform_action``: model output -> env action (ADP-110..112, DELTA-64/65).

Per env segment, in env order: slice, rotation conversion, affine range map,
model-side ``*scale + offset`` / invert / -threshold, label permutation,
env-side corrections, binary snap, per-actuator clip; then the global clip.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ._apply import _affine, _scale_offset
from ._ops_rotation import convert
from ._plans import ActionPlan, Segment

__all__ = ["compile_action", "flatten_action"]

_F32 = np.float32


def flatten_action(out: Any, in_dim: int) -> np.ndarray[Any, Any]:
    """Row-major flatten to float32; the length must equal the model width (ADP-110)."""
    if isinstance(out, Mapping):
        if "data" not in out:
            raise TypeError(
                f"model action must be an array (or a mapping with 'data'), got a mapping with keys {sorted(map(str, out))}"
            )
        out = out["data"]
    v = np.asarray(out, dtype=_F32).reshape(-1)
    if v.shape[0] != in_dim:
        raise ValueError(f"expected {in_dim}-dim model action, got shape ({v.shape[0]},)")
    return v


def _side(a: Any) -> Callable[[Any], Any] | None:
    """One side's ``v * scale + offset``, negate if invert, ``- threshold`` (ADP-111 steps 5/6)."""
    if a is None:
        return None
    scale, offset = _scale_offset(a.scale, a.offset)
    invert, thr = a.invert, (None if a.threshold is None else _F32(a.threshold))
    if scale is None and offset is None and not invert and thr is None:
        return None

    def side(v: Any) -> Any:
        if scale is not None:
            v = v * scale
        if offset is not None:
            v = v + offset
        if invert:
            v = -v
        if thr is not None:
            v = v - thr
        return v

    return side


def _segment(seg: Segment) -> Callable[[Any], Any]:
    if seg.kind != "map":
        const = np.full(seg.dim, seg.fill, dtype=_F32)
        return lambda v: const
    start, stop = seg.start, seg.stop
    src, dst = seg.src_enc, seg.dst_enc
    conv = src is not None and dst is not None and src != dst
    rng = None
    if seg.src_range is not None and seg.dst_range is not None:
        rng = _affine(seg.src_range, seg.dst_range, f'action role "{seg.env.actuator.role}"')
    model_side, env_side = _side(seg.model), _side(seg.env.actuator)
    perm = None if seg.perm is None else np.asarray(seg.perm, dtype=np.intp)
    binarize = seg.binarize
    zero_to = _F32(1.0) if seg.env.actuator.threshold is not None else _F32(0.0)
    clip = seg.clip

    def segment(v: Any) -> Any:
        x = v[start:stop]
        if conv:
            x = np.asarray(convert(x.tolist(), str(src), str(dst)), dtype=_F32)
        if rng is not None:
            a, b, c, d = rng
            x = (x - a) / b * c + d
        if model_side is not None:
            x = model_side(x)
        if perm is not None:
            x = x[perm]
        if env_side is not None:
            x = env_side(x)
        if binarize:  # ADP-111 step 7, with the upstream exact-zero quirk
            x = np.where(x > 0, _F32(1.0), np.where(x < 0, _F32(-1.0), zero_to)).astype(_F32)
        if clip is not None:
            x = np.clip(x, clip[0], clip[1])
        return x

    return segment


def compile_action(plan: ActionPlan) -> Callable[[Any], np.ndarray[Any, Any]]:
    """The compiled ``model output (flat float32) -> env action (float32[out_dim])``."""
    fns = [_segment(s) for s in plan.segments]
    clip = plan.clip
    shims = [(s.start, s.stop, s.custom) for s in plan.segments if s.custom is not None]

    def action(v: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if shims:  # ADP-38/40: to_base on the model-declared slice, on a float64 copy
            w = v.astype(np.float64, copy=True)
            for a, b, enc in shims:
                assert enc is not None
                out = np.asarray(enc.to_base(w[a:b].copy()), dtype=np.float64)
                if out.ndim != 1 or out.shape[0] != b - a:
                    raise ValueError(
                        f"custom encoding {enc.name!r}: to_base must return a flat {b - a}-vector, got shape {out.shape}"
                    )
                w[a:b] = out
            v = w.astype(_F32)
        parts = [fn(v) for fn in fns]
        out = np.concatenate(parts).astype(_F32, copy=False) if parts else np.zeros(0, dtype=_F32)
        if clip is not None:
            out = np.clip(out, clip[0], clip[1]).astype(_F32, copy=False)
        return out

    return action
