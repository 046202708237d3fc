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
from rlmesh.errors import EnvironmentException, InvalidAction
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
        return (
            np.array([self.left], dtype=np.float32),
            1.0 + int(action),
            done,
            False,
            self._info(info),
        )


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

    def __init__(
        self, n: int = 2, length: int = 3, *, metadata: Any = None, bad_autoreset: bool = False
    ) -> None:
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

    def step(
        self, action: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
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
    "vector-next-step-seeded": Case(
        lambda: sync_vector(AutoresetMode.NEXT_STEP), {"seeds": [7, 8]}
    ),
    "vector-same-step": Case(lambda: sync_vector(AutoresetMode.SAME_STEP), {"max_episodes": 5}),
    "vector-disabled": Case(
        lambda: sync_vector(AutoresetMode.DISABLED), {"seeds": [1, 2, 3, 4, 5]}
    ),
    "vector-one-lane": Case(
        lambda: sync_vector(AutoresetMode.NEXT_STEP, lanes=1), {"seeds": [1, 2, 3]}
    ),
    "duck-vector-one-lane": Case(lambda: DuckVector(n=1), {"max_episodes": 3}),
    "vector-read-only-info": Case(
        lambda: sync_vector(AutoresetMode.SAME_STEP, True), {"max_episodes": 4}
    ),
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
        (e.index, e.seed, e.steps, e.reward, e.terminated, e.truncated, e.success)
        for e in result.episodes
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
def test_each_env_drives_the_same_in_process_and_served(
    name: str, serve: Callable[..., Any]
) -> None:
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


@pytest.mark.parametrize(
    "mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP], ids=["next-step", "same-step"]
)
def test_more_seeds_than_lanes_on_an_autoresetting_gymnasium_vector_env(
    mode: AutoresetMode, serve: Callable[..., Any]
) -> None:
    """AR-10: a Gymnasium VectorEnv resets chosen lanes (``reset_mask``) in every autoreset mode, served too.

    So five seeds over two NEXT_STEP/SAME_STEP lanes run five seeded episodes both ways
    (in-process with ``reset_mask``, served with ``env_indices``).
    """
    case = Case(lambda: sync_vector(mode), {"seeds": [1, 2, 3, 4, 5]})
    local = run_in_process(case)
    assert outcome(local) == outcome(run_served(case, serve))
    by_index = sorted(local.episodes, key=lambda e: e.index)
    assert [(e.seed, e.steps, e.terminated) for e in by_index] == [
        (s, 3 + s % 3, True) for s in [1, 2, 3, 4, 5]
    ]


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


# -- the checks, under each validation policy (SRV-60, CNF-2..4, INFO-4) -----------------------

WARNING_KEY = "rlmesh.conformance.warning"
POLICIES = ["strict", "warn", "off"]
GOOD_OBS = np.array([5.0], dtype=np.float32)


class Probe(gym.Env[np.ndarray, np.ndarray]):
    """Three-step episodes whose observation, reward, flags or info can be made to break a check."""

    metadata: dict[str, Any] = {}
    observation_space = OBS
    action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def __init__(
        self, obs: Any = None, reward: Any = 1.0, terminated: Any = None, step_obs: Any = None
    ) -> None:
        self.obs = GOOD_OBS if obs is None else obs
        self.step_obs = self.obs if step_obs is None else step_obs
        self.reward = reward
        self.terminated = terminated
        self.t = 0
        self.seen_dtypes: list[str] = []

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.t = 0
        return self.obs, {}

    def step(self, action: Any) -> tuple[Any, Any, Any, bool, dict[str, Any]]:
        self.t += 1
        done = self.t >= 3 if self.terminated is None else self.terminated
        return self.step_obs, self.reward, done, False, {}


class DuckLanes(DuckVector):
    """A duck-typed vector env whose observations or rewards break a check."""

    def __init__(self, *, obs_high: float | None = None, rewards: int | None = None) -> None:
        super().__init__(n=2, length=3)
        self.obs_high, self.rewards = obs_high, rewards

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        if self.obs_high is not None:
            obs[1, 0] = self.obs_high
        return obs, info

    def step(self, action: Any) -> Any:
        obs, reward, term, trunc, info = super().step(action)
        if self.rewards is not None:
            reward = np.ones(self.rewards)
        return obs, reward, term, trunc, info


class Act(NumpyModel):
    """Always the same action (one lane), or a batch of it."""

    def __init__(self, action: Any) -> None:
        super().__init__()
        self.action = action

    def predict(self, obs: Any) -> Any:
        return self.action

    def predict_batch(self, obs: Any) -> Any:
        return np.stack([np.asarray(self.action)] * len(obs))


class DtypeSpy(Act):
    """Records the dtype of every observation it is given."""

    def __init__(self) -> None:
        super().__init__(OK_ACTION)
        self.seen: list[str] = []

    def predict(self, obs: Any) -> Any:
        self.seen.append(np.asarray(obs).dtype.name)
        return self.action


@dataclass
class Check:
    env: Callable[[], Any]
    action: Any  # the model's action
    strict: type[BaseException] | None  # the error both ways under "strict" (None: runs)
    warn: type[BaseException] | None  # ... under "warn"
    structural: bool = False  # under "off" the served endpoint still refuses it; in-process runs
    step_warns: bool = False  # under "warn" a conformance warning rides in a step's info


OK_ACTION = np.array([0.5], dtype=np.float32)
CHECKS: dict[str, Check] = {
    "obs-out-of-range": Check(
        lambda: Probe(np.array([150.0], np.float32)), OK_ACTION, EnvironmentException, None
    ),  # warns at reset
    "obs-out-of-range-on-step": Check(
        lambda: Probe(step_obs=np.array([-1.0], np.float32)),
        OK_ACTION,
        EnvironmentException,
        None,
        step_warns=True,
    ),
    "obs-wrong-shape": Check(
        lambda: Probe(np.zeros(2, np.float32)),
        OK_ACTION,
        EnvironmentException,
        EnvironmentException,
        True,
    ),
    "obs-nan": Check(
        lambda: Probe(np.array([np.nan], np.float32)),
        OK_ACTION,
        EnvironmentException,
        EnvironmentException,
        True,
    ),
    "obs-not-an-array": Check(
        lambda: Probe("five"), OK_ACTION, EnvironmentException, EnvironmentException, True
    ),
    "obs-float64-is-coerced": Check(lambda: Probe(np.array([5.0])), OK_ACTION, None, None),
    "reward-not-a-number": Check(
        lambda: Probe(reward="one"), OK_ACTION, EnvironmentException, EnvironmentException
    ),
    "reward-none": Check(
        lambda: Probe(reward=None), OK_ACTION, EnvironmentException, EnvironmentException
    ),
    "reward-two-values": Check(
        lambda: Probe(reward=np.ones(2)), OK_ACTION, EnvironmentException, EnvironmentException
    ),
    "terminated-two-flags": Check(
        lambda: Probe(terminated=np.array([True, False])),
        OK_ACTION,
        EnvironmentException,
        EnvironmentException,
    ),
    "action-out-of-range": Check(
        lambda: Probe(), np.array([2.0], np.float32), InvalidAction, None, step_warns=True
    ),
    "action-wrong-shape": Check(
        lambda: Probe(), np.zeros(2, np.float32), ValueError, ValueError, True
    ),
    "action-scalar-for-a-box": Check(lambda: Probe(), 0.5, ValueError, ValueError, True),
    "action-nan": Check(
        lambda: Probe(), np.array([np.nan], np.float32), ValueError, ValueError, True
    ),
    "action-discrete-out-of-range": Check(lambda: Countdown(), 7, ValueError, ValueError, True),
    "vector-obs-out-of-range": Check(
        lambda: DuckLanes(obs_high=500.0), 1, EnvironmentException, None
    ),  # at reset
    "vector-rewards-wrong-length": Check(
        lambda: DuckLanes(rewards=3), 1, EnvironmentException, EnvironmentException
    ),
}


class Warnings(rlmesh.RunHooks):
    """Collects the conformance warnings each step's info carries (INFO-4)."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def on_step(self, event: Any) -> None:
        if WARNING_KEY in event.info:
            self.seen.append(event.info[WARNING_KEY])


def run_check(check: Check, target: Any) -> tuple[Any, list[Any]]:
    hooks = Warnings()
    result = rlmesh.run(Act(check.action), target, max_episodes=2, hooks=hooks)
    return outcome(result), hooks.seen


def error_of(fn: Callable[[], Any]) -> BaseException | None:
    try:
        fn()
    except Exception as exc:
        return exc
    return None


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_check_gives_the_same_outcome_in_process_and_served(
    name: str, policy: str, serve: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SRV-60 / CNF-2..4 / INFO-4 (issue 10 item 1): one policy, the same error type and words, the same warnings.

    Under ``off`` an in-process run checks nothing, while a served endpoint still
    refuses what its wire cannot carry (a structural deviation): that one documented
    difference is asserted too.
    """
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", policy)
    check = CHECKS[name]
    env = check.env()
    local_box: list[Any] = []
    local_error = error_of(lambda: local_box.append(run_check(check, env)))
    server = serve(check.env())
    served_box: list[Any] = []
    served_error = error_of(lambda: served_box.append(run_check(check, server.address)))
    if policy == "off" and check.structural:
        assert local_error is None, local_error
        assert served_error is not None
        return
    expected = (
        check.strict if policy == "strict" else check.warn
    )  # "off": range deviations go unchecked
    if expected is None:
        assert local_error is None, local_error
        assert served_error is None, served_error
        assert local_box[0][0] == served_box[0][0]  # the same RunResult
        warnings = local_box[0][1]
        assert warnings == served_box[0][1]
        assert bool(warnings) == (policy == "warn" and check.step_warns)
        return
    assert isinstance(local_error, expected), local_error
    assert type(local_error) is type(served_error)
    assert str(local_error) == str(served_error)
    if isinstance(local_error, EnvironmentException):
        assert served_error is not None
        assert (local_error.code, local_error.recoverable) == (
            served_error.code,  # type: ignore[attr-defined]
            served_error.recoverable,  # type: ignore[attr-defined]
        )


@pytest.mark.parametrize("policy", POLICIES)
def test_manual_sessions_see_the_same_warnings_in_reset_and_step_info(
    policy: str, serve: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """INFO-4: a reset observation and an action out of range warn once per (kind, path) per session, both ways."""
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", "warn" if policy == "strict" else policy)
    seen = []
    for target in (
        Probe(np.array([150.0], np.float32)),
        serve(Probe(np.array([150.0], np.float32))).address,
    ):
        with rlmesh.session(Act(np.array([2.0], np.float32)), target) as sess:
            _, info = sess.reset(seed=1)
            infos = [info] + [sess.step(np.array([2.0], np.float32))[4] for _ in range(2)]
            seen.append([i.get(WARNING_KEY) for i in infos])
    assert seen[0] == seen[1]
    if policy == "off":
        assert seen[0] == [None, None, None]
    else:
        assert seen[0] == [
            [
                {
                    "kind": "observation",
                    "path": "$",
                    "detail": "Box value at element 0 out of bounds: above high bound",
                }
            ],
            [
                {
                    "kind": "action",
                    "path": "$",
                    "detail": "Box value at element 0 out of bounds: above high bound",
                }
            ],
            None,
        ]


def test_a_model_sees_the_observation_in_the_space_dtype_both_ways(
    serve: Callable[..., Any],
) -> None:
    """SRV-61: a float64 observation from a float32 Box reaches the model as float32, in-process as served."""
    dtypes: list[list[str]] = []
    for target in (Probe(np.array([5.0])), serve(Probe(np.array([5.0]))).address):
        model = DtypeSpy()
        rlmesh.run(model, target, max_episodes=1)
        dtypes.append(model.seen)
    assert dtypes[0] == dtypes[1] == ["float32"] * 3
