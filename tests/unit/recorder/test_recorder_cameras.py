"""The recorder keeps a camera through what should not cost it (REC-3, REC-4).

- frames that arrive with equal timestamps (a repeated step) are re-stamped by step and
  every frame is kept (they used to drop the camera: "frame pts must increase: 0 after 0");
- a read that fails once skips that frame and the camera stays;
- ``cameras=["render"]`` with no session records the declared ``render`` role.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from recorder_envs import frame

from conftest import require
from rlmesh import EpisodeResult, RunResult
from rlmesh.eval._hooks import StepEvent
from rlmesh.recorder import Recorder

pytestmark = pytest.mark.slow  # video encoding


class _BareContext:
    """A run context with nothing to discover cameras from (hooks driven without a session)."""

    num_envs = 1


def decode(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def record(camera: str, steps: list[int], read: Any, tmp_path: Path) -> tuple[list[Any], list[str]]:
    """Drive the hooks by hand: one episode, one StepEvent per entry of ``steps``."""
    require("av", "video recording")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder(codec="lossless") as rec:
            hooks: Any = rec.capture(model="m", env="e", cameras=[camera])
            hooks.on_run_start(_BareContext())
            hooks.on_episode_start(episode=0, seed=0)
            for k, step in enumerate(steps):
                obs = {"image": frame(k)}
                hooks.on_step(
                    StepEvent(
                        0,
                        0,
                        step,
                        obs,
                        0,
                        1.0,
                        k == len(steps) - 1,
                        False,
                        {},
                        0.0,
                        0.0,
                        lambda item, k=k, o=obs: read(k, o),
                    )
                )
            hooks.on_episode_end(EpisodeResult(0, 0, len(steps), float(len(steps)), True, False))
            hooks.on_run_end(RunResult(()))
            media = rec.to_dict()["workloads"][0]["episodes"][0].get("media", [])
            out = rec.export(tmp_path / "b")
            frames = [decode(out / m["path"]) for m in media]
    return [(m, f) for m, f in zip(media, frames)], [str(w.message) for w in caught]


def test_frames_with_equal_timestamps_are_restamped_and_every_frame_is_kept(tmp_path: Path) -> None:
    rows, messages = record("image/wrist", [0, 0, 1, 1, 2], lambda k, o: o["image"], tmp_path)
    ((row, frames),) = rows
    assert row["frameCount"] == 5
    assert [np.array_equal(f, frame(k)) for k, f in enumerate(frames)] == [True] * 5
    assert not any("disabled" in m or "must increase" in m for m in messages)


def test_a_read_that_fails_once_skips_that_frame_and_keeps_the_camera(tmp_path: Path) -> None:
    def flaky(k: int, obs: Any) -> Any:
        if k == 0:
            raise ValueError("the simulator's camera was not ready")
        return obs["image"]

    rows, messages = record("image/wrist", [0, 1, 2, 3], flaky, tmp_path)
    ((row, frames),) = rows
    assert row["frameCount"] == 3
    assert [np.array_equal(f, frame(k + 1)) for k, f in enumerate(frames)] == [True] * 3
    assert not any("cannot be read" in m or "disabled" in m for m in messages)


def test_a_camera_failing_every_time_is_given_up_with_its_cause(tmp_path: Path) -> None:
    def broken(k: int, obs: Any) -> Any:
        raise OSError("the camera cable is out")

    rows, messages = record("image/wrist", [0, 1, 2, 3, 4], broken, tmp_path)
    assert rows == []
    (text,) = [m for m in messages if "disabled for the rest of the run" in m]
    assert "OSError: the camera cable is out" in text and "cameras=[]" in text


def test_explicit_render_without_a_session_records_the_declared_render_role(
    tmp_path: Path,
) -> None:
    rows, messages = record("render", [0, 1, 2], lambda k, o: o["image"], tmp_path)
    ((row, frames),) = rows
    assert row["camera"] == "render" and row["frameCount"] == 3
    assert [np.array_equal(f, frame(k)) for k, f in enumerate(frames)] == [True] * 3
