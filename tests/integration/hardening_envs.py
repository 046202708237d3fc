"""Envs for the hardening attacks (issue 18), importable as ``hardening_envs:...`` by child servers."""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import numpy as np


class DelayEnv(gym.Env):  # type: ignore[type-arg]
    """CartPole-shaped; ``reset(options={"sleep": s})`` takes ``s`` seconds; counts its calls."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.calls: list[str] = []
        self.t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self.calls.append("reset")
        self.t = 0
        if options and options.get("sleep"):
            threading.Event().wait(float(options["sleep"]))
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.calls.append("step")
        self.t += 1
        return np.full(4, self.t / 1000.0, np.float32), 1.0, False, False, {}

    def render(self) -> Any:
        self.calls.append("render")
        return None


def make_delay_env() -> DelayEnv:
    """``hardening_envs:make_delay_env``."""
    return DelayEnv()


class HangEnv(gym.Env):  # type: ignore[type-arg]
    """``step`` never returns (for ten minutes): a simulator stuck in a call (issue 28 item 12).

    ``hardening_envs:make_hang_env`` in a child server; ``path`` gets ``stepping`` when the
    step starts and ``closed`` on ``close()`` (which a stuck env never reaches).
    """

    metadata = {"render_modes": []}

    def __init__(self, path: str) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.path = path

    def _mark(self, text: str) -> None:
        with open(self.path, "a") as f:
            f.write(text + "\n")

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._mark("stepping")
        threading.Event().wait(600.0)  # bounded: the test kills the process long before
        return np.zeros(4, np.float32), 0.0, False, False, {}

    def close(self) -> None:
        self._mark("closed")


def make_hang_env(path: str) -> HangEnv:
    """``hardening_envs:make_hang_env``."""
    return HangEnv(path)
