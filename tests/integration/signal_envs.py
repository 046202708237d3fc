"""Envs for the SIGTERM and render-fault tests (importable as ``signal_envs:...``)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np


class _Counter(gym.Env):  # type: ignore[type-arg]
    """Episodes of 10 steps on a 2-float observation; renders 16x16 frames."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode: str | None = "rgb_array") -> None:
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.renders = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        obs = np.full(2, self.t / 10.0, np.float32)
        return obs, 1.0, self.t >= 10, False, {}

    def render(self) -> Any:
        self.renders += 1
        return np.full((16, 16, 3), self.t * 20, np.uint8)


class SignalTakingEnv(_Counter):
    """Renders as a pygame env does: its first ``render()`` takes SIGTERM over.

    SDL (pygame) installs its own SIGTERM handler on first use when the disposition is
    still the default, and turns the signal into an event nobody reads. This env does the
    same from Python, so the test needs no pygame. After 20 renders it touches the file
    named by ``RLMESH_TEST_MARK`` (the test's cue that the run is under way).
    """

    def render(self) -> Any:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, lambda signum, frame: None)
        frame = super().render()
        mark = os.environ.get("RLMESH_TEST_MARK")
        if mark and self.renders == 20:
            Path(mark).touch()
        return frame


def signal_taking_env() -> SignalTakingEnv:
    return SignalTakingEnv()


class PygameMissingEnv(_Counter):
    """``render()`` fails as CartPole's does without pygame."""

    def render(self) -> Any:
        self.renders += 1
        raise gym.error.DependencyNotInstalled(
            'pygame is not installed, run `pip install "gymnasium[classic-control]"`'
        )


def pygame_missing_env() -> PygameMissingEnv:
    return PygameMissingEnv()
