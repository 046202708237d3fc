"""Envs and models for the openpi bridge's tests (importable by worker processes)."""

from __future__ import annotations

import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np

from rlmesh.numpy import Model

IMAGE_SHAPE = (16, 16, 3)


class PixelCartPole(gym.Env[dict[str, Any], int]):
    """CartPole whose observation is ``{"observation/image", "observation/state"}`` (openpi keys).

    The image is drawn from the state, so a policy that reads both depends on both.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.inner = gym.make("CartPole-v1")
        self.observation_space = gym.spaces.Dict(
            {
                "observation/image": gym.spaces.Box(0, 255, IMAGE_SHAPE, np.uint8),
                "observation/state": self.inner.observation_space,
            }
        )
        self.action_space = self.inner.action_space

    def _obs(self, state: Any) -> dict[str, Any]:
        level = int(np.clip(128 + 400 * state[2], 0, 255))
        image = np.full(IMAGE_SHAPE, level, np.uint8)
        image[:, :, 1] = np.uint8(int(np.clip(128 + 100 * state[0], 0, 255)))
        return {"observation/image": image, "observation/state": np.asarray(state, np.float32)}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        state, info = self.inner.reset(seed=seed)
        return self._obs(state), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        state, reward, terminated, truncated, info = self.inner.step(int(action))
        return self._obs(state), float(reward), terminated, truncated, info

    def close(self) -> None:
        self.inner.close()


def policy(obs: dict[str, Any]) -> int:
    """Reads the state and the image: push towards the pole's lean, nudged by the picture."""
    lean = float(obs["observation/state"][2])
    return int(lean + (float(obs["observation/image"][0, 0, 1]) - 128) * 1e-4 > 0)


class ChunkModel(Model):
    """``policy`` of the chunk's first observation, for every frame; counts its forwards."""

    native_chunk = 5

    def load(self) -> None:
        self.forwards = 0

    def predict_chunk(self, obs: dict[str, Any], execution_horizon: int) -> Any:
        self.forwards += 1
        return np.full(execution_horizon, policy(obs), dtype=np.int64)


class ContextModel(Model):
    """Records ``(episode_id, predict_index)`` per forward and each episode end."""

    def load(self) -> None:
        self.seen: list[tuple[str, int]] = []
        self.ended: list[str] = []
        self.lock = threading.Lock()

    def predict(self, obs: dict[str, Any], context: Any) -> int:
        with self.lock:
            self.seen.append((context["episode_id"], context["predict_index"]))
        return policy(obs)

    def on_episode_end(self, episode_id: str = "") -> None:
        with self.lock:
            self.ended.append(episode_id)


class PromptModel(Model):
    """Answers ``[len(prompt)]`` as a float action (``-1`` without a prompt)."""

    def predict(self, obs: dict[str, Any]) -> Any:
        prompt = obs.get("prompt")
        return np.array([-1.0 if prompt is None else float(len(prompt))], np.float32)


class SlowModel(Model):
    """Sleeps ``delay_s`` per forward, then answers a ``horizon``-frame chunk of zeros."""

    def load(self, delay_s: float = 0.05, horizon: int = 10, action_dim: int = 4) -> None:
        self.delay_s = delay_s
        self.horizon = horizon
        self.action_dim = action_dim

    def predict_chunk(self, obs: Any, execution_horizon: int) -> Any:
        time.sleep(self.delay_s)
        return np.zeros((self.horizon, self.action_dim), np.float32)


class FailingModel(Model):
    """Raises on every forward."""

    def predict(self, obs: Any) -> Any:
        raise RuntimeError("the model exploded on purpose")


class WideModel(Model):
    """Answers 7-wide actions (an env that takes 1-wide ones cannot use them)."""

    def predict_chunk(self, obs: Any, execution_horizon: int) -> Any:
        return np.zeros((3, 7), np.float32)


class BoxEnv(gym.Env[dict[str, Any], Any]):
    """A 20-step env with ``{"observation/state": float32[4]}`` and a ``float32[1]`` action."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(
            {"observation/state": gym.spaces.Box(-10, 10, (4,), np.float32)}
        )
        self.action_space = gym.spaces.Box(-100, 100, (1,), np.float32)
        self.t = 0
        self.actions: list[Any] = []

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return {"observation/state": np.zeros(4, np.float32)}, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.actions.append(np.asarray(action).copy())
        self.t += 1
        obs = {"observation/state": np.full(4, self.t, np.float32)}
        return obs, 0.0, self.t >= 20, False, {}
