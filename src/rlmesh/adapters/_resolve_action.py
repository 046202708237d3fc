"""Action planning: env segments in env order, each fed from a model slice or a fill (ADP-84..86)."""

from __future__ import annotations

from typing import Any

from ._action import Action, Actuator, CustomEncoding, custom_arm_message
from ._check import fail
from ._join import Advisory, Joined
from ._plans import ActionPlan, Segment
from ._resolve_state import _adhoc, check_declared
from ._roles import (
    ROTATION_DIMS,
    dim_law,
    fmt_pair,
    identity,
    is_sanctioned,
    quote,
    render_identity,
)

__all__ = ["model_layout", "plan_action"]


def model_layout(output: Action) -> tuple[dict[Any, tuple[int, int]], dict[Any, Any], int]:
    """Model actuator slices and labels by identity, plus the total model width (ADP-84)."""
    slices: dict[Any, tuple[int, int]] = {}
    labels: dict[Any, Any] = {}
    off = 0
    for a in output.components:
        dim = int(a.dim or 0)
        if a.role is not None:
            key = identity(a.role, a.part)
            if key in slices:
                raise fail(
                    "duplicate",
                    f"duplicate model action role {quote(render_identity(a.role, a.part))}",
                )
            slices[key] = (off, off + dim)
            labels[key] = a.labels
        off += dim
    return slices, labels, off


def _enc(a: Actuator) -> str | None:
    e = a.encoding
    return e.base if isinstance(e, CustomEncoding) else e


def plan_action(
    joined: Joined, output: Action, adv: list[Advisory], silent: list[Advisory]
) -> ActionPlan:
    if output.clip is not None:
        raise fail(
            "invalid_tag",
            "clip is an env-side actuator clamp; the model action declaration must leave it unset",
        )
    slices, _labels, in_dim = model_layout(output)
    by_key = {identity(a.role, a.part): a for a in output.components if a.role is not None}
    segments: list[Segment] = []
    seen: set[Any] = set()
    requested: set[Any] = set()
    for ea in joined.actuators:
        a = ea.actuator
        dim = int(a.dim or 0)
        if a.role is None:
            segments.append(Segment(ea, "fill", dim, fill=a.fill))
            continue
        key = identity(a.role, a.part)
        if key in seen:
            raise fail(
                "duplicate", f"duplicate env action role {quote(render_identity(a.role, a.part))}"
            )
        seen.add(key)
        requested.add(key)
        m = by_key.get(key)
        if m is None:
            if a.optional:
                segments.append(Segment(ea, "opt_fill", dim, fill=a.fill))
                continue
            extra = f' (part "{a.part}")' if a.part is not None else ""
            outs = sorted(
                render_identity(x.role, x.part) for x in output.components if x.role is not None
            )
            raise fail(
                "missing_role",
                f'env action needs role "{a.role}"{extra} but the model only outputs [{", ".join(quote(x) for x in outs)}]',
            )
        segments.append(_pair(ea, m, slices[key], adv))
    for m in output.components:
        unmatched = m.role is not None and identity(m.role, m.part) not in requested
        if unmatched and not is_sanctioned(str(m.role)):
            silent.append(Advisory("info", _adhoc(str(m.role))))
    return ActionPlan(in_dim, joined.action_width, segments, joined.action_clip, slices)


def _pair(ea: Any, m: Actuator, sl: tuple[int, int], adv: list[Advisory]) -> Segment:
    a: Actuator = ea.actuator
    r = a.role
    md, ed = int(m.dim or 0), int(a.dim or 0)
    law = dim_law(str(r))
    if law is not None and md != law:
        raise fail(
            "dim_mismatch",
            f'action role "{r}": model declares {md} dims but the role is {law}-D by convention',
        )
    if isinstance(a.encoding, CustomEncoding):
        raise fail(
            "unsupported",
            f'action role "{r}": the env declares a custom encoding; custom encodings are model-side shims '
            "(declare the env's native encoding instead)",
        )
    custom = m.encoding if isinstance(m.encoding, CustomEncoding) else None
    if custom is not None:
        if custom.to_base is None:
            raise fail(
                "unsupported",
                f'action role "{r}": the model\'s custom encoding "{custom.name}" needs to_base',
            )
        if not callable(custom.to_base):
            raise fail(
                "untrusted_entrypoint",
                f'action role "{r}": ' + custom_arm_message(custom.name, custom.to_base),
            )
        if m.binary:
            raise fail(
                "unsupported", f'action role "{r}": a custom-encoded actuator cannot be binary'
            )
    me, ee = _enc(m), ea.encoding
    if me is not None and ee is not None and me != ee:
        if md != ROTATION_DIMS.get(me, -1) or ed != ROTATION_DIMS.get(ee, -1):
            raise fail(
                "dim_mismatch",
                f'action role "{r}": dims {md}->{ed} do not match encodings "{me}"->"{ee}"',
            )
    elif (me is None) != (ee is None):
        raise fail(
            "encoding_mismatch",
            f'action role "{r}": cannot convert encoding {me or "none"} to {ee or "none"}; both sides must declare '
            "a rotation encoding",
        )
    elif md != ed:
        raise fail(
            "dim_mismatch", f'action role "{r}": model outputs {md} dims but the env expects {ed}'
        )
    if m.clip:
        raise fail(
            "invalid_tag",
            f'action role "{r}": clip is an env-side clamp; declare it on the env actuator',
        )
    binarize = a.binary or m.binary
    if (a.threshold is not None or m.threshold is not None) and not binarize:
        raise fail(
            "invalid_tag",
            f'action role "{r}": threshold requires a binary component (set binary=true)',
        )
    clip = None
    if a.clip:
        if ea.range is None:
            raise fail(
                "invalid_tag",
                f'action role "{r}": clip=true clamps to range, but no range is declared',
            )
        clip = ea.range
    check_declared(r, "frame", m.frame, a.frame, adv)
    check_declared(r, "reference", m.reference, a.reference, adv)
    perm = None
    if m.labels is not None:
        if a.labels is None:
            raise fail(
                "invalid_tag",
                f'action role "{r}": the model names labels {list(m.labels)} but the env actuator is unlabeled',
            )
        if set(m.labels) != set(a.labels):
            raise fail(
                "invalid_tag",
                f'action role "{r}": model labels {list(m.labels)} do not match the env labels {list(a.labels)}',
            )
        perm = tuple(m.labels.index(x) for x in a.labels)
    src_range, dst_range = m.range, ea.range
    if src_range is not None and dst_range is None:
        adv.append(Advisory(
            "info",
            f'action role "{r}": the model declares range {fmt_pair(src_range)} but the env actuator has no range; '
            "the range is a no-op (it does not clamp)",
        ))  # fmt: skip
    if src_range == dst_range or src_range is None or dst_range is None:
        src_range = dst_range = None
    return Segment(
        ea, "map", ed, start=sl[0], stop=sl[1], model=m, src_enc=me, dst_enc=ee, custom=custom,
        src_range=src_range, dst_range=dst_range, binarize=binarize, clip=clip, perm=perm,
    )  # fmt: skip
