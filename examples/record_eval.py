"""Record an eval into a result bundle: a video per camera per episode, steps.jsonl, index.html.

A tiny "reach" env (a dot moving towards a goal, drawn by ``render()`` and shown to the
policy as a camera observation) is served on 127.0.0.1; a policy is evaluated against it
with ``rlmesh.run`` while ``rlmesh.Recorder`` records every episode. Open the printed
``index.html`` in a browser.

Run: ``python examples/record_eval.py [OUT_DIR]`` (needs the ``record`` extra: ``pip install ".[record]"`` from a clone).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import rlmesh
from rlmesh.numpy import Model

SIZE = 96


class Reach(gym.Env[Any, Any]):
    """Move a dot to the goal within 40 steps; ``info["is_success"]`` at the end."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self) -> None:
        self.render_mode = "rgb_array"
        self.observation_space = gym.spaces.Dict(
            {
                "camera": gym.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8),
                "pos": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
                "goal": gym.spaces.Box(0.0, 1.0, (2,), np.float32),
            }
        )
        self.action_space = gym.spaces.Box(-0.05, 0.05, (2,), np.float32)
        self.pos = np.zeros(2, np.float32)
        self.goal = np.zeros(2, np.float32)
        self.t = 0

    def _draw(self, point_of_view: str) -> np.ndarray:
        img = np.full((SIZE, SIZE, 3), 30, np.uint8)
        img[:, :, 2] = np.linspace(30, 90, SIZE, dtype=np.uint8)[None, :]
        for (x, y), color in ((self.goal, (60, 200, 90)), (self.pos, (230, 80, 60))):
            r, c = int(y * (SIZE - 8)), int(x * (SIZE - 8))
            img[r : r + 8, c : c + 8] = color
        if point_of_view == "camera":  # the observation camera sees the scene mirrored
            img = img[:, ::-1]
        return np.ascontiguousarray(img)

    def _obs(self) -> dict[str, Any]:
        return {"camera": self._draw("camera"), "pos": self.pos.copy(), "goal": self.goal.copy()}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(0, 1, 2).astype(np.float32)
        self.goal = self.np_random.uniform(0, 1, 2).astype(np.float32)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.pos = np.clip(self.pos + np.asarray(action, np.float32), 0, 1)
        self.t += 1
        dist = float(np.linalg.norm(self.pos - self.goal))
        done = dist < 0.05
        info = {"dist": dist}
        if done or self.t >= 40:
            info["is_success"] = done
        return self._obs(), -dist, done, self.t >= 40 and not done, info

    def render(self) -> np.ndarray:
        return self._draw("render")


def policy(obs: dict[str, Any]) -> np.ndarray:
    """Head for the goal at 80 % of the top speed."""
    direction = obs["goal"] - obs["pos"]
    return np.clip(0.04 * direction / (np.linalg.norm(direction) + 1e-6), -0.05, 0.05).astype(
        np.float32
    )


def main(out: Path) -> None:
    options = rlmesh.ServeOptions(workflow_edition="2026.06")
    server = rlmesh.EnvServer(Reach(), "127.0.0.1:0", options=options).start()
    try:
        with rlmesh.Recorder(fps=20) as rec:
            # cameras discovered: render() first, then the image-like "camera" observation
            hooks = rec.capture(model="head-to-goal", env="Reach-v0", config={"speed": 0.04})
            result = rlmesh.run(
                Model(policy, spec=rlmesh.NO_ADAPTER), server.address, seeds=range(4), hooks=hooks
            )
            bundle = rec.export(out)
    finally:
        server.shutdown()
    print(
        f"{result.num_episodes} episodes, success rate {result.success_rate:.2f}, mean reward {result.mean_reward:.2f}"
    )
    print(f"bundle: {bundle}  (open {bundle / 'index.html'})")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("results/reach"))
