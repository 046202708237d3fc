"""Envs for the multi-session tests (issue 25), importable as ``sessions_envs:...`` by session workers."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import rlmesh

HANG, CRASH = 1, 2  # actions with a side effect; 0 is a plain step


class SessionEnv(gym.Env):  # type: ignore[type-arg]
    """A seeded random walk that says which process serves it.

    ``info["pid"]`` is the worker's pid. Action :data:`HANG` blocks the step until
    ``release`` exists (at most 60 s); :data:`CRASH` raises. ``close()`` appends one
    line to ``marker`` (when given), so a test can count closed envs.
    """

    metadata = {"render_modes": []}

    def __init__(self, marker: str = "", release: str = "") -> None:
        self.observation_space = gym.spaces.Box(-100.0, 100.0, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.marker = marker
        self.release = release
        self.state = np.zeros(3, np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.state = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self.state.copy(), {"pid": os.getpid()}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        a = int(action)
        if a == HANG:
            deadline = time.monotonic() + 60.0
            while not Path(self.release).exists() and time.monotonic() < deadline:
                threading.Event().wait(0.01)
        elif a == CRASH:
            raise RuntimeError("the simulator exploded (test crash)")
        self.state = (self.state + self.np_random.uniform(-0.1, 0.1, 3)).astype(np.float32)
        return self.state.copy(), 1.0, False, False, {"pid": os.getpid()}

    def close(self) -> None:
        if self.marker:
            with open(self.marker, "a") as f:
                f.write(f"closed {os.getpid()}\n")


def make_session_env(marker: str = "", release: str = "") -> SessionEnv:
    """``sessions_envs:make_session_env``."""
    return SessionEnv(marker, release)


def make_broken() -> SessionEnv:
    """``sessions_envs:make_broken``: an env whose build always fails."""
    raise RuntimeError("no simulator license on this host")


class SessionFactory(rlmesh.EnvFactory):
    """``sessions_envs:SessionFactory``: an EnvFactory making :class:`SessionEnv`."""

    def make(self, marker: str = "") -> SessionEnv:
        return SessionEnv(marker)


# -- hardening round 3: envs that close slowly, die while building, hang, or publish big contracts --


def _note(marker: str, what: str) -> None:
    if marker:
        with open(marker, "a") as f:
            f.write(f"{what} {os.getpid()}\n")


class SlowCloseEnv(SessionEnv):
    """A simulator whose ``close()`` takes until ``gate`` exists (at most 60 s).

    ``marker`` gets ``built PID`` when the env is made, ``closing PID`` when its close
    starts and ``closed PID`` when it ends, so a test can count the envs alive.
    """

    def __init__(self, marker: str = "", gate: str = "") -> None:
        super().__init__()
        self.slow_marker = marker
        self.gate = gate
        _note(marker, "built")

    def close(self) -> None:
        _note(self.slow_marker, "closing")
        deadline = time.monotonic() + 60.0
        while self.gate and not Path(self.gate).exists() and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        _note(self.slow_marker, "closed")


def make_slow_close_env(marker: str = "", gate: str = "") -> SlowCloseEnv:
    """``sessions_envs:make_slow_close_env``."""
    return SlowCloseEnv(marker, gate)


def make_segfaulting_env() -> SessionEnv:
    """``sessions_envs:make_segfaulting_env``: the simulator segfaults while it builds."""
    import resource
    import signal

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file
    os.kill(os.getpid(), signal.SIGSEGV)
    raise AssertionError("unreachable")  # pragma: no cover


class BigBoundsEnv(SessionEnv):
    """Observations in a Box of ``n`` elements with per-element bounds (a large contract)."""

    def __init__(self, n: int = 30_000) -> None:
        super().__init__()
        low = -np.arange(1, n + 1, dtype=np.float32)
        self.observation_space = gym.spaces.Box(low, -low, (n,), np.float32)
        self.n = n

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(self.n, np.float32), {"pid": os.getpid()}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return np.full(self.n, 0.5, np.float32), 1.0, False, False, {"pid": os.getpid()}


def make_big_bounds_env(n: int = 30_000) -> BigBoundsEnv:
    """``sessions_envs:make_big_bounds_env``."""
    return BigBoundsEnv(n)


class StuckEnv(SessionEnv):
    """``step()`` never returns on its own (until ``release`` exists, at most 600 s):
    a simulator hung inside a call. ``marker`` gets ``stepping PID`` when it starts."""

    def __init__(self, marker: str = "", release: str = "") -> None:
        super().__init__(marker, release)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        _note(self.marker, "stepping")
        deadline = time.monotonic() + 600.0
        while not Path(self.release).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return super().step(0)

    def close(self) -> None:
        pass


def make_stuck_env(marker: str = "", release: str = "") -> StuckEnv:
    """``sessions_envs:make_stuck_env``."""
    return StuckEnv(marker, release)


class DeclaresEnv(SessionEnv):
    """Observations in a MultiBinary of ``n`` elements (no bound arrays: cheap to build at any n)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.observation_space = gym.spaces.MultiBinary(n)


def make_declaring_env(n: int) -> DeclaresEnv:
    """``sessions_envs:make_declaring_env``."""
    return DeclaresEnv(n)
