"""Gymnasium-native test envs for the rlmesh.gymnasium tests (importable as ``gym_envs:...``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class DictRenderEnv(gym.Env):  # type: ignore[type-arg]
    """A Dict-observation env rendering ``rgb_array`` frames; episodes of 5 steps.

    ``info`` carries the env's own ``t``; observations are seeded from ``np_random``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, render_mode: str | None = "rgb_array") -> None:
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Dict(
            {
                "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                "mode": gym.spaces.Discrete(3),
                "grid": gym.spaces.MultiBinary(4),
            }
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.t = 0
        self.pos = np.zeros(2, np.float32)

    def _obs(self) -> dict[str, Any]:
        grid = (np.abs(self.pos) > 0.5).astype(np.int8)
        return {
            "pos": self.pos.copy(),
            "mode": int(self.t % 3),
            "grid": np.concatenate([grid, grid]),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        self.pos = self.np_random.uniform(-0.5, 0.5, 2).astype(np.float32)
        return self._obs(), {"t": 0}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        self.pos = np.clip(self.pos + 0.1 * np.asarray(action, np.float32), -1.0, 1.0).astype(
            np.float32
        )
        reward = float(-np.abs(self.pos).sum())
        return self._obs(), reward, self.t >= 5, False, {"t": self.t}

    def render(self) -> Any:
        frame = np.zeros((8, 8, 3), np.uint8)
        x, y = ((self.pos + 1.0) * 3.5).astype(int)
        frame[y, x] = 255
        return frame
