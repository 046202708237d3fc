"""State planning: one piece per Concat part (ADP-76..81, ADP-90, DELTA-60/63..68)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ._action import CustomEncoding, custom_arm_message
from ._check import fail
from ._join import Advisory, Path, StateFeature, render_path
from ._model import Concat, Constant, State
from ._ops_rotation import to_matrix
from ._plans import Piece, StatePlan
from ._roles import (
    DTYPES,
    ROTATION_DIMS,
    fmt_pair,
    identity,
    is_registered,
    is_sanctioned,
    quote,
    render_identity,
)

if TYPE_CHECKING:
    from ._resolve_obs import ObsPlanner

__all__ = ["plan_state"]


def _parts(leaf: State | Concat) -> list[State | Constant]:
    if isinstance(leaf, State):
        return [leaf]
    return [State(p) if isinstance(p, str) else p for p in leaf.parts]


def _enc_set(enc: Any) -> tuple[str, ...]:
    if enc is None:
        return ()
    if isinstance(enc, CustomEncoding):
        return (enc.base,)
    return (enc,) if isinstance(enc, str) else tuple(enc)


def _enc_name(encs: tuple[str, ...]) -> str:
    return "none" if not encs else (encs[0] if len(encs) == 1 else "[" + ", ".join(encs) + "]")


def plan_state(pl: ObsPlanner, leaf: State | Concat, placement: Path) -> StatePlan:
    p = render_path(placement)
    parts = _parts(leaf)
    customs = [s for s in parts if isinstance(s, State) and isinstance(s.encoding, CustomEncoding)]
    if customs and (leaf.reshape is not None or leaf.container == "list"):
        raise fail(
            "unsupported",
            f'model input "{p}": a custom-encoded part cannot be combined with reshape or container="list"; '
            "the container must be container='array'",
        )
    if leaf.dtype not in DTYPES:
        raise fail("unsupported", f'model input "{p}": unknown dtype {quote(leaf.dtype)}')
    pieces = [_piece(pl, part, p) for part in parts]
    plan = StatePlan(
        placement, pieces, leaf.pad_to, leaf.dtype, leaf.reshape, leaf.container, leaf.clip
    )
    plan.zero_count = sum(1 for x in pieces if x.kind == "zero")
    width = plan.width
    if leaf.pad_to is not None and width > leaf.pad_to:
        raise fail(
            "dim_mismatch", f'model input "{p}" has {width} dims, more than pad_to={leaf.pad_to}'
        )
    final = max(width, leaf.pad_to or 0)
    if leaf.reshape is not None:
        known = math.prod(x for x in leaf.reshape if x != -1)
        if (-1 not in leaf.reshape and known != final) or (
            -1 in leaf.reshape and (known == 0 or final % known)
        ):
            raise fail(
                "dim_mismatch",
                f'model input "{p}": cannot reshape {final} values to {list(leaf.reshape)}',
            )
    if plan.zero_count:
        pl.loss_adv.append(
            Advisory(
                "caution",
                f'model input "{p}": {plan.zero_count} component(s) zero-filled for an absent env role',
            )
        )
    return plan


def _custom_guards(s: State, p: str) -> None:
    enc = s.encoding
    assert isinstance(enc, CustomEncoding)
    if not callable(enc.from_base):
        if enc.from_base is None:
            raise fail(
                "unsupported",
                f'model input "{p}": custom encoding "{enc.name}" on the observation side needs from_base',
            )
        raise fail(
            "untrusted_entrypoint",
            f'model input "{p}": ' + custom_arm_message(enc.name, enc.from_base),
        )
    if s.index is not None or s.optional:
        raise fail(
            "unsupported", f'model input "{p}": a custom-encoded part cannot set index or optional'
        )
    if s.dim is not None and s.dim != enc.width:
        raise fail(
            "unsupported",
            f'model input "{p}": a custom-encoded part may set dim only to restate its width {enc.width}',
        )


def _previous(pl: ObsPlanner, s: State, p: str) -> Piece:
    key = identity(s.role, s.part)
    sl = pl.model_slices.get(key)
    if sl is None:
        raise fail(
            "missing_role",
            f'model input "{p}": Previous({quote(render_identity(s.role, s.part))}) reads the model\'s own previous '
            "action, but the model output has no actuator with that role",
        )
    width = sl[1] - sl[0]
    perm = None
    labels = pl.model_labels.get(key)
    if s.labels is not None and labels is not None:
        if set(s.labels) != set(labels):
            raise fail(
                "dim_mismatch",
                f'model input "{p}": previous-action labels {list(s.labels)} differ from the actuator\'s {list(labels)}',
            )
        perm = tuple(labels.index(x) for x in s.labels)
    dim = s.dim if s.dim is not None else width
    if dim > width:
        raise fail(
            "dim_mismatch",
            f'state role "{s.role}": requested {dim} dims but the previous action has width {width}',
        )
    return Piece(
        "previous", dim, dim=s.dim, fill=s.fill, role=s.role, part=s.part, prev_slice=sl, perm=perm
    )


def _zero_width(s: State) -> int | None:
    if s.index is not None:
        return 1
    if s.dim is not None:
        return s.dim
    encs = _enc_set(s.encoding)
    known = next((e for e in encs if e in ROTATION_DIMS), None)
    return ROTATION_DIMS[known] if known else None


def _find(pl: ObsPlanner, s: State, p: str) -> StateFeature | None:
    found = pl._lookup(pl.states, s.role, s.part, p, "state")
    if not found:
        return None
    provs = (
        ()
        if s.provenance is None
        else ((s.provenance,) if isinstance(s.provenance, str) else tuple(s.provenance))
    )
    if len(found) > 1:
        if not provs:
            raise fail(
                "missing_role",
                f'model input "{p}": role "{s.role}" is published under several provenances '
                f"{sorted(str(f.provenance) for f in found)}; declare provenance= to pin one",
            )
        for want in provs:
            for f in found:
                if f.provenance == want:
                    pinned: StateFeature = f
                    return pinned
    feat: StateFeature = found[0]
    if provs and feat.provenance is not None and feat.provenance not in provs:
        raise fail(
            "invalid_tag",
            f'role "{s.role}": the model expects provenance {list(provs)} but the env declares "{feat.provenance}"',
        )
    if provs and feat.provenance is None:
        pl.resolve_adv.append(Advisory(
            "caution",
            f'role "{s.role}": the model declares provenance {list(provs)} but the env declares none, so the '
            "provenance it was trained against cannot be verified",
        ))  # fmt: skip
    return feat


def _piece(pl: ObsPlanner, s: State | Constant, p: str) -> Piece:
    if isinstance(s, Constant):
        return Piece("const", s.dim, fill=s.fill)
    if s.source == "action":
        return _previous(pl, s, p)
    if isinstance(s.encoding, CustomEncoding):
        _custom_guards(s, p)
    feat = _find(pl, s, p)
    if feat is None:
        pl._unknown_check(p, s.role)
        if s.optional:
            w = _zero_width(s)
            if w is None:
                raise fail(
                    "missing_width",
                    f'model input "{p}": optional state role "{s.role}" needs dim, index, or encoding to size its zero fill',
                )
            if not is_sanctioned(s.role) and not is_registered(s.role):
                pl.silent_adv.append(Advisory("info", _adhoc(s.role)))
            return Piece("zero", w, fill=s.fill, part=s.part, role=s.role)
        extra = f' (part "{s.part}")' if s.part is not None else ""
        offers = (
            "["
            + ", ".join(
                quote(x) for x in sorted({render_identity(f.role, f.part) for f in pl.j.states})
            )
            + "]"
        )
        raise fail(
            "missing_role",
            f'model input "{p}" needs state role "{s.role}"{extra} but the env offers {offers}',
        )
    return _sourced(pl, s, p, feat)


def _adhoc(role: str) -> str:
    return (
        f'model declares ad-hoc role "{role}" that this env does not: an ad-hoc role matches only on the exact '
        'string, so it resolves to a fill here -- use a registered role, or the "x/" namespace to mark it '
        "intentionally non-standard"
    )


def check_declared(
    role: str | None, what: str, wanted: Any, declared: Any, adv: list[Advisory]
) -> None:
    """The model's ``frame`` (or ``reference``) of ``role`` against the env's: two that differ
    fail; one the env does not declare is a caution in ``adv``."""
    if wanted is not None and declared is not None and wanted != declared:
        raise fail(
            "invalid_tag",
            f'role "{role}": the model expects {what} "{wanted}" but the env declares "{declared}"',
        )
    if wanted is not None and declared is None:
        adv.append(Advisory(
            "caution",
            f'role "{role}": the model declares {what} "{wanted}" but the env declares none, so the {what} it was '
            "trained against cannot be verified",
        ))  # fmt: skip


def _sourced(pl: ObsPlanner, s: State, p: str, feat: StateFeature) -> Piece:
    src_q = quote(render_path(feat.path))
    check_declared(s.role, "frame", s.frame, feat.frame, pl.resolve_adv)
    m_encs, e_encs = _enc_set(s.encoding), feat.encodings
    src = dst = None
    if m_encs or e_encs:
        if not (m_encs and e_encs):
            raise fail(
                "encoding_mismatch",
                f'state role "{s.role}": cannot convert encoding {_enc_name(e_encs)} to {_enc_name(m_encs)}; both '
                "sides must declare a rotation encoding",
            )
        if feat.native is None:
            raise fail(
                "encoding_mismatch",
                f'state role "{s.role}": the env declares only unrecognized encodings {list(e_encs)}',
            )
        if len(m_encs) == 1 and m_encs[0] not in ROTATION_DIMS:
            raise fail(
                "encoding_mismatch",
                f'state role "{s.role}": the model declares unrecognized rotation encoding "{m_encs[0]}"; expected one '
                f"of {sorted(ROTATION_DIMS)} (an unknown rotation encoding cannot be converted)",
            )
        known = [e for e in m_encs if e in ROTATION_DIMS]
        if not known:
            raise fail(
                "encoding_mismatch",
                f'state role "{s.role}": the model declares only unrecognized encodings {list(m_encs)}',
            )
        src = feat.native
        dst = src if src in known else known[0]
        if src == "gravity_xyz" and dst != src:
            raise fail(
                "encoding_mismatch",
                f'state role "{s.role}": cannot convert encoding gravity_xyz to {dst}; gravity_xyz is a projection '
                "and nothing converts out of it",
            )
    converting = src != dst or s.post_rotate is not None
    if s.post_rotate is not None and src == "gravity_xyz":
        raise fail(
            "encoding_mismatch",
            f'state role "{s.role}": post_rotate cannot apply to a gravity_xyz source',
        )
    if converting and src is not None and feat.width != ROTATION_DIMS[src]:
        raise fail(
            "dim_mismatch",
            f'state role "{s.role}": env feature {src_q} declares {feat.width} dims but encoding "{src}" has {ROTATION_DIMS[src]}',
        )
    ref = ROTATION_DIMS[dst] if converting and dst is not None else feat.width
    if s.index is not None and s.index >= ref:
        raise fail(
            "slice_out_of_range",
            f'state role "{s.role}": index {s.index} is out of range for the width-{ref} source feature {src_q}',
        )
    if s.dim is not None and s.dim > ref:
        raise fail(
            "slice_out_of_range",
            f'state role "{s.role}": requested {s.dim} dims but the source feature {src_q} has width {ref}',
        )
    perm = None
    if s.labels is not None:
        if feat.labels is None:
            raise fail(
                "invalid_tag",
                f'state role "{s.role}": the model names labels {list(s.labels)} but the env leaf {src_q} is unlabeled',
            )
        missing = [x for x in s.labels if x not in feat.labels]
        if missing:
            raise fail(
                "invalid_tag",
                f'state role "{s.role}": labels {missing} are missing on the env leaf {src_q} (it has {list(feat.labels)})',
            )
        perm = tuple(feat.labels.index(x) for x in s.labels)
    width = (
        1 if s.index is not None else (len(perm) if perm else (s.dim if s.dim is not None else ref))
    )
    for name in ("scale", "offset"):
        v = getattr(s, name)
        if isinstance(v, tuple) and len(v) != width:
            raise fail(
                "dim_mismatch",
                f'state role "{s.role}": per-axis {name} has {len(v)} values but the part has {width} dims',
            )
    if s.range is not None and feat.range is None:
        pl.resolve_adv.append(Advisory(
            "info",
            f'state role "{s.role}": the model declares range {fmt_pair(s.range)} but the env feature {src_q} has no '
            "range; the range is a no-op (it does not clamp)",
        ))  # fmt: skip
    post = (
        to_matrix(list(s.post_rotate.value), s.post_rotate.encoding)
        if s.post_rotate is not None
        else None
    )
    custom = s.encoding if isinstance(s.encoding, CustomEncoding) else None
    return Piece(
        "source", width, feature=feat, src_enc=src, dst_enc=dst, converting=converting, custom=custom,
        dim=s.dim, index=s.index, src_range=feat.range, dst_range=s.range, scale=s.scale, offset=s.offset,
        post=post, perm=perm, role=s.role, frame=feat.frame,
        provenance=feat.provenance if s.provenance is not None else None,
    )  # fmt: skip
