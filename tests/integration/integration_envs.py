"""Small deterministic envs served by the integration tests (in threads and subprocesses).

Each env records what the server handed it (actions, reset arguments, close calls)
so a test can assert on both sides of the wire. Module-level ``make_*`` functions
are ``module:attr`` targets for ``rlmesh serve`` (``python -m rlmesh.serve --env``) in a child process.
"""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import numpy as np

import rlmesh.spaces as rs
from rlmesh.errors import RecoverableEnvError

__all__ = [
    "BlockingEnv",
    "CountdownEnv",
    "EchoEnv",
    "FlakyEnv",
    "RenderEnv",
    "make_countdown",
    "make_fuzz_env",
    "make_marker",
    "make_sleepy",
]


class EchoEnv:
    """Observation space == action space; ``step(a)`` returns ``a`` as the next observation.

    ``reset`` returns a fixed sample of the space. Records every action and reset call,
    or (``record=False``, for long fuzz runs) only the last ones.
    """

    metadata: dict[str, Any] = {}

    def __init__(self, space: Any, *, seed: int = 0, record: bool = True) -> None:
        sampler = rs.space_from_spec(space.spec, bridge="numpy")
        sampler.seed(seed)
        self.observation_space = space
        self.action_space = space
        self.first = sampler.sample()
        self.actions: list[Any] = []
        self.resets: list[tuple[Any, Any]] = []
        self.closed = 0
        self._record = record

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if not self._record:
            self.resets.clear()
        self.resets.append((seed, options))
        return self.first, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if not self._record:
            self.actions.clear()
        self.actions.append(action)
        return action, 0.5, False, False, {}

    def close(self) -> None:
        self.closed += 1


class CountdownEnv(gym.Env):  # type: ignore[type-arg]
    """Episodes of exactly ``length`` steps; obs is ``[t]`` (steps since reset), reward 1.

    ``info`` carries ``t`` on every call and ``seed`` (-1 when none) on reset.
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int = 3) -> None:
        self.length = length
        self.observation_space = gym.spaces.Box(0, 1000, (1,), np.int64)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.resets: list[int | None] = []
        self.closed = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.resets.append(seed)
        self.t = 0
        return np.array([0], dtype=np.int64), {"seed": -1 if seed is None else seed, "t": 0}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        done = self.t >= self.length
        return np.array([self.t], dtype=np.int64), 1.0, done, False, {"t": self.t}

    def close(self) -> None:
        self.closed += 1


class FlakyEnv:
    """Discrete(3) actions: 0 steps normally, 1 raises ``RecoverableEnvError``, 2 ``RuntimeError``."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.steps = 0
        self.closed = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self.steps = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if action == 1:
            raise RecoverableEnvError("the gripper is still moving; try again")
        if action == 2:
            raise RuntimeError("boom")
        self.steps += 1
        return np.full(2, 0.5, np.float32), 1.0, False, False, {"steps": self.steps}

    def close(self) -> None:
        self.closed += 1


class BlockingEnv:
    """``step(1)`` blocks until :attr:`release` is set; obs is the step counter.

    :attr:`entered` is set when a blocking step starts, :attr:`finished` when it ends.
    """

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 10**6, (1,), np.int64)
        self.action_space = gym.spaces.Discrete(2)
        self.count = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished = threading.Event()
        self.closed = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        self.count = 0
        return np.array([0], np.int64), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.count += 1
        if action == 1:
            self.entered.set()
            self.release.wait(30)  # bounded: a broken test never hangs the server forever
            self.finished.set()
        return np.array([self.count], np.int64), 0.0, False, False, {}

    def close(self) -> None:
        self.closed += 1


class RenderEnv:
    """``render()`` returns whatever :attr:`frame` holds (``None`` = no frame)."""

    render_mode = "rgb_array"
    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}

    def __init__(self, frame: Any = None) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.frame = frame

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return np.zeros(1, np.float32), 0.0, False, False, {}

    def render(self) -> Any:
        return self.frame

    def close(self) -> None:
        pass


FUZZ_SPACE = rs.Dict(
    {
        "img": rs.Box(0, 255, (8, 8, 3), "uint8"),
        "v": rs.Box(-1.0, 1.0, (4,)),
        "d": rs.Discrete(5, start=-2),
        "t": rs.Text(8, min_length=0),
    }
)


def make_fuzz_env() -> EchoEnv:
    """``integration_envs:make_fuzz_env``: an echo env over a Dict with every leaf flavour."""
    return EchoEnv(FUZZ_SPACE, record=False)


def make_countdown(length: int = 3) -> CountdownEnv:
    """``integration_envs:make_countdown``."""
    return CountdownEnv(length)


class BigObsEnv(gym.Env):  # type: ignore[type-arg]
    """A 1.2 MB uint8 observation (bigger than a shared-memory ring); obs[5, 5] is t, obs[0, 0] the action."""

    metadata = {"render_modes": []}

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (1200, 1000), np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.full((1200, 1000), 7, np.uint8), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        obs = np.full((1200, 1000), self.t % 256, np.uint8)
        obs[0, :4] = action
        return obs, 1.0, False, False, {}


def make_big_obs() -> BigObsEnv:
    """``integration_envs:make_big_obs``."""
    return BigObsEnv()


class _SleepyEnv(CountdownEnv):
    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if action == 1:
            threading.Event().wait(60)  # "hangs" until the test kills the process
        return super().step(action)


def make_sleepy() -> CountdownEnv:
    """``integration_envs:make_sleepy``: ``step(1)`` hangs for a minute."""
    return _SleepyEnv(100)


class _MarkerEnv(CountdownEnv):
    def __init__(self, path: str) -> None:
        super().__init__(5)
        self.path = path

    def close(self) -> None:
        super().close()
        with open(self.path, "a") as f:
            f.write("closed\n")


def make_marker(path: str) -> CountdownEnv:
    """``integration_envs:make_marker``: appends ``closed`` to ``path`` on every ``close()``."""
    return _MarkerEnv(path)
