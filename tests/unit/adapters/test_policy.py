"""The conversion policy: silent, advisory, opt-in and error tiers (ADP-129)."""

from __future__ import annotations

from typing import Any

import pytest

import rlmesh.adapters as A

from ._helpers import TEXT, box, dict_space

ACT1 = A.Action(A.Actuator("x/a", 1))


def _cam(leaf: A.Image, shape: list[int] = [8, 8, 3]) -> A.Adapter:  # noqa: B006 - read only
    tags = A.EnvTags({"cam": A.ImageTag(A.IMAGE_PRIMARY), "t": A.TextTag("x/t")}, ACT1)
    return A.resolve(
        tags, dict_space(cam=box(shape, "uint8"), t=TEXT), box([1]), A.ModelSpec({"i": leaf}, ACT1)
    )


def _state(leaf: Any, tag: A.StateTag, width: int) -> A.Adapter:
    tags = A.EnvTags({"s": tag}, ACT1)
    return A.resolve(tags, dict_space(s=box([width])), box([1]), A.ModelSpec({"s": leaf}, ACT1))


@pytest.mark.parametrize(
    "leaf",
    [
        A.Image(A.IMAGE_PRIMARY, size=4),  # resize to <= env resolution
        A.Image(A.IMAGE_PRIMARY, layout="chw"),  # layout transpose
        A.Image(A.IMAGE_PRIMARY, normalize=True, dtype="float32"),  # normalize
        A.Image(A.IMAGE_PRIMARY, dtype="int16"),  # dtype cast
        A.Image(A.IMAGE_PRIMARY),  # channel count undeclared: no check
    ],
)
def test_silent_image_conversions_draw_no_advisory(leaf: A.Image) -> None:
    assert _cam(leaf).advisories() == []


def test_silent_rotation_and_range_conversions_draw_no_advisory() -> None:
    ad = _state(
        A.State(A.EEF_ROT, encoding="rot6d"), A.StateTag(A.EEF_ROT, encoding="quat_xyzw"), 4
    )
    assert ad.advisories() == []
    ad = _state(A.State("x/g", range=(-1, 1)), A.StateTag("x/g", range=(0, 1)), 1)
    assert ad.advisories() == []


@pytest.mark.parametrize(
    ("leaf", "fragment"),
    [
        (A.Image(A.IMAGE_PRIMARY, height=4, width=8), "changes the env's 8x8 aspect ratio"),
        (A.Image(A.IMAGE_PRIMARY, size=16), "upscales"),
        (A.Image(A.IMAGE_PRIMARY, channels=1), "channel"),
        (
            A.Image(A.IMAGE_SECONDARY, size=4, channels=3, height=None, width=None, optional=False),
            None,
        ),
    ],
)
def test_opt_in_conversions_fail_without_their_flag(leaf: A.Image, fragment: str | None) -> None:
    if (
        fragment is None
    ):  # a second camera exists, so no lone-camera rebinding: missing camera is an error
        tags = A.EnvTags({"a": A.ImageTag(A.IMAGE_PRIMARY), "b": A.ImageTag(A.IMAGE_WRIST)}, ACT1)
        space = dict_space(a=box([8, 8, 3], "uint8"), b=box([8, 8, 3], "uint8"))
        with pytest.raises(A.AdapterResolutionError, match="wants an image"):
            A.resolve(tags, space, box([1]), A.ModelSpec({"i": leaf}, ACT1))
        return
    with pytest.raises(A.AdapterResolutionError, match=fragment):
        _cam(leaf)


def test_opt_in_flags_unlock_the_conversion() -> None:
    assert _cam(A.Image(A.IMAGE_PRIMARY, height=4, width=8, fit="stretch")).transform_obs(
        {"cam": __import__("numpy").zeros((8, 8, 3), "uint8")}
    )["i"].shape == (4, 8, 3)
    assert _cam(A.Image(A.IMAGE_PRIMARY, size=16, allow_upscale=True)).advisories() == []
    assert _cam(A.Image(A.IMAGE_PRIMARY, channels=3)).advisories() == []


def test_advisory_tier_crop_pad_and_zero_fill() -> None:
    (crop,) = _cam(A.Image(A.IMAGE_PRIMARY, height=4, width=8, fit="crop")).advisories()
    assert crop.severity == "info" and "aspect crop drops edge pixels" in crop.message
    (pad,) = _cam(A.Image(A.IMAGE_PRIMARY, height=4, width=8, fit="pad")).advisories()
    assert pad.severity == "info" and "aspect pad adds letterbox borders" in pad.message
    ad = _state(A.Concat("x/s", A.State("x/missing", dim=2, optional=True)), A.StateTag("x/s"), 1)
    (zero,) = ad.advisories()
    assert zero.severity == "caution" and "1 component(s) zero-filled" in zero.message


def test_missing_text_and_actuator_roles_are_opt_in() -> None:
    tags = A.EnvTags(
        {"t": A.TextTag("x/t")},
        A.Action(A.Actuator("x/a", 1), A.Actuator("x/b", 1, optional=True, fill=0.5)),
    )
    spec = A.ModelSpec({"t": A.Text("x/other", fill="f")}, A.Action(A.Actuator("x/a", 1)))
    ad = A.resolve(tags, dict_space(t=TEXT), box([2]), spec)
    assert ad.transform_obs({"t": "ignored"}) == {"t": "f"}
    assert ad.transform_action([1.0]).tolist() == [1.0, 0.5]
