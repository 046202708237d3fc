"""The apply engine: compile resolved plans into per-step closures (ADP-97..111).

Everything that can be decided at resolve time is: source getters, resize
tables, cast targets, float32 constants. A step then runs one closure per
payload slot and one per env action segment.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._dtypes import np_dtype
from ._check import fail
from ._join import Path, render_path
from ._ops_image import Resizer, cast_pixels, decode_image, fit_geometry, jpeg_roundtrip
from ._ops_rotation import convert
from ._plans import ImagePlan, Piece, StatePlan, TextPlan
from ._roles import ROTATION_DIMS

__all__ = ["OMIT", "compile_image", "compile_state", "compile_text", "make_getter", "read_vector"]

OBS_KEY = "<obs>"
OMIT: Any = object()  # a Text slot with no value and no fill is left out (ADP-100)
_F32 = np.float32


def make_getter(path: Path, root_dict: bool) -> Callable[[Mapping[str, Any]], Any]:
    """Read a source from the envelope (ADP-97): first key = top-level entry, else under ``<obs>``."""
    first: str
    if root_dict:
        first, rest = str(path[0]), path[1:]
    else:
        first, rest = OBS_KEY, path
    where = render_path(path)

    def walk(value: Any, segs: tuple[Any, ...]) -> Any:
        for i, seg in enumerate(segs):
            if isinstance(seg, str):
                if not isinstance(value, Mapping) or seg not in value:
                    avail = (
                        sorted(map(str, value))
                        if isinstance(value, Mapping)
                        else f"a {type(value).__name__}"
                    )
                    at = (
                        render_path(path[: len(path) - len(segs) + i])
                        if root_dict
                        else render_path(segs[:i])
                    )
                    raise ValueError(
                        f'observation has no key "{seg}" at "{at}" reading "{where}" (available: {avail})'
                    )
                value = value[seg]
            else:
                if not isinstance(value, (list, tuple)) or not -len(value) <= seg < len(value):
                    raise ValueError(f'observation has no item [{seg}] reading "{where}"')
                value = value[seg]
        return value

    if not rest:

        def get(env: Mapping[str, Any]) -> Any:
            try:
                return env[first]
            except KeyError:
                raise ValueError(
                    f'observation has no key "{first}" reading "{where}" (available: {sorted(map(str, env))})'
                ) from None

        return get

    def get_nested(env: Mapping[str, Any]) -> Any:
        if first not in env:
            raise ValueError(
                f'observation has no key "{first}" reading "{where}" (available: {sorted(map(str, env))})'
            )
        return walk(env[first], rest)

    return get_nested


def read_vector(value: Any) -> np.ndarray[Any, Any]:
    """A numeric leaf as a flat float32 vector (ADP-99); never aliases for writing."""
    if isinstance(value, np.ndarray):
        return value.astype(_F32, copy=False).reshape(-1)
    if isinstance(value, Mapping) and "data" in value:
        value = value["data"]
    if isinstance(value, (str, bytes)):
        raise ValueError(
            f"expected a numeric value, got {type(value).__name__}; bytes values are only valid for image inputs "
            "(PNG/JPEG)"
        )
    return np.asarray(value, dtype=_F32).reshape(-1)


def _affine(
    src: tuple[float, float], dst: tuple[float, float], where: str
) -> tuple[Any, Any, Any, Any]:
    if src[1] == src[0]:
        raise fail(
            "unsupported", f"{where}: source range {src} has zero width; cannot map it to {dst}"
        )
    return _F32(src[0]), _F32(src[1]) - _F32(src[0]), _F32(dst[1]) - _F32(dst[0]), _F32(dst[0])


def _scale_offset(scale: Any, offset: Any) -> tuple[Any, Any]:
    s = None if scale is None else np.asarray(scale, dtype=_F32)
    o = None if offset is None else np.asarray(offset, dtype=_F32)
    return s, o


# -- state -----------------------------------------------------------------------------
def _compile_piece(
    x: Piece, root_dict: bool, prev: dict[tuple[int, int], np.ndarray[Any, Any]]
) -> Callable[[Any], Any]:
    if x.kind in ("zero", "const"):
        const = np.full(x.width, x.fill, dtype=_F32)
        return lambda env: const
    if x.kind == "previous":
        assert x.prev_slice is not None
        sl, perm, width = x.prev_slice, x.perm, x.width
        first = np.full(sl[1] - sl[0], x.fill, dtype=_F32)

        def previous(env: Any) -> Any:
            v = prev.get(sl, first)
            return (v[list(perm)] if perm is not None else v)[:width]

        return previous
    f = x.feature
    assert f is not None
    get = make_getter(f.path, root_dict)
    off, fw = f.offset, f.width
    where = render_path(f.path)
    conv = x.converting
    src, dst, post = x.src_enc, x.dst_enc, x.post
    n_src = ROTATION_DIMS.get(src or "", 0)
    sel: Any = None
    if x.perm is not None:
        sel = np.asarray(x.perm, dtype=np.intp)
    elif x.index is not None:
        sel = slice(x.index, x.index + 1)
    elif x.dim is not None:
        sel = slice(0, x.dim)
    rng = None
    if x.src_range is not None and x.dst_range is not None and x.src_range != x.dst_range:
        rng = _affine(x.src_range, x.dst_range, f'state role "{x.role}"')
    scale, offset = _scale_offset(x.scale, x.offset)
    shim = x.custom.from_base if x.custom is not None else None
    width = x.custom.width if x.custom is not None else 0

    def piece(env: Any) -> Any:
        try:
            v = read_vector(get(env))
        except ValueError as exc:
            raise ValueError(f'state "{where}": {exc}') from None
        if off is not None:
            if v.shape[0] < off + fw:
                raise ValueError(
                    f'state "{where}": expected at least {off + fw} elements for slice [{off}:{off + fw}], got {v.shape[0]}'
                )
            v = v[off : off + fw]
        if conv:
            if v.shape[0] != n_src:
                raise ValueError(
                    f"expected {n_src}-element {src} rotation, got shape ({v.shape[0]},)"
                )
            v = np.asarray(convert(v.tolist(), str(src), str(dst), post), dtype=_F32)
        if sel is not None:
            v = v[sel]
        if rng is not None:
            a, b, c, d = rng
            v = (v - a) / b * c + d
        if scale is not None:
            v = v * scale
        if offset is not None:
            v = v + offset
        if shim is not None:
            v = _repack(shim, v, width, where)
        return v

    return piece


def _repack(fn: Any, v: Any, width: int, where: str) -> Any:
    if v.shape[0] != width:  # ADP-40
        raise ValueError(
            f'custom encoding at "{where}": expected {width} elements, got {v.shape[0]}'
        )
    out = np.asarray(fn(np.array(v, dtype=np.float64)))
    if out.ndim != 1 or out.shape[0] != width:
        raise ValueError(
            f'custom encoding at "{where}": from_base must return a flat width-{width} vector, got shape {out.shape}'
        )
    return out.astype(_F32)


def checked_cast(v: np.ndarray[Any, Any], dtype: np.dtype[Any], where: str) -> np.ndarray[Any, Any]:
    """Cast refusing non-integral or out-of-range values for integer targets (ADP-104)."""
    if v.dtype == dtype:
        return v
    if dtype.kind in "iub":
        if not np.all(np.isfinite(v)) or not np.all(np.floor(v) == v):
            raise ValueError(
                f'model input "{where}": cannot cast non-integral values to {dtype.name}'
            )
        if dtype.kind != "b":
            info = np.iinfo(dtype)
            if v.size and (v.min() < info.min or v.max() > info.max):
                raise ValueError(f'model input "{where}": values do not fit {dtype.name}')
    return v.astype(dtype)


def compile_state(
    plan: StatePlan, root_dict: bool, prev: dict[tuple[int, int], np.ndarray[Any, Any]]
) -> Callable[[Any], Any]:
    fns = [_compile_piece(x, root_dict, prev) for x in plan.pieces]
    where = render_path(plan.placement)
    dtype = np_dtype(plan.dtype)
    pad_to, reshape, as_list = plan.pad_to, plan.reshape, plan.container == "list"
    clip = plan.clip

    def state(env: Any) -> Any:
        parts = [fn(env) for fn in fns]
        v = (
            parts[0].astype(_F32, copy=True)
            if len(parts) == 1
            else np.concatenate(parts).astype(_F32, copy=False)
        )
        if clip is not None:
            np.clip(v, clip[0], clip[1], out=v)
        if pad_to is not None:
            if v.shape[0] > pad_to:
                raise ValueError(
                    f'model input "{where}" has {v.shape[0]} dims, more than pad_to={pad_to}'
                )
            if v.shape[0] < pad_to:
                v = np.concatenate([v, np.zeros(pad_to - v.shape[0], dtype=_F32)])
        out = checked_cast(v, dtype, where)
        if reshape is not None:
            out = out.reshape(reshape)
        if as_list:
            return out.astype(np.float64).tolist()
        return out

    return state


# -- text ------------------------------------------------------------------------------
def compile_text(plan: TextPlan, root_dict: bool) -> Callable[[Any], Any]:
    fill, as_list = plan.fill, plan.container == "list"
    get = make_getter(plan.source, root_dict) if plan.source is not None else None
    where = render_path(plan.source) if plan.source is not None else ""

    def text(env: Any) -> Any:
        value: Any = None
        if get is not None:
            try:
                value = get(env)
            except ValueError:
                value = None
            if value is not None and not isinstance(value, str):
                raise ValueError(f'text "{where}": expected a string, got {type(value).__name__}')
        if value is None:
            value = fill
        if value is None:
            return OMIT
        return [value] if as_list else value

    return text


# -- images ------------------------------------------------------------------------------
def compile_image(plan: ImagePlan, root_dict: bool) -> Callable[[Any], Any]:
    leaf = plan.leaf
    dtype = np_dtype(leaf.dtype)
    norm = plan.normalize
    to_chw = leaf.layout == "chw"
    lead = (1,) * leaf.lead_dims
    bgr = leaf.channel_order == "bgr"

    def finish(img: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if bgr:
            img = img[..., ::-1]
        out = cast_pixels(img, dtype, norm)
        if to_chw:
            out = out.transpose(2, 0, 1)
        out = np.ascontiguousarray(out)
        return out.reshape(lead + out.shape) if lead else out

    if plan.zero_fill is not None:
        frame = finish(np.full(plan.zero_fill, leaf.fill or 0, dtype=np.uint8))
        return lambda env: frame.copy()
    feat = plan.feature
    assert feat is not None
    get = make_getter(feat.path, root_dict)
    where = render_path(feat.path)
    vrange, chw_in, flip, jpeg = (
        feat.value_range,
        feat.layout == "chw",
        plan.flip,
        leaf.jpeg_quality,
    )
    H0, W0, C0 = feat.height, feat.width, feat.channels
    # CNF2-B2: each frame is resized from its real size; the crop and resize tables are
    # precomputed per input size (the resolved size first) and cached.
    geometries: dict[
        tuple[int, int], tuple[tuple[slice, slice] | None, Callable[[Any], Any] | None]
    ] = {(H0, W0): _frame_geometry(plan, H0, W0, H0, W0)}

    def image(env: Any) -> Any:
        raw = get(env)
        img = decode_image(raw, vrange, where)
        if chw_in:
            img = img.transpose(1, 2, 0)
        h, w, c = img.shape
        if c != C0:
            raise ValueError(
                f"image {where}: has {c} channel(s) but the env declared {C0}; only the height and width of "
                "a frame may differ from the space the adapter was resolved against"
            )
        geometry = geometries.get((h, w))
        if geometry is None:
            if len(geometries) >= 16:  # bounded: sizes that keep changing do not grow the cache
                geometries.clear()
            geometry = geometries[(h, w)] = _frame_geometry(plan, h, w, H0, W0)
        cut, resize = geometry
        if flip:
            img = img[::-1, ::-1]
        if jpeg is not None:
            img = jpeg_roundtrip(img, jpeg)
        if cut is not None:
            img = img[cut]
        if resize is not None:
            img = resize(img)
        out = finish(img)
        if isinstance(raw, np.ndarray) and np.may_share_memory(out, raw):
            out = out.copy()
        return out

    return image


def _frame_geometry(
    plan: ImagePlan, h: int, w: int, H0: int, W0: int
) -> tuple[tuple[slice, slice] | None, Callable[[Any], Any] | None]:
    """The crop and resize for an ``h x w`` frame of a plan resolved for ``H0 x W0``.

    A planned crop box scales with the frame; fit and upscale choices stay as resolved.
    """
    cut: tuple[slice, slice] | None = None
    box = None
    H, W = h, w
    if plan.crop_box is not None:
        y0, x0, bh, bw = plan.crop_box
        if (h, w) != (H0, W0):
            sy, sx = h / H0, w / W0
            y0, x0, bh, bw = y0 * sy, x0 * sx, bh * sy, bw * sx
        if plan.crop_slice:
            iy, ix, ih, iw = int(y0), int(x0), max(round(bh), 1), max(round(bw), 1)
            cut = (slice(iy, iy + ih), slice(ix, ix + iw))
            H, W = ih, iw
        else:
            box = (y0, x0, bh, bw)
    return cut, _compile_resize(plan, H, W, box)


def _compile_resize(plan: ImagePlan, H: int, W: int, box: Any) -> Callable[[Any], Any] | None:
    if plan.size is None:
        return None
    th, tw = plan.size
    kind = plan.leaf.resample
    eh, ew = (round(box[2]), round(box[3])) if box is not None else (H, W)
    ih, iw, oy, ox = fit_geometry(max(eh, 1), max(ew, 1), th, tw, plan.fit)
    C = plan.feature.channels if plan.feature is not None else 3
    if plan.fit == "crop":
        return Resizer(
            H, W, ih, iw, kind, channels=C, box=box, rows=(oy, oy + th), cols=(ox, ox + tw)
        )
    r = Resizer(H, W, ih, iw, kind, channels=C, box=box)
    if plan.fit != "pad" or (ih, iw) == (th, tw):
        return r

    def pad(img: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        canvas = np.zeros((th, tw, img.shape[2]), dtype=np.uint8)
        canvas[oy : oy + ih, ox : ox + iw] = r(img)
        return canvas

    return pad


class FrameStack:
    """A per-placement rolling window of processed frames (ADP-107, DELTA-67/69)."""

    def __init__(self, offsets: tuple[int, ...], pad: str, black: Callable[[], Any]) -> None:
        self.offsets = offsets
        self.span = 1 - offsets[0]
        self.pad = pad
        self.black = black
        self.window: deque[Any] = deque(maxlen=self.span)

    def push(self, frame: Any) -> None:
        if not isinstance(frame, np.ndarray):
            raise ValueError(f"frame stacking needs an array frame, got {type(frame).__name__}")
        if not self.window:
            fill = frame if self.pad == "first" else self.black()
            for _ in range(self.span - 1):
                self.window.append(fill)
        self.window.append(frame)

    def emit(self) -> Any:
        n = len(self.window)
        return np.stack([self.window[n - 1 + o] for o in self.offsets], axis=0)

    def clear(self) -> None:
        self.window.clear()
