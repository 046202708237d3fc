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


class Box39Env(gym.Env):  # type: ignore[misc]
    """Meta-World's shape without MuJoCo: a 39-D float64 observation that leaves its declared
    bounds on every step (as Meta-World's hidden goal does), a Box(4) float32 action and a
    7-key float info dict; the env's own step is a few numpy operations."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        low = np.full(39, -np.inf)
        high = np.full(39, np.inf)
        low[:4], high[:4] = [-0.525, 0.348, -0.0525, -1.0], [0.525, 1.025, 0.7, 1.0]
        low[18:22], high[18:22] = low[:4], high[:4]
        low[36:], high[36:] = 0.0, 0.0  # the goal is hidden: declared [0, 0], reported as is
        self.observation_space = spaces.Box(low, high, (39,), dtype=np.float64)
        self.action_space = spaces.Box(-1.0, 1.0, (4,), dtype=np.float32)
        self._obs = np.zeros(39)
        self._goal = np.array([0.1, 0.8, 0.2])
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._obs = np.zeros(39)
        self._obs[1] = 0.6
        self._obs[36:] = self._goal
        return self._obs.copy(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._t += 1
        obs = self._obs
        obs[18:36] = obs[:18]
        obs[:3] = np.clip(obs[:3] + 0.01 * action[:3], -0.5, 1.0)
        dist = float(np.linalg.norm(obs[:3] - self._goal))
        info = {
            "success": float(dist < 0.05),
            "near_object": dist,
            "grasp_success": 1.0,
            "grasp_reward": dist,
            "in_place_reward": 1.0 - dist,
            "obj_to_target": dist,
            "unscaled_reward": 10.0 * (1.0 - dist),
        }
        return obs.copy(), 1.0 - dist, False, self._t >= 500, info


def metaworld_reach() -> Any:
    """Meta-World ``reach-v3`` (MuJoCo, state only), as its docs make it; needs ``metaworld``."""
    import metaworld  # noqa: F401  # registers the Meta-World/* ids

    return gym.make("Meta-World/MT1", env_name="reach-v3", seed=0)
