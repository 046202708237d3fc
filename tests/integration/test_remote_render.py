"""Render through a real server (RND-1..5, VAL-5, CLT-9, OPP-14).

Frames are cast (not clamped or scaled) to uint8; ``(H, W, 3|4)`` and grayscale
``(H, W)`` pass as they are, ``(3|4, H, W)`` is transposed to HWC, any other shape
is "no frame" (``None``), not an error.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from integration_envs import RenderEnv

import rlmesh
import rlmesh.numpy as rnp
from rlmesh.errors import InvalidAction

pytestmark = pytest.mark.timeout(60)

RNG = np.random.default_rng(0)
HWC = RNG.integers(0, 256, (4, 5, 3), dtype=np.uint8)
HWC4 = RNG.integers(0, 256, (4, 5, 4), dtype=np.uint8)
GRAY = RNG.integers(0, 256, (4, 5), dtype=np.uint8)
CHW = RNG.integers(0, 256, (3, 6, 5), dtype=np.uint8)
CHW4 = RNG.integers(0, 256, (4, 6, 5), dtype=np.uint8)


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (HWC, HWC),
        (HWC4, HWC4),
        (GRAY, GRAY),
        (CHW, CHW.transpose(1, 2, 0)),
        (CHW4, CHW4.transpose(1, 2, 0)),
        (HWC.astype(np.int64), HWC),
        (
            np.array([[1.7, 254.9], [0.2, 9.99]]),
            np.array([[1, 254], [0, 9]], np.uint8),
        ),  # cast, not scaled
        (HWC.tolist(), HWC),  # anything array-like
    ],
    ids=["hwc", "hwc-rgba", "gray", "chw", "chw-rgba", "int64", "float-cast", "nested-list"],
)
def test_rgb_array_frames_arrive_as_uint8_HWC_or_HW(serve, frame, expected):
    server = serve(RenderEnv(frame))
    with rnp.RemoteEnv(server.address) as env:
        assert env.render_mode == "rgb_array"
        env.reset()
        got = env.render()
        assert isinstance(got, np.ndarray) and got.dtype == np.uint8
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
        assert got.flags.writeable


@pytest.mark.parametrize(
    "frame",
    [
        None,
        np.zeros(5, np.uint8),
        np.zeros((2, 2, 2), np.uint8),
        np.zeros((1, 2, 3, 4), np.uint8),
        np.zeros((0, 3, 3)),
        np.array([["a", "b"], ["c", "d"]]),
        np.array([[object(), object()], [object(), object()]]),
        "not a frame",
    ],
    ids=["none", "rank1", "two-channels", "rank4", "empty", "strings", "objects", "str"],
)
def test_other_frames_are_no_frame_not_an_error(serve, frame):
    server = serve(RenderEnv(frame))
    with rnp.RemoteEnv(server.address) as env:
        env.reset()
        assert env.render() is None
        env.step(0)  # the session is fine


def test_an_env_without_render_gives_no_frame(serve):
    class NoRender:
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Discrete(2)

        def reset(self, **kwargs):  # type: ignore[no-untyped-def]
            return 0, {}

        def step(self, action):  # type: ignore[no-untyped-def]
            return 0, 0.0, False, False, {}

        def close(self) -> None:
            pass

    server = serve(NoRender())
    with rnp.RemoteEnv(server.address) as env:
        assert env.render_mode is None
        env.reset()
        assert env.render() is None


def test_the_plain_client_renders_a_uint8_Tensor(serve):
    server = serve(RenderEnv(HWC))
    with rlmesh.RemoteEnv(server.address) as env:
        env.reset()
        frame = env.render()
        assert isinstance(frame, rlmesh.Tensor)
        assert (frame.dtype, frame.shape) == ("uint8", [4, 5, 3])
        np.testing.assert_array_equal(np.asarray(frame), HWC)


def test_a_scalar_endpoint_only_renders_env_index_0(serve):
    server = serve(RenderEnv(HWC))
    with rnp.RemoteEnv(server.address) as env:
        env.reset()
        with pytest.raises(
            InvalidAction, match="single-env render only supports env_index 0, got 1"
        ):
            env.render(env_index=1)
        assert env.render().shape == (4, 5, 3)  # recoverable


def test_a_lane_endpoint_renders_the_requested_lane(serve):
    frames = [np.full((2, 3, 3), i, np.uint8) for i in range(3)]
    server = serve([RenderEnv(f) for f in frames])
    with rnp.RemoteVectorEnv(server.address) as envs:
        assert envs.render_mode == "rgb_array"
        envs.reset()
        for i in range(3):
            np.testing.assert_array_equal(envs.render(env_index=i), frames[i])
        with pytest.raises(InvalidAction, match=r"env_index must be in \[0, 3\), got 3"):
            envs.render(env_index=3)


def test_a_gymnasium_vector_env_renders_the_requested_lane(serve):
    frames = [np.full((2, 3, 3), 10 * i, np.uint8) for i in range(2)]
    vec = gym.vector.SyncVectorEnv([lambda f=f: RenderEnv(f) for f in frames])
    server = serve(vec)
    with rnp.RemoteVectorEnv(server.address) as envs:
        envs.reset()
        np.testing.assert_array_equal(envs.render(env_index=1), frames[1])
        np.testing.assert_array_equal(envs.render(), frames[0])
