"""The viewer core: throttle (VIEW-6), run control at step boundaries, best effort (VIEW-9), close (VIEW-10)."""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np
import pytest

import rlmesh
from rlmesh.numpy import Model
from rlmesh.view._core import Viewer
from rlmesh.view._sources import FrameSource
from rlmesh.view._synthetic import CounterEnv

BOUND = 10.0  # seconds any wait in these tests may take before it is a failure


class Recorder:
    """A backend that keeps what the pump hands it."""

    name = "recorder"

    def __init__(self) -> None:
        self.frames: list[tuple[tuple[int, int], int]] = []
        self.got = threading.Event()
        self.closed = False

    def frame(self, key: tuple[int, int], frame: Any, stamp: float, seq: int) -> None:
        self.frames.append((key, int(frame[0, 0, 0])))
        self.got.set()

    def meta(self, now: float) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _viewer(fetch: Any, fps: int = 1000, n: int = 1) -> tuple[Viewer, Recorder]:
    v = Viewer([FrameSource(f"c{i}", "leaf", f"c{i}", fetch) for i in range(n)], fps=fps)
    rec = Recorder()
    v.backends.append(rec)
    v.start()
    return v, rec


def test_view6_fetch_only_when_the_throttle_draws() -> None:
    calls: list[int] = []

    def fetch(obs: Any, lane: int) -> Any:
        calls.append(obs)
        return np.full((2, 2, 3), obs % 256, np.uint8)

    v, _ = _viewer(fetch, fps=1)  # one frame a second: a burst of steps fetches once
    try:
        v.begin_episode(0, None, 1, 0)
        for t in range(1, 200):
            v.step(t, t, 0.0, 0.0, 0.0, 0.0)
        assert calls == [0]
    finally:
        v.close()


def test_frames_reach_the_backends_off_the_run_thread_and_only_the_newest_is_kept() -> None:
    v, rec = _viewer(lambda obs, lane: np.full((2, 2, 3), obs, np.uint8), fps=1000)
    try:
        v.begin_episode(0, None, 1, 1)
        assert rec.got.wait(BOUND)
        assert rec.frames[0] == ((0, 0), 1)
    finally:
        v.close()
    assert rec.closed


def _run_steps(v: Viewer, n: int, out: dict[str, Any]) -> None:
    try:
        v.begin_episode(0, None, 1, 0)
        for t in range(1, n + 1):
            out["step"] = t
            if v.step(t, t, 0.0, 0.0, 0.0, 0.0):
                out.setdefault("skipped", []).append(t)
    except KeyboardInterrupt as exc:
        out["quit"] = str(exc)
    out["done"] = True


def test_pause_blocks_at_a_step_boundary_and_single_step_advances_one() -> None:
    v, _ = _viewer(lambda o, lane: None)
    out: dict[str, Any] = {}
    v.request("pause")
    th = threading.Thread(target=_run_steps, args=(v, 50, out))
    th.start()
    try:
        with v._cv:
            assert v._cv.wait_for(lambda: v.hud.paused, BOUND)
        assert out["step"] == 1 and "done" not in out  # blocked after the first step
        assert not th.join(0.05) and th.is_alive()
        v.request("step")
        with v._cv:
            assert v._cv.wait_for(
                lambda: out.get("step") == 2 and v._steps_allowed == 0 and v.hud.paused, BOUND
            )
        assert th.is_alive()
        v.request("resume")
        th.join(BOUND)
        assert out.get("done") and out["step"] == 50 and not v.hud.paused
    finally:
        v.close()
        th.join(BOUND)


def test_skip_is_consumed_once_and_quit_is_sticky() -> None:
    v, _ = _viewer(lambda o, lane: None)
    out: dict[str, Any] = {}
    v.request("skip")
    _run_steps(v, 3, out)
    assert out["skipped"] == [1]
    v.request("quit")
    out = {}
    _run_steps(v, 3, out)
    assert out["step"] == 1 and "quit requested" in out["quit"]
    out = {}
    _run_steps(v, 3, out)
    assert out["step"] == 1 and "quit" in out  # sticky
    v.close()


def test_quit_wakes_a_paused_run() -> None:
    v, _ = _viewer(lambda o, lane: None)
    out: dict[str, Any] = {}
    v.request("pause")
    th = threading.Thread(target=_run_steps, args=(v, 5, out))
    th.start()
    with v._cv:
        assert v._cv.wait_for(lambda: v.hud.paused, BOUND)
    v.request("quit")
    th.join(BOUND)
    assert "quit" in out and not th.is_alive()
    v.close()


def test_closing_releases_a_paused_run() -> None:
    v, _ = _viewer(lambda o, lane: None)
    out: dict[str, Any] = {}
    v.request("pause")
    th = threading.Thread(target=_run_steps, args=(v, 5, out))
    th.start()
    with v._cv:
        assert v._cv.wait_for(lambda: v.hud.paused, BOUND)
    v.close()
    th.join(BOUND)
    assert out.get("done") and "quit" not in out


def test_selection_requests() -> None:
    v = Viewer(
        [FrameSource(f"c{i}", "leaf", f"c{i}", lambda o, lane: None) for i in range(3)], fps=30
    )
    v.request("next")
    assert v.selected == 1
    v.request("prev")
    v.request("prev")
    assert v.selected == 2
    v.request("select", source=0)
    assert v.selected == 0
    v.request("select", source=7)  # out of range: ignored
    assert v.selected == 0
    assert v.request("dance") is False
    v.set_all_frames(True)
    assert sorted(v._wanted) == [(0, 0), (1, 0), (2, 0)]
    v.set_all_frames(False)
    assert v._wanted == [(0, 0)]


def test_view9_feed_error_warns_once_and_the_run_goes_on() -> None:
    def broken(obs: Any, lane: int) -> Any:
        raise RuntimeError("camera unplugged")

    v, rec = _viewer(broken)
    with pytest.warns(
        UserWarning, match="rlmesh view: disabled after feed error: RuntimeError: camera unplugged"
    ):
        v.begin_episode(0, None, 1, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for t in range(5):
            assert v.step(t, t, 0.0, 0.0, 0.0, 0.0) is False  # silent no-ops
    assert v.disabled and v.closed and rec.closed


def test_view9_warnings_never_raise_even_under_error_filter() -> None:
    v, _ = _viewer(lambda o, lane: 1 / 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v.begin_episode(0, None, 1, 0)
    assert v.disabled


def test_view9_a_setup_error_is_one_warning_and_the_run_completes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import rlmesh.view._open as op

    def boom(*a: Any, **k: Any) -> Any:
        raise RuntimeError("no display")

    monkeypatch.setattr(op, "discover_sources", boom)
    with pytest.warns(
        UserWarning, match="rlmesh view: disabled after setup error: RuntimeError: no display"
    ):
        result = rlmesh.run(
            Model(lambda o: np.zeros(2, np.float32)), CounterEnv(8, 8, episode_steps=3), view="http"
        )
    assert result.episodes[0].steps == 3


def test_view11_terminal_unavailable_without_a_tty_is_a_warning() -> None:
    with pytest.warns(
        UserWarning, match=r"rlmesh view: terminal backend unavailable \(stdout not a TTY\?\)"
    ):
        result = rlmesh.run(
            Model(lambda o: np.zeros(2, np.float32)),
            CounterEnv(16, 16, episode_steps=3),
            view="terminal",
        )
    assert result.total_steps == 3
