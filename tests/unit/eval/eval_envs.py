"""Tiny in-process envs for the eval unit tests (no gymnasium registry, no sockets)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces


class CountEnv:
    """Episodes of ``length`` steps; obs = [step]; reward 1 per step; optional success flag.

    Records every reset/step call so tests can assert what the env saw.
    """

    metadata: dict[str, Any] = {}
    render_mode = None

    def __init__(
        self,
        length: int = 3,
        *,
        success: Any = None,
        success_key: str = "is_success",
        truncate: bool = False,
    ) -> None:
        self.length = length
        self.success = success
        self.success_key = success_key
        self.truncate = truncate
        self.observation_space = spaces.Box(-1e9, 1e9, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.t = 0
        self.resets: list[tuple[Any, Any]] = []
        self.actions: list[Any] = []
        self.closed = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self.resets.append((seed, options))
        self.t = 0
        return np.array([0.0], dtype=np.float32), {"reset": True}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.actions.append(action)
        self.t += 1
        end = self.t >= self.length
        info: dict[str, Any] = {}
        if end and self.success is not None:
            info[self.success_key] = self.success
        return (
            np.array([float(self.t)], dtype=np.float32),
            1.0,
            end and not self.truncate,
            end and self.truncate,
            info,
        )

    def close(self) -> None:
        self.closed += 1


class DictEnv(CountEnv):
    """A Dict action space ``{"arm": Box(2)}`` (EVAL-52)."""

    def __init__(self, length: int = 3) -> None:
        super().__init__(length)
        self.action_space = spaces.Dict(
            {"arm": spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)}
        )


class ContractOnly:
    """Exposes env_contract but cannot be stepped."""

    env_contract = object()


def counting_vector(n: int = 2, length: int = 4, **kw: Any) -> Any:
    """A gymnasium SyncVectorEnv over ``n`` CountEnv-like gymnasium envs."""
    import gymnasium as gym

    class _GymCount(gym.Env[Any, Any]):
        metadata: dict[str, Any] = {}

        def __init__(self) -> None:
            self.observation_space = spaces.Box(-1e9, 1e9, shape=(1,), dtype=np.float32)
            self.action_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
            self.t = 0
            self.seed_seen: int | None = None

        def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
            super().reset(seed=seed)
            self.seed_seen = seed
            self.t = 0
            return np.array([0.0], dtype=np.float32), {"seed": -1 if seed is None else seed}

        def step(self, action: Any) -> Any:
            self.t += 1
            return np.array([float(self.t)], dtype=np.float32), 1.0, self.t >= length, False, {}

    return gym.vector.SyncVectorEnv([_GymCount for _ in range(n)], **kw)
