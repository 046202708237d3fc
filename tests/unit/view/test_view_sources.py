"""Source discovery (VIEW-3..5) and frame normalisation (VIEW-7)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlmesh
from rlmesh import adapters as adapt
from rlmesh.numpy import Model
from rlmesh.spaces import Box, Dict
from rlmesh.view._sources import (
    discover_sources,
    image_leaves,
    lane_slice,
    normalize_frame,
    render_thunk,
    select_index,
    source_labels,
)

# -- VIEW-7 normalisation ------------------------------------------------------------------


def test_view7_uint8_hwc_rgb_passes_through_without_copy() -> None:
    a = np.zeros((4, 5, 3), np.uint8)
    assert normalize_frame(a) is a


@pytest.mark.parametrize(
    ("shape", "out"),
    [
        ((4, 5), (4, 5, 3)),
        ((4, 5, 1), (4, 5, 3)),
        ((4, 5, 4), (4, 5, 3)),
        ((3, 4, 5), (4, 5, 3)),
        ((1, 4, 5), (4, 5, 3)),
    ],
)
def test_view7_shapes_become_hwc_rgb(shape: tuple[int, ...], out: tuple[int, ...]) -> None:
    f = normalize_frame(np.full(shape, 7, np.uint8))
    assert f is not None and f.shape == out and f.dtype == np.uint8 and f.flags.c_contiguous
    assert int(f.min()) == 7 == int(f.max())


def test_view7_grayscale_is_replicated_and_alpha_dropped() -> None:
    g = np.arange(6, dtype=np.uint8).reshape(2, 3)
    f = normalize_frame(g)
    assert f is not None and (f[:, :, 0] == g).all() and (f[:, :, 2] == g).all()
    rgba = np.dstack([np.full((2, 2), v, np.uint8) for v in (10, 20, 30, 40)])
    f = normalize_frame(rgba)
    assert f is not None and f[0, 0].tolist() == [10, 20, 30]


def test_view7_float_ranges() -> None:
    unit = normalize_frame(np.array([[[0.0, 0.5, 1.0]]], np.float32))
    assert unit is not None and unit[0, 0].tolist() == [0, 127, 255]
    signed = normalize_frame(np.array([[[-1.0, 0.0, 1.0]]], np.float64))
    assert signed is not None and signed[0, 0].tolist() == [0, 127, 255]
    wide = normalize_frame(np.array([[[-100.0, 0.0, 300.0]]], np.float32))
    assert wide is not None and wide[0, 0].tolist() == [0, 63, 255]
    inrange = normalize_frame(np.array([[[2.0, 100.0, 250.0]]], np.float32))
    assert inrange is not None and inrange[0, 0].tolist() == [2, 100, 250]
    flat = normalize_frame(np.full((2, 2, 3), 1000.0))
    assert flat is not None and int(flat.max()) == 0


def test_view7_non_images_are_skipped() -> None:
    for bad in (
        None,
        np.zeros(5),
        np.zeros((2, 2, 2, 3)),
        np.zeros((5, 6, 7)),
        "text",
        np.zeros((0, 3, 3)),
    ):
        assert normalize_frame(bad) is None


def test_view7_tensor_and_list_inputs() -> None:
    t = (
        rlmesh.Tensor.from_numpy(np.full((2, 3, 3), 9, np.uint8))
        if hasattr(rlmesh.Tensor, "from_numpy")
        else None
    )
    if t is not None:
        f = normalize_frame(t)
        assert f is not None and f.shape == (2, 3, 3)
    f = normalize_frame([[[1, 2, 3]]])
    assert f is not None and f.tolist() == [[[1, 2, 3]]]


# -- VIEW-3/4 labels ---------------------------------------------------------------------------


def test_view3_render_first_then_roles_in_declaration_order() -> None:
    assert source_labels(["b", "a"], "rgb_array") == ("render", "b", "a")
    assert source_labels(["b"], "RGB_ARRAY_LIST") == ("render", "b")
    assert source_labels(["b"], "human") == ("b",)
    assert source_labels(["render", "x"], "rgb_array") == ("render()", "render", "x")
    assert source_labels([], None) == ()


def test_view4_initial_selection() -> None:
    assert select_index(("render", "wrist"), "wrist") == 1
    assert select_index(("render", "wrist"), "missing") == 0
    assert select_index(("render",), None) == 0


# -- VIEW-5 render thunk ---------------------------------------------------------------------


def test_view5_render_thunk_by_signature() -> None:
    class Plain:
        def render(self) -> Any:
            return "plain"

    class Indexed:
        def render(self, *, env_index: int = 0) -> Any:
            return f"lane{env_index}"

    class Kw:
        def render(self, **kw: Any) -> Any:
            return kw

    class Vec:
        def render(self) -> Any:
            return (np.zeros((2, 2, 3)), np.ones((2, 2, 3)))

    assert render_thunk(object()) is None
    assert render_thunk(None) is None
    assert render_thunk(Plain())(3) == "plain"  # type: ignore[misc]
    assert render_thunk(Indexed())(2) == "lane2"  # type: ignore[misc]
    assert render_thunk(Kw())(1) == {"env_index": 1}  # type: ignore[misc]
    assert float(render_thunk(Vec())(1).max()) == 1.0  # type: ignore[misc]


# -- leaves ------------------------------------------------------------------------------------


def test_image_leaves_of_spaces() -> None:
    space = Dict(
        {
            "cams": Dict({"front": Box(0, 255, (32, 48, 3), "uint8")}),
            "chw": Box(0, 255, (3, 16, 16), "uint8"),
            "small": Box(0, 255, (4, 4, 3), "uint8"),
            "state": Box(-1.0, 1.0, (7,)),
        }
    )
    assert [label for _, label in image_leaves(space)] == ["cams/front", "chw"]
    gym = pytest.importorskip("gymnasium")
    gspace = gym.spaces.Dict({"pixels": gym.spaces.Box(0, 255, (20, 20, 3), np.uint8)})
    assert image_leaves(gspace) == [(("pixels",), "pixels")]


def test_lane_slice() -> None:
    obs = {"a": np.arange(6).reshape(3, 2), "t": (np.arange(3),)}
    lane = lane_slice(obs, 2)
    assert lane["a"].tolist() == [4, 5] and int(lane["t"][0]) == 2


# -- discovery on a real session ---------------------------------------------------------------


class CamEnv:
    """A tagged env with two image roles and an rgb render."""

    render_mode = "rgb_array"

    def __init__(self) -> None:
        self.observation_space = Dict(
            {"front": Box(0, 255, (8, 10, 3), "uint8"), "wrist": Box(0, 255, (8, 10, 3), "uint8")}
        )
        self.action_space = Box(-1.0, 1.0, (3,))
        self.metadata: dict[str, Any] = {}
        self.t = 0

    def _obs(self) -> Any:
        return {
            "front": np.full((8, 10, 3), self.t, np.uint8),
            "wrist": np.full((8, 10, 3), 100 + self.t, np.uint8),
        }

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        return self._obs(), 0.0, self.t >= 3, False, {}

    def render(self) -> Any:
        return np.full((6, 6, 3), 200, np.uint8)


TAGS = adapt.EnvTags(
    observation={"front": adapt.ImageTag("x/front"), "wrist": adapt.ImageTag("x/wrist")},
    action=adapt.Action(adapt.Actuator(adapt.ACTION_DELTA_POS, dim=3)),
)


def test_view3_discovery_from_session_roles_and_render() -> None:
    env = CamEnv()
    adapt.tag(env, TAGS)
    with rlmesh.session(
        Model(lambda o: np.zeros(3, np.float32), spec=rlmesh.NO_ADAPTER), env
    ) as sess:
        srcs = discover_sources(sess)
        assert [s.label for s in srcs] == ["render", "x/front", "x/wrist"]
        assert tuple(s.label for s in srcs) == sess.frame_sources()
        obs, _ = sess.reset()
        frames = [normalize_frame(s.fetch(obs, 0)) for s in srcs]
        assert [int(f[0, 0, 0]) for f in frames if f is not None] == [200, 0, 100]


def test_view3_untagged_env_falls_back_to_image_leaves() -> None:
    env = CamEnv()
    env.render_mode = "human"
    with rlmesh.session(Model(lambda o: np.zeros(3, np.float32)), env) as sess:
        srcs = discover_sources(sess)
        assert [(s.label, s.kind) for s in srcs] == [("front", "leaf"), ("wrist", "leaf")]
        assert discover_sources(sess, leaves=False) == ()
        obs, _ = sess.reset()
        f = normalize_frame(srcs[1].fetch(obs, 0))
        assert f is not None and int(f[0, 0, 0]) == 100


def test_a_vector_render_is_called_once_per_frame_for_every_lane() -> None:
    """A gymnasium vector env's render() returns every lane: one call serves all lanes (P-6)."""
    gym = pytest.importorskip("gymnasium")
    from rlmesh.view._core import Viewer

    calls: list[int] = []

    class Cam(gym.Env):  # type: ignore[misc]
        metadata = {"render_modes": ["rgb_array"]}
        render_mode = "rgb_array"

        def __init__(self) -> None:
            self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
            self.action_space = gym.spaces.Discrete(2)
            self.lane = len(calls)
            calls.append(0)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            return np.zeros(2, np.float32), {}

        def step(self, action: Any) -> Any:
            return np.zeros(2, np.float32), 0.0, False, False, {}

        def render(self) -> Any:
            calls[self.lane] += 1
            return np.full((4, 4, 3), 10 * self.lane, np.uint8)

    venv = gym.vector.SyncVectorEnv([Cam, Cam, Cam])
    with rlmesh.session(rlmesh.RANDOM_SAMPLE, venv) as sess:
        srcs = discover_sources(sess)
        assert [s.label for s in srcs] == ["render"] and srcs[0].fetch_all is not None
        obs, _ = venv.reset()
        v = Viewer(srcs, fps=30, lanes=3)
        v.set_all_frames(True)
        v._grab(obs, 0.0)
        assert calls == [1, 1, 1]  # not 3 renders of every lane
        frames = {key: int(raw[0, 0, 0]) for key, (raw, _t, _s) in v._take().items()}
        assert frames == {(0, 0): 0, (0, 1): 10, (0, 2): 20}
        assert int(srcs[0].fetch(obs, 2)[0, 0, 0]) == 20
