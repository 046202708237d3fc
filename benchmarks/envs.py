"""Deterministic benchmark envs (gymnasium + numpy only).

``ImageEnv``: Dict observation {"image": uint8 224x224x3, "state": float32[16]}, Box(7)
float32 action; frames are precomputed noise so the env itself costs next to nothing and
the transport is what is measured.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class ImageEnv(gym.Env):  # type: ignore[misc]
    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self, height: int = 224, width: int = 224, channels: int = 3, state_dim: int = 16
    ) -> None:
        self.observation_space = spaces.Dict(
            {
                "image": spaces.Box(0, 255, (height, width, channels), dtype=np.uint8),
                "state": spaces.Box(-np.inf, np.inf, (state_dim,), dtype=np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (7,), dtype=np.float32)
        rng = np.random.default_rng(12345)
        self._frames = rng.integers(0, 256, size=(4, height, width, channels), dtype=np.uint8)
        self._state = np.linspace(-1, 1, state_dim, dtype=np.float32)
        self._t = 0

    def _obs(self) -> dict[str, Any]:
        return {"image": self._frames[self._t % 4], "state": self._state}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._t += 1
        return self._obs(), 0.0, False, False, {}


def image_action(i: int) -> np.ndarray:
    return np.full(7, ((i % 7) - 3) / 10.0, dtype=np.float32)


def cartpole_lanes(n: int = 16) -> Any:
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(n)])
