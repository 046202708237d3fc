"""A real ``Session.run`` against a served env, recorded end to end (REC-3..6, VIEW-3/5).

The env runs in an ``EnvServer`` (TCP and Unix socket); the session dials it, the
recorder discovers its cameras through the client (``render(env_index=...)`` first, then
the declared image role), and every video is decoded back with PyAV and compared to the
frames the env produced.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
import rlmesh.adapters as adapt
from conftest import require
from rlmesh.models import NumpyModel
from rlmesh.recorder import Recorder

pytestmark = pytest.mark.slow  # child processes or video encoding

H, W = 64, 80


def frame(t: int, salt: int) -> np.ndarray:
    """Smooth gradients with a moving square: a lossy codec keeps a high PSNR."""
    y = np.linspace(40, 200, H, dtype=np.float32)[:, None]
    x = np.linspace(40, 200, W, dtype=np.float32)[None, :]
    img = np.stack(
        [np.broadcast_to(x, (H, W)), np.broadcast_to(y, (H, W)), np.full((H, W), 50.0 + 30 * salt)],
        -1,
    )
    img[20:32, (5 * t) % (W - 12) :][:, :12] = 230
    return img.astype(np.uint8)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


class ArmEnv(gym.Env[Any, Any]):
    """A wrist camera in the observation and a scene camera behind ``render()``; 6-step episodes."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self) -> None:
        self.render_mode = "rgb_array"
        self.observation_space = gym.spaces.Dict(
            {
                "wrist": gym.spaces.Box(0, 255, (H, W, 3), np.uint8),
                "pos": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
            }
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.t = 0

    def _obs(self) -> dict[str, Any]:
        return {"wrist": frame(self.t, 1), "pos": np.zeros(3, np.float32)}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        done = self.t >= 6
        return (
            self._obs(),
            float(action[0]),
            done,
            False,
            {"is_success": done and self.np_random.random() < 2.0},
        )

    def render(self) -> np.ndarray:
        return frame(self.t, 0)


def tagged_env() -> Any:
    tags = adapt.EnvTags(
        observation={
            "wrist": adapt.ImageTag(adapt.IMAGE_WRIST),
            "pos": adapt.StateTag(adapt.EEF_POS),
        },
        action=adapt.Action(adapt.Actuator(adapt.ACTION_GRIPPER, dim=1)),
    )
    return adapt.tag(ArmEnv(), tags)


def decode(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as container:
        assert [s.type for s in container.streams] == ["video"]
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_a_served_env_run_through_Session_run_is_recorded_and_decodes_back(
    serve: Any, tmp_path: Path, transport: str
) -> None:
    require("av", "video recording")
    server = serve(tagged_env(), transport=transport)
    rec = Recorder(fps=15, result_set_id="e2e")
    with (
        rlmesh.session(
            NumpyModel(lambda obs: np.array([0.25], np.float32), spec=rlmesh.NO_ADAPTER),
            server.address,
        ) as sess,
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("error")  # nothing in a healthy recording warns
        hooks = rec.capture(model="const-0.25", env="ArmEnv-v0", task="reach", config={"h": 1})
        first = sess.run(seeds=[10, 11], hooks=hooks)
        second = sess.run(seeds=[12], hooks=hooks)  # same workload: indices continue
    bundle = rec.export(tmp_path / "bundle", recorded_at="2026-12-02T00:00:00+00:00")
    rec.close()

    doc = json.loads((bundle / "result.json").read_text())
    (workload,) = doc["workloads"]
    assert workload["metrics"] == {"meanReward": 1.5, "successRate": 1.0, "totalSteps": 18}
    assert [e["index"] for e in workload["episodes"]] == [0, 1, 2]
    assert [e["seed"] for e in workload["episodes"]] == [10, 11, 12]
    assert first.num_episodes == 2 and second.num_episodes == 1
    for episode in workload["episodes"]:
        assert [m["camera"] for m in episode["media"]] == ["render", "image/wrist"]
        for m in episode["media"]:
            assert (
                m["path"]
                == f"media/w000-const-0.25/reach/ep{episode['index']:05d}/{m['camera'].replace('/', '_')}.mp4"
            )
            frames = decode(bundle / m["path"])
            # render(): the reset frame, then one after each step; the role: the observation each action came from
            assert len(frames) == m["frameCount"] == (7 if m["camera"] == "render" else 6)
            assert frames[0].shape == (H, W, 3) and (m["width"], m["height"]) == (W, H)
            salt = 0 if m["camera"] == "render" else 1
            assert min(psnr(f, frame(i, salt)) for i, f in enumerate(frames)) > 30.0
        steps = [json.loads(x) for x in (bundle / episode["stepLog"]).read_text().splitlines()]
        assert [s["step"] for s in steps] == list(range(6))
        assert all(s["action"] == [0.25] and s["reward"] == 0.25 for s in steps)
    page = (bundle / "index.html").read_text()
    assert page.count("<video") == 6
