"""The page's plots (axes, legend, the watched lane's actions) and "quit" returning the run (issue 29 item 5)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import numpy as np
import pytest

import rlmesh
from rlmesh.numpy import Model
from rlmesh.view import _open
from rlmesh.view._core import Viewer
from rlmesh.view._plot import flatten_action, line_plot_svg
from rlmesh.view._sources import discover_sources

SVG = "{http://www.w3.org/2000/svg}"


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # well-formed, or this raises


def _texts(root: ET.Element, cls: str) -> list[str]:
    group = next(g for g in root.iter(f"{SVG}g") if g.get("class") == cls)
    return [t.text or "" for t in group.iter(f"{SVG}text")]


def test_a_plot_has_both_axes_tick_labels_and_a_legend() -> None:
    root = _parse(
        line_plot_svg([[1.0, -2.0, 3.0], [0.5, 0.5, 0.5]], ["a[0]", "a[1]"], x0=7, y_label="action")
    )
    axes = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "axes")
    assert len(list(axes.iter(f"{SVG}line"))) == 3  # y axis, x axis, the dashed zero line
    ticks = _texts(root, "ticks")
    assert {"3", "-2", "0", "7", "9", "step", "action"} <= set(
        ticks
    )  # y range, x range, axis names
    assert _texts(root, "legend") == ["a[0]", "a[1]"]
    swatches = [r.get("fill") for r in root.iter(f"{SVG}rect")]
    lines = [p.get("stroke") for p in root.iter(f"{SVG}polyline")]
    assert swatches == lines and len(set(lines)) == 2  # each legend colour is its line's


def test_an_empty_plot_still_has_axes_and_says_so() -> None:
    root = _parse(line_plot_svg([], [], y_label="action"))
    assert "no data yet" in _texts(root, "ticks") and not list(root.iter(f"{SVG}polyline"))


def test_non_finite_values_are_gaps_and_names_are_escaped() -> None:
    svg = line_plot_svg([[1.0, float("nan"), 2.0, 3.0]], ["<b>&"], x0=1)
    root = _parse(svg)
    assert _texts(root, "legend") == ["<b>&"] and "<b>" not in svg
    assert len(list(root.iter(f"{SVG}circle"))) == 1 and len(list(root.iter(f"{SVG}polyline"))) == 1


@pytest.mark.parametrize(
    ("action", "values", "names"),
    [
        (np.float32(0.5), [0.5], ["a"]),
        (np.array([1, 2, 3]), [1.0, 2.0, 3.0], ["a[0]", "a[1]", "a[2]"]),
        ({"arm": np.zeros(2), "grip": 1}, [0.0, 0.0, 1.0], ["arm[0]", "arm[1]", "grip"]),
        ((np.ones(1), 4), [1.0, 4.0], ["0[0]", "1"]),
        (np.arange(20), [float(i) for i in range(8)], [f"a[{i}]" for i in range(8)]),
    ],
)
def test_actions_flatten_to_named_numbers(
    action: Any, values: list[float], names: list[str]
) -> None:
    assert flatten_action(action) == (values, names)


class _Quiet:
    name = "quiet"

    def frame(self, *a: Any) -> None:
        pass

    def meta(self, now: float) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def viewers(monkeypatch: pytest.MonkeyPatch) -> list[Viewer]:
    """``view=`` opens a real Viewer with a silent backend (no terminal, no port); the test keeps it."""
    made: list[Viewer] = []

    def open_viewer(cfg: Any, context: Any, *, route: Any = None, sources: Any = None) -> Viewer:
        found = discover_sources(context)
        v = Viewer(found, fps=1000, lanes=int(getattr(context, "num_envs", 1) or 1), route=route)
        v.backends.append(_Quiet())
        v.start()
        made.append(v)
        return v

    monkeypatch.setattr(_open, "open_viewer", open_viewer)
    monkeypatch.setattr(rlmesh.view, "open_viewer", open_viewer)
    return made


def _lane_env(lane_gain: float) -> Any:
    gym = pytest.importorskip("gymnasium")

    class Cam(gym.Env):  # type: ignore[misc]
        metadata = {"render_modes": ["rgb_array"]}
        render_mode = "rgb_array"

        def __init__(self) -> None:
            self.observation_space = gym.spaces.Box(-10.0, 10.0, (1,), np.float32)
            self.action_space = gym.spaces.Box(-100.0, 100.0, (2,), np.float32)
            self.t = 0

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            self.t = 0
            return np.array([float(seed or 0)], np.float32), {}

        def step(self, action: Any) -> Any:
            self.t += 1
            return np.array([lane_gain], np.float32), 1.0, self.t >= 5, False, {}

        def render(self) -> Any:
            return np.zeros((4, 4, 3), np.uint8)

    return Cam


def test_the_action_plot_of_a_vector_env_shows_the_watched_lane(viewers: list[Viewer]) -> None:
    gym = pytest.importorskip("gymnasium")
    venv = gym.vector.SyncVectorEnv([_lane_env(1.0)] * 3)

    def policy(obs: Any) -> Any:  # lane i acts (10 * i, -i): the plot must show lane 0's numbers
        lanes = np.arange(obs.shape[0], dtype=np.float32)
        return np.stack([10 * lanes, -lanes], axis=1)

    result = rlmesh.run(Model(policy), venv, seeds=[0, 1, 2], view="http")
    assert result.num_episodes == 3
    (v,) = viewers
    doc = v.series_doc()
    assert doc["action_names"] == ["a[0]", "a[1]"] and doc["lane"] == 0
    assert doc["actions"] and all(row == [0.0, -0.0] for row in doc["actions"])
    assert _texts(_parse(doc["action_svg"]), "legend") == ["a[0]", "a[1]"]
    assert 'aria-label="action (lane 0)"' in doc["action_svg"]


def test_selecting_another_lane_restarts_the_plots_on_it(viewers: list[Viewer]) -> None:
    gym = pytest.importorskip("gymnasium")
    venv = gym.vector.SyncVectorEnv([_lane_env(1.0)] * 3)
    picked: list[bool] = []

    def policy(obs: Any) -> Any:
        if not picked and viewers:
            viewers[0].request("lane", lane=2)
            picked.append(True)
        lanes = np.arange(obs.shape[0], dtype=np.float32)
        return np.stack([10 * lanes, -lanes], axis=1)

    rlmesh.run(Model(policy), venv, seeds=[0, 1, 2], view="http")
    doc = viewers[0].series_doc()
    assert (
        doc["lane"] == 2 and doc["actions"] and all(row == [20.0, -2.0] for row in doc["actions"])
    )


def test_quit_from_the_viewer_returns_the_finished_episodes(viewers: list[Viewer]) -> None:
    gym = pytest.importorskip("gymnasium")
    episodes: list[int] = []

    class Quit(rlmesh.RunHooks):
        def on_step(self, event: rlmesh.StepEvent) -> None:
            if event.episode == 2 and event.step == 1:
                viewers[0].request("quit")

        def on_episode_end(self, result: Any) -> None:
            episodes.append(result.index)

    result = rlmesh.run(Model(lambda obs: np.zeros(2, np.float32)), _lane_env(1.0)(), seeds=list(range(10)),
                        view="http", hooks=Quit())  # fmt: skip
    assert isinstance(result, rlmesh.RunResult)
    assert (
        [e.index for e in result.episodes] == episodes == [0, 1]
    )  # the third, unfinished, is dropped
    del gym


def test_rlmesh_eval_view_renders_a_gymnasium_id(viewers: list[Viewer]) -> None:
    """``rlmesh eval random SOME-ID --view http``: the id is made with rgb_array and the viewer reads its frames."""
    gym = pytest.importorskip("gymnasium")
    from rlmesh._cli.eval import main as eval_main

    renders: list[str | None] = []

    class Cam(_lane_env(1.0)):  # type: ignore[misc]
        metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

        def __init__(self, render_mode: str | None = None) -> None:
            super().__init__()
            self.render_mode = render_mode

        def render(self) -> Any:  # only the viewer renders during an eval
            renders.append(self.render_mode)
            return np.full((24, 32, 3), 90, np.uint8)

    if "UsersGymCam-v0" not in gym.registry:
        gym.register("UsersGymCam-v0", entry_point=Cam)
    assert (
        eval_main(["random", "UsersGymCam-v0", "--seeds", "0", "--view", "http", "--no-progress"])
        == 0
    )
    (v,) = viewers
    assert v.labels[0] == "render"
    assert renders and set(renders) == {"rgb_array"}


def test_quit_on_a_vector_run_returns_the_finished_episodes(viewers: list[Viewer]) -> None:
    gym = pytest.importorskip("gymnasium")
    venv = gym.vector.SyncVectorEnv([_lane_env(1.0)] * 2)
    ended: list[int] = []

    class Quit(rlmesh.RunHooks):
        def on_episode_end(self, result: Any) -> None:
            ended.append(result.index)
            if len(ended) == 3:
                viewers[0].request("quit")

    result = rlmesh.run(
        rlmesh.RANDOM_SAMPLE, venv, seeds=list(range(50)), view="http", hooks=Quit()
    )
    assert isinstance(result, rlmesh.RunResult)
    assert 3 <= result.num_episodes < 50 and [e.index for e in result.episodes] == ended
