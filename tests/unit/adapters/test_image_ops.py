"""Image pipeline: decode, layout, flip, resize kernels, fit, crop, cast, normalize (ADP-102, ADP-124..128)."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import rlmesh.adapters as A
from rlmesh.adapters._ops_image import Resizer, cast_pixels, decode_image, fit_geometry

from ._helpers import box, dict_space

# the 6x8x3 gradient of the public resize vectors, row-major
VECTOR_IMAGE = np.array([(i % 36) * 7 + i // 36 for i in range(6 * 8 * 3)], dtype=np.uint8).reshape(
    6, 8, 3
)


def naive_bilinear(img: np.ndarray, H: int, W: int) -> np.ndarray:
    """The ADP-124 formula, one pixel at a time."""
    S_h, S_w, C = img.shape
    out = np.zeros((H, W, C), dtype=np.uint8)

    def axis(i: int, S: int, D: int) -> tuple[int, int, float]:
        pos = (i + 0.5) * S / D - 0.5
        lo = min(max(math.floor(pos), 0), S - 1)
        hi = min(lo + 1, S - 1)
        return lo, hi, min(max(pos - lo, 0.0), 1.0)

    for r in range(H):
        r0, r1, tr = axis(r, S_h, H)
        for c in range(W):
            c0, c1, tc = axis(c, S_w, W)
            for k in range(C):
                top = float(img[r0, c0, k]) * (1 - tc) + float(img[r0, c1, k]) * tc
                bot = float(img[r1, c0, k]) * (1 - tc) + float(img[r1, c1, k]) * tc
                out[r, c, k] = min(
                    max(round(top * (1 - tr) + bot * tr), 0), 255
                )  # round() is half-even
    return out


def test_bilinear_reproduces_the_pinned_reference_values_ADP_128() -> None:
    out = Resizer(6, 8, 3, 4, "bilinear")(VECTOR_IMAGE)
    assert out.reshape(-1)[:6].tolist() == [94, 102, 108, 136, 144, 150]
    aa = Resizer(6, 8, 3, 4, "bilinear_aa")(VECTOR_IMAGE)
    assert np.abs(aa.reshape(-1)[:4].astype(int) - [99, 106, 113, 123]).max() <= 1


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 9),
    st.integers(1, 9),
    st.integers(1, 12),
    st.integers(1, 12),
    st.integers(1, 4),
    st.integers(0, 2**31),
)
def test_vectorized_bilinear_is_bit_exact_with_the_per_pixel_formula(
    h: int, w: int, H: int, W: int, C: int, seed: int
) -> None:
    img = np.random.default_rng(seed).integers(0, 256, (h, w, C), dtype=np.uint8)
    assert np.array_equal(
        Resizer(h, w, H, W, "bilinear", channels=C)(img), naive_bilinear(img, H, W)
    )


@pytest.mark.parametrize(
    ("kind", "pil_name"),
    [("bilinear_aa", "BILINEAR"), ("bicubic_aa", "BICUBIC"), ("lanczos3_aa", "LANCZOS")],
)
@pytest.mark.parametrize(
    "sizes", [(37, 53, 11, 17), (64, 64, 20, 13), (10, 10, 25, 31), (48, 64, 24, 32)]
)
def test_support_scaled_kernels_match_pillow_within_one_step(
    kind: str, pil_name: str, sizes: tuple[int, ...]
) -> None:
    PIL = pytest.importorskip("PIL.Image")
    h, w, H, W = sizes
    img = np.random.default_rng(h * w).integers(0, 256, (h, w, 3), dtype=np.uint8)
    ours = Resizer(h, w, H, W, kind)(img).astype(int)
    ref = np.asarray(PIL.fromarray(img).resize((W, H), getattr(PIL, pil_name))).astype(int)
    assert np.abs(ours - ref).max() <= 1


def test_area_is_a_block_mean_for_integer_factors() -> None:
    img = np.random.default_rng(1).integers(0, 256, (8, 12, 3), dtype=np.uint8)
    ours = Resizer(8, 12, 4, 3, "area")(img)
    ref = np.rint(img.reshape(4, 2, 3, 4, 3).astype(float).mean(axis=(1, 3))).astype(np.uint8)
    assert np.array_equal(ours, ref)


def test_same_size_resize_returns_the_input_and_zero_sizes_fail() -> None:
    img = np.zeros((4, 4, 3), np.uint8)
    assert Resizer(4, 4, 4, 4, "bilinear")(img) is img
    with pytest.raises(ValueError, match="zero dimension"):
        Resizer(0, 4, 2, 2, "bilinear")
    with pytest.raises(ValueError, match="resolved for"):
        Resizer(4, 4, 2, 2, "bilinear")(np.zeros((5, 4, 3), np.uint8))


@pytest.mark.parametrize(
    ("src", "dst", "mode", "expect"),
    [
        ((480, 640), (224, 224), "crop", (224, 299, 0, 37)),
        ((480, 640), (224, 224), "pad", (168, 224, 28, 0)),
        ((480, 640), (224, 224), "stretch", (224, 224, 0, 0)),
        ((3, 5), (2, 2), "crop", (2, 3, 0, 0)),
    ],
)
def test_fit_geometry_ADP_126(
    src: tuple[int, int], dst: tuple[int, int], mode: str, expect: tuple[int, ...]
) -> None:
    assert fit_geometry(*src, *dst, mode) == expect


def _adapter(leaf: A.Image, shape: list[int], *, layout: str = "hwc", upside_down: bool = False, dtype: str = "uint8",
             low: float | None = None, high: float | None = None) -> A.Adapter:  # fmt: skip
    tags = A.EnvTags(
        {"cam": A.ImageTag(A.IMAGE_PRIMARY, layout, upside_down)}, A.Action(A.Actuator("x/a", 1))
    )
    space = dict_space(cam=box(shape, dtype, low, high))
    return A.resolve(
        tags, space, box([1]), A.ModelSpec({"img": leaf}, A.Action(A.Actuator("x/a", 1)))
    )


def _img(h: int, w: int, c: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


def test_fit_crop_equals_the_centre_of_the_full_intermediate_resize() -> None:
    img = _img(12, 16)
    out = _adapter(A.Image(A.IMAGE_PRIMARY, size=6, fit="crop"), [12, 16, 3]).transform_obs(
        {"cam": img}
    )["img"]
    full = Resizer(12, 16, 6, 8, "bilinear")(img)
    assert np.array_equal(out, full[:, 1:7])


def test_fit_pad_letterboxes_on_black() -> None:
    img = _img(8, 16) | 1
    out = _adapter(A.Image(A.IMAGE_PRIMARY, size=8, fit="pad"), [8, 16, 3]).transform_obs(
        {"cam": img}
    )["img"]
    assert out.shape == (8, 8, 3)
    assert (
        (out[:2] == 0).all()
        and (out[6:] == 0).all()
        and np.array_equal(out[2:6], Resizer(8, 16, 4, 8, "bilinear")(img))
    )


def test_aspect_preserving_fit_modes_equal_a_uniform_stretch_ADP_126() -> None:
    img = _img(8, 16)
    outs = [
        _adapter(A.Image(A.IMAGE_PRIMARY, height=4, width=8, fit=m), [8, 16, 3]).transform_obs(
            {"cam": img}
        )["img"]
        for m in ("stretch", "crop", "pad")
    ]
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])


def test_layout_flip_and_lead_dims_are_pure_index_permutations_ADP_102() -> None:
    img = _img(2, 3)
    chw = np.ascontiguousarray(img.transpose(2, 0, 1))
    out = _adapter(
        A.Image(A.IMAGE_PRIMARY, layout="chw", lead_dims=2),
        [3, 2, 3],
        layout="chw",
        upside_down=True,
    )
    got = out.transform_obs({"cam": chw})["img"]
    assert got.shape == (1, 1, 3, 2, 3)
    assert np.array_equal(got[0, 0], img[::-1, ::-1].transpose(2, 0, 1))


def test_matching_upside_down_flags_do_not_flip() -> None:
    img = _img(2, 3)
    out = _adapter(
        A.Image(A.IMAGE_PRIMARY, upside_down=True), [2, 3, 3], upside_down=True
    ).transform_obs({"cam": img})["img"]
    assert np.array_equal(out, img)
    assert not np.shares_memory(out, img)  # never hands back the caller's buffer


def test_normalize_true_maps_to_unit_float32_and_pairs_map_to_their_range_ADP_12() -> None:
    img = np.array([[[0, 51, 255]]], np.uint8)
    unit = _adapter(
        A.Image(A.IMAGE_PRIMARY, normalize=True, dtype="float32"), [1, 1, 3]
    ).transform_obs({"cam": img})["img"]
    assert unit.dtype == np.float32 and unit.reshape(-1).tolist() == pytest.approx([0, 0.2, 1])
    sym = _adapter(
        A.Image(A.IMAGE_PRIMARY, normalize=(-1, 1), dtype="float16"), [1, 1, 3]
    ).transform_obs({"cam": img})["img"]
    assert sym.dtype == np.float16 and sym.reshape(-1).tolist() == pytest.approx(
        [-1, -0.6, 1], abs=1e-3
    )


def test_integer_casts_refuse_lossy_values_ADP_102() -> None:
    assert cast_pixels(np.array([1, 200], np.uint8), np.dtype("int16"), None).dtype == np.int16
    with pytest.raises(ValueError, match="do not fit int8"):
        cast_pixels(np.array([1, 200], np.uint8), np.dtype("int8"), None)
    with pytest.raises(ValueError, match="non-integral"):
        cast_pixels(np.array([1, 2], np.uint8), np.dtype("uint8"), (0.0, 1.0))


def test_decode_maps_floats_through_the_space_range_and_clamps_ints_ADP_102() -> None:
    f = np.array([[[0.0, 0.5, 1.0]]], np.float32)
    assert decode_image(f, None, "x").reshape(-1).tolist() == [0, 128, 255]
    assert decode_image(f, (0.0, 2.0), "x").reshape(-1).tolist() == [0, 64, 128]
    assert decode_image(np.array([[[-5, 300, 7]]]), None, "x").reshape(-1).tolist() == [0, 255, 7]
    assert decode_image(np.array([[[True, False, True]]]), None, "x").reshape(-1).tolist() == [
        1,
        0,
        1,
    ]
    with pytest.raises(ValueError, match="3-D"):
        decode_image(np.zeros((2, 2), np.uint8), None, "x")


def test_png_bytes_decode_with_their_native_channels_ADP_99() -> None:
    PIL = pytest.importorskip("PIL.Image")
    img = _img(4, 5)
    buf = io.BytesIO()
    PIL.fromarray(img).save(buf, format="PNG")
    out = _adapter(A.Image(A.IMAGE_PRIMARY), [4, 5, 3]).transform_obs({"cam": buf.getvalue()})[
        "img"
    ]
    assert np.array_equal(out, img)
    with pytest.raises(ValueError, match="PNG/JPEG"):
        decode_image(b"not an image", None, "x")


def test_float_camera_space_bounds_drive_decoding() -> None:
    ad = _adapter(A.Image(A.IMAGE_PRIMARY), [1, 1, 3], dtype="float32", low=-1.0, high=1.0)
    out = ad.transform_obs({"cam": np.array([[[-1.0, 0.0, 1.0]]], np.float32)})["img"]
    assert out.reshape(-1).tolist() == [0, 128, 255]


def test_bgr_swaps_red_and_blue_after_the_spatial_steps_DELTA_67() -> None:
    img = _img(2, 2)
    out = _adapter(A.Image(A.IMAGE_PRIMARY, channel_order="bgr"), [2, 2, 3]).transform_obs(
        {"cam": img}
    )["img"]
    assert np.array_equal(out, img[..., ::-1])


def test_crop_slice_cuts_an_integer_centre_box_DELTA_67() -> None:
    img = _img(10, 10)
    out = _adapter(
        A.Image(A.IMAGE_PRIMARY, crop=0.6, crop_mode="slice"), [10, 10, 3]
    ).transform_obs({"cam": img})["img"]
    assert np.array_equal(out, img[2:8, 2:8])
    area = _adapter(
        A.Image(A.IMAGE_PRIMARY, crop_area=0.36, crop_mode="slice"), [10, 10, 3]
    ).transform_obs({"cam": img})["img"]
    assert np.array_equal(area, out)


def test_crop_zoom_resamples_the_fractional_box_DELTA_67() -> None:
    img = _img(10, 10)
    out = _adapter(A.Image(A.IMAGE_PRIMARY, crop=0.5, size=5), [10, 10, 3]).transform_obs(
        {"cam": img}
    )["img"]
    # a 5x5 box starting at pixel 2.5 sampled at 5x5: every sample lands on a pixel centre pair
    assert out.shape == (5, 5, 3)
    ref = np.rint((img[2:7, 2:7].astype(float) + img[3:8, 3:8] + img[2:7, 3:8] + img[3:8, 2:7]) / 4)
    assert np.abs(out.astype(float) - ref).max() <= 1


def test_jpeg_round_trip_keeps_shape_and_roughly_the_pixels_DELTA_67() -> None:
    pytest.importorskip("PIL")
    img = np.full((16, 16, 3), 120, np.uint8)
    out = _adapter(A.Image(A.IMAGE_PRIMARY, jpeg_quality=90), [16, 16, 3]).transform_obs(
        {"cam": img}
    )["img"]
    assert out.shape == img.shape and np.abs(out.astype(int) - 120).max() <= 3


def test_zero_filled_camera_is_a_constant_frame_through_the_output_steps_ADP_102() -> None:
    leaf = A.Image(A.IMAGE_WRIST, height=2, width=3, channels=1, optional=True, fill=51, normalize=True,
                   dtype="float32", layout="chw", lead_dims=1)  # fmt: skip
    ad = _adapter(leaf, [4, 4, 3])
    out = ad.transform_obs({"cam": _img(4, 4)})["img"]
    assert out.shape == (1, 1, 2, 3) and np.allclose(out, 0.2)
    assert ad.describe().splitlines()[1] == '  "img" <- zeros(2x3x1)'
    assert any("blank" in a.message and '"img"' in a.message for a in ad.advisories())


def test_lone_camera_rebinding_is_a_caution_ADP_71() -> None:
    ad = _adapter(A.Image(A.IMAGE_WRIST), [2, 2, 3])
    assert np.array_equal(ad.transform_obs({"cam": _img(2, 2)})["img"], _img(2, 2))
    (adv,) = ad.advisories()
    assert (
        adv.severity == "caution"
        and "image/wrist" in adv.message
        and "image/primary" in adv.message
    )
    assert "dropped:" in ad.describe()


def test_unsanctioned_roles_do_not_rebind_the_lone_camera_ADP_71() -> None:
    with pytest.raises(A.AdapterResolutionError, match="wants an image"):
        _adapter(A.Image("my/cam"), [2, 2, 3])
