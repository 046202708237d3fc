"""One env view: every env in a catalogue drives the same in-process and served (issue 10).

DESIGN "one drive loop": the same env object gives the same ``RunResult`` (episodes,
seeds, lengths, returns, flags, success) -- or the same error type -- whether
``rlmesh.run`` drives it in-process or through an ``EnvServer`` on loopback. The
catalogue covers scalar Gymnasium envs, Gymnasium vector envs (``SyncVectorEnv``
with each autoreset mode, AR-1), duck-typed vector envs (``num_envs`` plus batched
reset/step, SRV-3), vector envs declaring an unknown autoreset mode (AR-1), vector
envs breaking their NextStep contract (AR-6) and envs whose ``info`` is a read-only
``types.MappingProxyType`` or stepping with the legacy 4-tuple (ENVCALL-2/3).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import rlmesh
from rlmesh.errors import EnvironmentException
from rlmesh.models import NumpyModel

pytestmark = pytest.mark.filterwarnings("ignore::rlmesh.WorkflowEditionWarning")

OBS = gym.spaces.Box(0.0, 100.0, shape=(1,), dtype=np.float32)
ACT = gym.spaces.Discrete(2)


class Countdown(gym.Env[np.ndarray, int]):
    """Episodes of ``3 + seed % 3`` steps (3 unseeded); reward ``1 + action``; success on the last step."""

    metadata: dict[str, Any] = {}
    observation_space = OBS
    action_space = ACT

    def __init__(self, read_only_info: bool = False) -> None:
        self.left = 0
        self.read_only_info = read_only_info

    def _info(self, info: dict[str, Any]) -> Any:
        return types.MappingProxyType(info) if self.read_only_info else info

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, Any]:
        super().reset(seed=seed)
        self.left = 3 + (seed % 3 if seed is not None else 0)
        return np.array([self.left], dtype=np.float32), self._info({"start": self.left})

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, Any]:
        self.left -= 1
        done = self.left <= 0
        info = {"is_success": True} if done else {}
        return np.array([self.left], dtype=np.float32), 1.0 + int(action), done, False, self._info(info)


class LegacyCountdown(Countdown):
    """Old Gym API: ``step`` returns ``(obs, reward, done, info)`` (ENVCALL-3)."""

    def step(self, action: Any) -> Any:  # type: ignore[override]
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or truncated, info


class DuckVector:
    """A vector env by duck typing only: ``num_envs`` + batched reset/step, per-lane spaces.

    Every lane counts down ``length`` steps and autoresets NEXT_STEP (reward 0, not
    done, on the step after it ends) unless ``metadata`` says otherwise.
    ``bad_autoreset`` pays reward 1 on the autoreset step (breaks AR-6).
    """

    observation_space = OBS
    action_space = ACT

    def __init__(self, n: int = 2, length: int = 3, *, metadata: Any = None, bad_autoreset: bool = False) -> None:
        self.num_envs = n
        self.length = length
        self.metadata = {} if metadata is None else metadata
        self.bad = bad_autoreset
        self.left = np.zeros(n, dtype=np.int64)
        self.pending = np.zeros(n, dtype=bool)

    def _obs(self) -> np.ndarray:
        return self.left.astype(np.float32).reshape(self.num_envs, 1)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        self.left[:] = self.length
        self.pending[:] = False
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        n = self.num_envs
        reward = np.zeros(n)
        term = np.zeros(n, dtype=bool)
        for i in range(n):
            if self.pending[i]:  # the autoreset step
                self.left[i] = self.length
                self.pending[i] = False
                reward[i] = 1.0 if self.bad else 0.0
                continue
            self.left[i] -= 1
            reward[i] = 1.0 + int(np.asarray(action)[i])
            if self.left[i] <= 0:
                term[i] = True
                self.pending[i] = True
        info = {"is_success": term.copy(), "_is_success": term.copy()}
        return self._obs(), reward, term, np.zeros(n, dtype=bool), info

    def close(self) -> None:
        pass


def sync_vector(mode: AutoresetMode, read_only: bool = False, lanes: int = 2) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: Countdown(read_only) for _ in range(lanes)], autoreset_mode=mode)


class Ones(NumpyModel):
    """Always action 1, one lane or a batch."""

    def predict(self, obs: Any) -> Any:
        return 1

    def predict_batch(self, obs: Any) -> Any:
        return np.ones(len(obs), dtype=np.int64)


@dataclass
class Case:
    make: Callable[[], Any]
    runs: dict[str, Any] = field(default_factory=dict)  # rlmesh.run keywords
    error: type[BaseException] | None = None  # both ways raise this (None: both succeed)


CATALOGUE: dict[str, Case] = {
    "scalar-cartpole": Case(lambda: gym.make("CartPole-v1"), {"seeds": [1, 2, 3]}),
    "scalar-countdown": Case(lambda: Countdown(), {"seeds": [4, 5, 6]}),
    "scalar-read-only-info": Case(lambda: Countdown(read_only_info=True), {"seeds": [4, 5]}),
    "scalar-legacy-4-tuple": Case(lambda: LegacyCountdown(), {"seeds": [4, 5]}),
    "vector-next-step": Case(lambda: sync_vector(AutoresetMode.NEXT_STEP), {"max_episodes": 5}),
    "vector-next-step-seeded": Case(lambda: sync_vector(AutoresetMode.NEXT_STEP), {"seeds": [7, 8]}),
    "vector-same-step": Case(lambda: sync_vector(AutoresetMode.SAME_STEP), {"max_episodes": 5}),
    "vector-disabled": Case(lambda: sync_vector(AutoresetMode.DISABLED), {"seeds": [1, 2, 3, 4, 5]}),
    "vector-one-lane": Case(lambda: sync_vector(AutoresetMode.NEXT_STEP, lanes=1), {"seeds": [1, 2, 3]}),
    "duck-vector-one-lane": Case(lambda: DuckVector(n=1), {"max_episodes": 3}),
    "vector-read-only-info": Case(lambda: sync_vector(AutoresetMode.SAME_STEP, True), {"max_episodes": 4}),
    "duck-vector": Case(lambda: DuckVector(), {"max_episodes": 5}),
    "duck-vector-next-step-declared": Case(
        lambda: DuckVector(metadata={"autoreset_mode": "NextStep"}, length=2), {"max_episodes": 4}
    ),
    "duck-vector-unknown-autoreset": Case(
        lambda: DuckVector(metadata={"autoreset_mode": "Weird"}), {"max_episodes": 2}, ValueError
    ),
    "gym-vector-unknown-autoreset": Case(
        lambda: _with_metadata(sync_vector(AutoresetMode.NEXT_STEP), {"autoreset_mode": "Weird"}),
        {"max_episodes": 2},
        ValueError,
    ),
    "duck-vector-breaks-next-step": Case(
        lambda: DuckVector(bad_autoreset=True), {"max_episodes": 5}, EnvironmentException
    ),
}


def _with_metadata(env: Any, metadata: dict[str, Any]) -> Any:
    env.metadata = metadata
    return env


def outcome(result: Any) -> list[tuple[Any, ...]]:
    return [
        (e.index, e.seed, e.steps, e.reward, e.terminated, e.truncated, e.success) for e in result.episodes
    ]


def run_in_process(case: Case) -> Any:
    env = case.make()
    try:
        return rlmesh.run(Ones(), env, **case.runs)
    finally:
        env.close()


def run_served(case: Case, serve: Callable[..., Any]) -> Any:
    server = serve(case.make())  # the server owns (and closes) the env
    return rlmesh.run(Ones(), server.address, **case.runs)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_each_env_drives_the_same_in_process_and_served(name: str, serve: Callable[..., Any]) -> None:
    """Issue 10 "Done when" #1 (SRV-3, AR-1, AR-6, AR-7, ENVCALL-2/3): same RunResult or same error type."""
    case = CATALOGUE[name]
    if case.error is not None:
        with pytest.raises(case.error) as local_exc:
            run_in_process(case)
        with pytest.raises(case.error) as served_exc:
            run_served(case, serve)
        assert type(local_exc.value) is type(served_exc.value)
        if isinstance(local_exc.value, EnvironmentException):
            assert local_exc.value.code == served_exc.value.code  # type: ignore[attr-defined]
            assert local_exc.value.message == served_exc.value.message  # type: ignore[attr-defined]
        return
    local = run_in_process(case)
    served = run_served(case, serve)
    assert outcome(local) == outcome(served)
    expected = case.runs.get("max_episodes") or len(case.runs["seeds"])
    assert local.num_episodes == expected


