"""``describe()`` / ``explain()``: render a resolved plan in the pinned grammar (ADP-87..93).

Pinned lines (the resolve vectors) are byte-identical; the release's extra
markers (DELTA-60/63..68: ``#part``, ``@frame``, ``~reference``, ``perm[..]``,
``const(N)=v``, ``previous ...``, ``clip[..]``) only appear when those
features are used.
"""

from __future__ import annotations

from ._join import render_path
from ._plans import (
    ActionPlan,
    CustomPlan,
    ImagePlan,
    Piece,
    Plan,
    Resolved,
    Segment,
    StatePlan,
    TextPlan,
)
from ._roles import fmt_pair, fmt_pair_float, fmt_scalar, quote

__all__ = ["describe"]


def _image(plan: ImagePlan) -> str:
    p = quote(render_path(plan.placement))
    leaf = plan.leaf
    steps: list[str] = []
    if plan.zero_fill is not None:
        h, w, c = plan.zero_fill
        return f"{p} <- zeros({h}x{w}x{c})"
    feat = plan.feature
    assert feat is not None
    if feat.layout == "chw":
        steps.append("chw->hwc")
    if plan.flip:
        steps.append("flip 180")
    if leaf.jpeg_quality is not None:
        steps.append(f"jpeg q{leaf.jpeg_quality}")
    if plan.crop_box is not None:
        steps.append(f"crop {plan.crop_box[2]:g}x{plan.crop_box[3]:g} ({leaf.crop_mode})")
    if plan.size is not None:
        steps.append(f"resize {plan.size[0]}x{plan.size[1]} ({leaf.resample})")
    if leaf.channel_order == "bgr":
        steps.append("rgb->bgr")
    if plan.normalize is not None:
        lo, hi = plan.normalize
        steps.append(
            "normalize /255"
            if (lo, hi) == (0.0, 1.0)
            else f"normalize [{fmt_scalar(lo)}, {fmt_scalar(hi)}]"
        )
    steps.append(leaf.dtype)
    if leaf.layout == "chw":
        steps.append("hwc->chw")
    if leaf.lead_dims:
        steps.append(f"+{leaf.lead_dims} lead dims")
    part = f"#{feat.part}" if feat.part is not None else ""
    return f"{p} <- image {quote(render_path(feat.path))}{part} ({', '.join(steps)})"


def _vec(v: float | tuple[float, ...]) -> str:
    if isinstance(v, tuple):
        return "[" + ",".join(fmt_pair_float(x) for x in v) + "]"
    return fmt_pair_float(v)


def _piece(x: Piece) -> str:
    if x.kind == "zero":
        s = f"zeros({x.width})" if x.fill == 0.0 else f"fill({x.width})={fmt_scalar(x.fill)}"
        return s + (f"#{x.part}" if x.part is not None else "")
    if x.kind == "const":
        return f"const({x.width})={fmt_scalar(x.fill)}"
    if x.kind == "previous":
        s = f"previous {x.role}" + (f"#{x.part}" if x.part is not None else "")
        return s + f" (fill {fmt_scalar(x.fill)})"
    f = x.feature
    assert f is not None
    s = render_path(f.path)
    if f.offset is not None:
        s += f"[{f.offset}:{f.offset + f.width}]"
    if x.frame is not None:
        s += f"@{x.frame}"
    if x.provenance is not None:
        s += f"#{x.provenance}"
    if f.part is not None:
        s += f"#{f.part}"
    if x.src_enc != x.dst_enc:
        s += f" ({x.src_enc}->{x.dst_enc})"
    if x.post is not None:
        s += " (post_rotate)"
    if x.perm is not None:
        s += " perm[" + ",".join(str(i) for i in x.perm) + "]"
    elif x.index is not None:
        s += f"[{x.index}]"
    elif x.dim is not None and (f.offset is None or x.dim != f.width):
        s += f"[:{x.dim}]"
    if x.src_range is not None and x.dst_range is not None:  # ADP-90: shown whenever both exist
        s += f" (range {fmt_pair(x.src_range)}->{fmt_pair(x.dst_range)})"
    if x.offset is not None or x.scale is not None:
        bits = ([f"+{_vec(x.offset)}"] if x.offset is not None else []) + (
            [f"*{_vec(x.scale)}"] if x.scale is not None else []
        )
        s += f" ({' '.join(bits)})"
    return s


