"""Frame history: stacking windows, reset, observe, offsets/stride, black padding (ADP-107/108, DELTA-67/69)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlmesh.adapters as A

from ._helpers import box, dict_space

ACT1 = A.Action(A.Actuator("x/a", 1))


def _adapter(leaf: A.Image) -> A.Adapter:
    tags = A.EnvTags({"cam": A.ImageTag(A.IMAGE_PRIMARY)}, ACT1)
    return A.resolve(
        tags, dict_space(cam=box([1, 1, 1], "uint8")), box([1]), A.ModelSpec({"img": leaf}, ACT1)
    )


def frame(n: int) -> dict[str, Any]:
    return {"cam": np.full((1, 1, 1), n, np.uint8)}


def ids(stacked: np.ndarray) -> list[int]:
    return [int(x) for x in stacked.reshape(stacked.shape[0], -1)[:, 0]]


def test_stack_pads_with_the_first_frame_and_rolls_oldest_first_ADP_107() -> None:
    ad = _adapter(A.Image(A.IMAGE_PRIMARY, stack=3))
    first = ad.transform_obs(frame(5))["img"]
    assert first.shape == (3, 1, 1, 1) and ids(first) == [5, 5, 5]
    assert ids(ad.transform_obs(frame(6))["img"]) == [5, 5, 6]
    assert ids(ad.transform_obs(frame(7))["img"]) == [5, 6, 7]
    assert ids(ad.transform_obs(frame(8))["img"]) == [6, 7, 8]


def test_reset_clears_the_window_so_the_next_frame_pads_from_itself_ADP_108() -> None:
    ad = _adapter(A.Image(A.IMAGE_PRIMARY, stack=2))
    ad.transform_obs(frame(1))
    ad.transform_obs(frame(2))
    ad.reset()
    assert ids(ad.transform_obs(frame(9))["img"]) == [9, 9]


def test_stacked_frames_include_lead_dims_and_the_stack_is_not_described_ADP_89() -> None:
    ad = _adapter(A.Image(A.IMAGE_PRIMARY, stack=2, lead_dims=1, layout="chw"))
    assert ad.transform_obs(frame(1))["img"].shape == (2, 1, 1, 1, 1)
    assert "stack" not in ad.describe()
    assert ad.stacks == {"img": 2}
    assert ad.history_keys() == ("img",)
    assert ad.history_windows() == (("img", 2, 1),)


def test_observe_advances_the_window_without_a_prediction_DELTA_69() -> None:
    ad = _adapter(A.Image(A.IMAGE_PRIMARY, stack=3))
    seen = []
    for step in range(5):  # horizon 2: predict on even steps, observe on odd ones
        if step % 2 == 0:
            seen.append(ids(ad.transform_obs(frame(step))["img"]))
        else:
            ad.observe(frame(step))
    assert seen == [[0, 0, 0], [0, 1, 2], [2, 3, 4]]


def test_stride_with_black_padding_matches_the_release_windows_DELTA_69() -> None:
    ad = _adapter(A.Image(A.IMAGE_PRIMARY, stack=3, stride=2, stack_pad="black"))
    windows = [ids(ad.transform_obs(frame(n))["img"]) for n in range(6)]
    assert windows == [[0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 3], [0, 2, 4], [1, 3, 5]]


def test_black_padding_pushes_a_raw_zero_frame_through_the_pipeline() -> None:
    ad = _adapter(
        A.Image(A.IMAGE_PRIMARY, stack=2, stack_pad="black", normalize=(-1, 1), dtype="float32")
    )
    out = ad.transform_obs(frame(255))["img"]
    assert out.reshape(-1).tolist() == [-1.0, 1.0]


def test_explicit_offsets_pick_frames_from_the_window_DELTA_67() -> None:
    ad = _adapter(A.Image(A.IMAGE_PRIMARY, stack=2, offsets=(-3, 0)))
    windows = [ids(ad.transform_obs(frame(n))["img"]) for n in range(1, 6)]
    assert windows == [[1, 1], [1, 2], [1, 3], [1, 4], [2, 5]]
    assert ad.history_windows()[0][1] == 4


def test_each_adapter_keeps_its_own_windows() -> None:
    a, b = _adapter(A.Image(A.IMAGE_PRIMARY, stack=2)), _adapter(A.Image(A.IMAGE_PRIMARY, stack=2))
    a.transform_obs(frame(1))
    assert ids(b.transform_obs(frame(4))["img"]) == [4, 4]


def test_stacked_frames_are_copies_of_the_env_buffer() -> None:
    ad = _adapter(A.Image(A.IMAGE_PRIMARY, stack=2))
    buf = np.full((1, 1, 1), 3, np.uint8)
    ad.transform_obs({"cam": buf})
    buf[...] = 4
    assert ids(ad.transform_obs({"cam": buf})["img"]) == [3, 4]


@pytest.mark.parametrize("stack", [1, 64])
def test_stack_bounds_are_inclusive(stack: int) -> None:
    assert A.Image(A.IMAGE_PRIMARY, stack=stack).stack == stack
