"""MiniGrid-shaped envs with custom Gymnasium spaces (issue 29 item 4).

``MissionSpace`` is a ``gymnasium.Space[str]`` subclass of nothing rlmesh knows (as
MiniGrid's is); ``MissionText`` is the same idea written as a ``gymnasium.spaces.Text``
subclass; ``Pixels`` subclasses ``Box``. ``make_unknown`` / ``make_text`` /
``make_sequence`` are ``rlmesh serve`` targets.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

__all__ = [
    "GridEnv",
    "MissionSpace",
    "MissionText",
    "Pixels",
    "make_sequence",
    "make_text",
    "make_unknown",
]

MISSIONS = ("get the red key", "open the blue door", "go to the goal")


class MissionSpace(gym.spaces.Space):  # type: ignore[type-arg]
    """A space of mission strings, unknown to rlmesh (MiniGrid's shape)."""

    def __init__(self, missions: tuple[str, ...] = MISSIONS, seed: int | None = None) -> None:
        super().__init__(dtype=str, seed=seed)
        self.missions = missions

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return str(self.np_random.choice(self.missions))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and x in self.missions


class MissionText(gym.spaces.Text):
    """Mission strings as a ``Text`` subclass: it travels as the Text it is."""

    def __init__(self, missions: tuple[str, ...] = MISSIONS) -> None:
        super().__init__(max_length=max(len(m) for m in missions), min_length=1,
                         charset="abcdefghijklmnopqrstuvwxyz ")  # fmt: skip
        self.missions = missions


class Pixels(gym.spaces.Box):
    """A ``Box`` subclass (a custom image space): it travels as a Box."""

    def __init__(self, h: int = 7, w: int = 7) -> None:
        super().__init__(0, 255, (h, w, 3), np.uint8)


class GridEnv(gym.Env):  # type: ignore[type-arg]
    """Observations ``{"image", "direction", "mission"}`` (the mission is ``MISSIONS[seed % 3]``); 3 steps per episode."""

    def __init__(self, mission_space: gym.spaces.Space | None = None) -> None:  # type: ignore[type-arg]
        self.observation_space = gym.spaces.Dict(
            {
                "image": Pixels(),
                "direction": gym.spaces.Discrete(4),
                "mission": mission_space or MissionText(),
            }
        )
        self.action_space = gym.spaces.Discrete(3)
        self.t = 0
        self.resets = 0
        self.mission = MISSIONS[0]

    def _obs(self) -> dict[str, Any]:
        return {
            "image": np.full((7, 7, 3), self.t, np.uint8),
            "direction": self.t % 4,
            "mission": self.mission,
        }

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        self.resets += 1
        self.mission = MISSIONS[(seed or 0) % len(MISSIONS)]
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self._obs(), float(action), self.t >= 3, False, {}


def make_unknown() -> GridEnv:
    return GridEnv(MissionSpace())


def make_text() -> GridEnv:
    return GridEnv(MissionText())


def make_sequence() -> GridEnv:
    """A mission as a Gymnasium ``Sequence`` of letters: a kind rlmesh refuses to serve."""
    return GridEnv(gym.spaces.Sequence(gym.spaces.Discrete(26)))