def test_a_read_only_info_reaches_success_both_ways(serve: Callable[..., Any]) -> None:
    """ENVCALL-2/3: a ``MappingProxyType`` info is an info (its ``is_success`` scores the episode)."""
    case = CATALOGUE["scalar-read-only-info"]
    for result in (run_in_process(case), run_served(case, serve)):
        assert [e.success for e in result.episodes] == [True, True]
        assert [e.steps for e in result.episodes] == [4, 5]


def test_an_unknown_autoreset_mode_is_refused_with_the_same_message_both_ways() -> None:
    """AR-1: ``metadata["autoreset_mode"] = "Weird"`` is refused in-process as a server refuses it."""
    with pytest.raises(ValueError, match="Weird") as local:
        rlmesh.run(Ones(), DuckVector(metadata={"autoreset_mode": "Weird"}), max_episodes=1)
    with pytest.raises(ValueError, match="Weird") as served:
        rlmesh.EnvServer(DuckVector(metadata={"autoreset_mode": "Weird"}), "127.0.0.1:0")
    assert str(local.value) == str(served.value)


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=["next-step", "same-step"])
def test_more_seeds_than_lanes_on_an_autoresetting_gymnasium_vector_env(mode: AutoresetMode, serve: Callable[..., Any]) -> None:
    """AR-10: a Gymnasium VectorEnv resets chosen lanes (``reset_mask``) in every autoreset mode, served too.

    So five seeds over two NEXT_STEP/SAME_STEP lanes run five seeded episodes both ways
    (in-process with ``reset_mask``, served with ``env_indices``).
    """
    case = Case(lambda: sync_vector(mode), {"seeds": [1, 2, 3, 4, 5]})
    local = run_in_process(case)
    assert outcome(local) == outcome(run_served(case, serve))
    by_index = sorted(local.episodes, key=lambda e: e.index)
    assert [(e.seed, e.steps, e.terminated) for e in by_index] == [(s, 3 + s % 3, True) for s in [1, 2, 3, 4, 5]]


def test_more_seeds_than_lanes_on_a_duck_typed_next_step_vector_env_is_refused_the_same_way(
    serve: Callable[..., Any],
) -> None:
    """AR-10: a duck-typed NEXT_STEP vector env cannot reset single lanes; both ways refuse alike."""
    case = Case(lambda: DuckVector(), {"seeds": [1, 2, 3]})
    with pytest.raises(ValueError, match="3 seeds for a NextStep autoreset env") as local:
        run_in_process(case)
    with pytest.raises(ValueError, match="3 seeds for a NextStep autoreset env") as served:
        run_served(case, serve)
    assert str(local.value) == str(served.value)
