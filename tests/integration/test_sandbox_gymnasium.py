"""``rlmesh.gymnasium.SandboxEnv`` / ``SandboxVectorEnv`` on the venv backend (issue 29 item 3).

A simulator whose dependency the host lacks (``sbxdemo``, see tests/sandbox_demo.py) is a
real Gymnasium env: ``check_env`` passes and Stable-Baselines3 trains on it with no glue.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import require
from rlmesh.sandbox import SandboxBuild, SandboxCrashed
from sandbox_demo import demo_wheel

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::rlmesh.WorkflowEditionWarning")]

gym = require("gymnasium")
rg = pytest.importorskip("rlmesh.gymnasium")


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxBuild]:
    root = tmp_path_factory.mktemp("sbx-gym-cache")
    old = {k: os.environ.get(k) for k in ("RLMESH_SANDBOX_CACHE", "RLMESH_SANDBOX_PROGRESS")}
    os.environ["RLMESH_SANDBOX_CACHE"] = str(root)
    os.environ["RLMESH_SANDBOX_PROGRESS"] = "0"
    yield SandboxBuild(packages=[str(demo_wheel(root))], imports=["sbxdemo"])
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _stopped(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_sandboxed_env_is_a_gymnasium_env_that_passes_check_env(build: SandboxBuild) -> None:
    from gymnasium.utils.env_checker import check_env

    env = rg.SandboxEnv(
        "gym://SbxDemo-v0", backend="venv", build=build, level=2, connect_timeout_seconds=120
    )
    try:
        assert isinstance(env, gym.Env)
        assert isinstance(env.observation_space, gym.spaces.Box) and isinstance(
            env.action_space, gym.spaces.Discrete
        )
        assert env.sandbox.backend == "venv" and env.sandbox.address.startswith("unix://")
        obs, info = env.reset(seed=0)
        assert isinstance(obs, np.ndarray) and obs.tolist() == pytest.approx(
            [7.31, 2.0]
        )  # level=2 reached make()
        assert info == {"sbxdemo": "7.3.1"}  # the env's own info only
        assert env.spec is not None and env.spec.entry_point == "rlmesh.gymnasium:SandboxEnv"
        assert env.spec.kwargs["source"] == "gym://SbxDemo-v0" and env.spec.kwargs["level"] == 2
        check_env(
            env
        )  # its close check starts (and stops) a second sandbox through env.spec.make()
        pid = env._handle.proc.pid
    finally:
        env.close()
    assert _stopped(pid)  # close() stopped the sandbox
    env.close()  # idempotent


def test_sb3_ppo_trains_on_a_sandboxed_env(build: SandboxBuild) -> None:
    require("stable_baselines3")
    from stable_baselines3 import PPO

    env = rg.SandboxEnv("gym://SbxDemo-v0", backend="venv", build=build)
    try:
        model = PPO(
            "MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu", verbose=0
        )
        model.learn(total_timesteps=256)
        assert model.num_timesteps >= 256
        obs, _ = env.reset(seed=1)
        action, _ = model.predict(obs, deterministic=True)
        assert env.action_space.contains(int(action))
    finally:
        env.close()


def test_a_sandboxed_vector_env_is_a_gymnasium_vector_env(build: SandboxBuild) -> None:
    env = rg.SandboxVectorEnv("gym://SbxDemo-v0", 3, backend="venv", build=build)
    try:
        assert isinstance(env, gym.vector.VectorEnv) and env.num_envs == 3
        assert env.observation_space.shape == (
            3,
            2,
        ) and env.single_action_space == gym.spaces.Discrete(2)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (3, 2)
        truncated = np.zeros(3, dtype=bool)
        for _ in range(5):
            obs, rewards, _, truncated, _ = env.step(np.array([0, 1, 1]))
        assert (
            rewards.tolist() == [0.0, 1.0, 1.0] and truncated.all()
        )  # the demo truncates after 5 steps
        env.step(np.array([0, 0, 0]))  # NEXT_STEP autoreset
        pid = env._handle.proc.pid
    finally:
        env.close()
    assert _stopped(pid)


def test_a_crashed_sandbox_is_reported_as_such(build: SandboxBuild) -> None:
    env = rg.SandboxEnv("gym://SbxDemo-v0", backend="venv", build=build)
    try:
        env.reset()
        os.kill(env._handle.proc.pid, signal.SIGKILL)
        with pytest.raises(SandboxCrashed, match="last log lines"):
            for _ in range(3):
                env.step(0)
    finally:
        env.close()


def test_sandbox_arguments_are_checked_before_anything_starts() -> None:
    with pytest.raises(TypeError, match="SandboxVectorEnv"):
        rg.SandboxEnv("gym://SbxDemo-v0", num_envs=2)
    with pytest.raises(ValueError, match="num_envs >= 2"):
        rg.SandboxVectorEnv("gym://SbxDemo-v0", 1)


def test_the_demo_package_is_not_on_the_host(tmp_path: Path) -> None:
    import importlib.util

    assert importlib.util.find_spec("sbxdemo") is None
