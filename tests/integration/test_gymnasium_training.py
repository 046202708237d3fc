"""The training examples run against served envs (issue 12 "Examples that train")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def run(*args: str) -> str:
    env = {
        k: v for k, v in os.environ.items() if k != "RLMESH_WORKFLOW_EDITION"
    }  # as a user runs it
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=380
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert (
        "WorkflowEditionWarning" not in out.stderr
    )  # serving Gymnasium's own CartPole: nothing to pin
    return out.stdout.strip().splitlines()[-1]


def test_the_cleanrl_style_ppo_learns_the_same_on_a_remote_and_a_local_vector_cartpole() -> None:
    require("torch")
    remote = run("examples/train/ppo_cartpole.py", "--total-timesteps", "1024")
    local = run("examples/train/ppo_cartpole.py", "--total-timesteps", "1024", "--local")
    assert "episodes, mean return" in remote
    assert remote.split(" (")[0] == local.split(" (")[0]  # same seed, same trajectory, same returns


def test_the_sb3_script_trains_ppo_on_a_remote_env() -> None:
    require("torch")
    require("stable_baselines3")
    line = run("examples/train/sb3_cartpole.py", "--total-timesteps", "256")
    assert line.startswith("trained 256 steps") and "mean return" in line


def test_sb3_subproc_vec_env_works_through_env_factories(serve) -> None:
    require("torch")
    vec_env = require("stable_baselines3.common.vec_env")
    import gymnasium as gym
    import numpy as np

    import rlmesh.gymnasium as rg

    addresses = [serve(gym.make("CartPole-v1")).address for _ in range(2)]
    envs = vec_env.SubprocVecEnv([lambda a=a: rg.RemoteEnv(a) for a in addresses])
    try:
        obs = envs.reset()
        assert obs.shape == (2, 4)
        ended = 0
        for _ in range(30):  # always push left: each CartPole episode ends within ~12 steps
            obs, rewards, dones, infos = envs.step(np.zeros(2, dtype=np.int64))
            ended += sum("terminal_observation" in i for i in infos)  # SB3 autoreset the remote env
        assert obs.shape == (2, 4) and rewards.shape == (2,)
        assert ended >= 2
    finally:
        envs.close()
    live = rg.RemoteEnv(addresses[0])
    try:
        with pytest.raises(TypeError, match="live connection cannot be pickled"):
            vec_env.SubprocVecEnv([lambda: live])
    finally:
        live.close()