def _state(plan: StatePlan) -> str:
    s = f"{quote(render_path(plan.placement))} <- concat({', '.join(_piece(x) for x in plan.pieces)})"
    if plan.clip is not None:
        s += f", clip[{fmt_pair_float(plan.clip[0])},{fmt_pair_float(plan.clip[1])}]"
    if plan.pad_to is not None:
        s += f", pad to {plan.pad_to}"
    return s


def _obs_line(plan: Plan) -> str:
    if isinstance(plan, ImagePlan):
        return _image(plan)
    if isinstance(plan, StatePlan):
        return _state(plan)
    if isinstance(plan, TextPlan):
        p = quote(render_path(plan.placement))
        if plan.source is None:
            return f"{p} <- text fill {quote(str(plan.fill))}"
        return f"{p} <- text {quote(render_path(plan.source))}"
    assert isinstance(plan, CustomPlan)
    return f"{quote(render_path(plan.placement))} <- custom transform"


def _corrections(scale: object, offset: object, invert: bool, threshold: float | None) -> str:
    s = ""
    if isinstance(scale, tuple):
        s += f" (*{_vec(scale)})"
    elif scale is not None:
        s += f" (*{fmt_scalar(float(scale))})"  # type: ignore[arg-type]
    if offset is not None:
        s += f" (+{_vec(offset)})"  # type: ignore[arg-type]
    if invert:
        s += " (invert)"
    if threshold is not None:
        s += f" (-{fmt_scalar(threshold)})"
    return s


def _segment(seg: Segment) -> str:
    a = seg.env.actuator
    if seg.kind == "fill":
        return f"(opaque {seg.dim}d) <- fill {fmt_scalar(seg.fill)}"
    role = quote(str(a.role))
    if seg.kind == "opt_fill":
        return f"{role} <- fill {fmt_scalar(seg.fill)} ({seg.dim}d; model did not output this optional role)"
    s = f"{role} <- model[{seg.start}:{seg.stop}]"
    if a.part is not None:
        s += f"#{a.part}"
    m = seg.model
    if m is not None and m.reference is not None:
        s += f"~{m.reference}"
    if seg.src_enc is not None and seg.dst_enc is not None and seg.src_enc != seg.dst_enc:
        s += f" ({seg.src_enc}->{seg.dst_enc})"
    if seg.src_range is not None and seg.dst_range is not None:
        s += f" (range {fmt_pair(seg.src_range)}->{fmt_pair(seg.dst_range)})"
    if m is not None and m.offset is not None:
        s += f" (model +{_vec(m.offset)})"
    if seg.perm is not None:
        s += " perm[" + ",".join(str(i) for i in seg.perm) + "]"
    s += _corrections(a.scale, a.offset, a.invert, a.threshold)
    if seg.binarize:
        s += " (sign)"
    return s


def _action(plan: ActionPlan) -> list[str]:
    lines = [f"  {_segment(seg)}" for seg in plan.segments]
    if plan.clip is not None:
        lines.append(f"  clip to {fmt_pair(plan.clip)}")
    return lines


def describe(r: Resolved) -> str:
    """The adapter summary text (ADP-87): lines joined by ``\\n``, no trailing newline."""
    lines = ["observation:", *(f"  {_obs_line(p)}" for p in r.plans), "action:", *_action(r.action)]
    if r.resolve_advisories:
        lines.append("dropped:")
        lines.extend(
            f"  {a.message}" for a in sorted(r.resolve_advisories, key=lambda a: a.message)
        )
    shims = [(p, x) for p in r.plans if isinstance(p, StatePlan) for x in _custom_slices(p)]
    act_shims = [seg for seg in r.action.segments if seg.custom is not None]
    if shims or act_shims:
        lines.append("host-side encodings:")
        for plan, (a, b, piece) in shims:
            assert piece.custom is not None
            lines.append(
                f"  obs    '{render_path(plan.placement)}'[{a}:{b}]: {piece.custom.base} -> {piece.custom.name}"
            )
        for seg in act_shims:
            assert seg.custom is not None
            lines.append(
                f"  action [{seg.start}:{seg.stop}]: {seg.custom.name} -> {seg.custom.base}"
            )
    return "\n".join(lines)


def _custom_slices(plan: StatePlan) -> list[tuple[int, int, Piece]]:
    out, off = [], 0
    for x in plan.pieces:
        if x.custom is not None:
            out.append((off, off + x.width, x))
        off += x.width
    return out
