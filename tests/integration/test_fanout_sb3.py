"""``rlmesh.sb3.RemoteVecEnv``: many endpoints as one Stable-Baselines3 VecEnv (issue 26, item 3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
from conftest import child_env, require

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::UserWarning")]


def test_RemoteVecEnv_follows_sb3s_same_step_conventions(serve):
    require("stable_baselines3")
    from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

    from rlmesh.sb3 import RemoteVecEnv

    addresses = [serve(gym.make("CartPole-v1")).address for _ in range(2)]
    lanes = rlmesh.serve.Lanes([gym.make("CartPole-v1") for _ in range(2)], autoreset="same-step")
    addresses.append(serve(lanes).address)
    env = RemoteVecEnv(addresses)
    local = DummyVecEnv([lambda: gym.make("CartPole-v1") for _ in range(4)])
    assert isinstance(env, VecEnv) and env.num_envs == 4
    assert (
        env.observation_space == local.observation_space and env.action_space == local.action_space
    )
    env.seed(21)
    local.seed(21)
    assert np.array_equal(env.reset(), local.reset())
    rng = np.random.default_rng(0)
    dones_seen = 0
    for _ in range(200):
        a = rng.integers(0, 2, 4)
        env.step_async(a)
        obs, rew, dones, infos = env.step_wait()
        lobs, lrew, ldones, linfos = local.step(a)
        assert np.array_equal(obs, lobs) and np.array_equal(dones, ldones)
        assert rew.dtype == lrew.dtype and np.array_equal(rew, lrew)
        for mine, theirs in zip(infos, linfos):
            assert mine.keys() == theirs.keys() - {"episode"}
            if "terminal_observation" in theirs:
                dones_seen += 1
                assert np.array_equal(mine["terminal_observation"], theirs["terminal_observation"])
                assert mine["TimeLimit.truncated"] == theirs["TimeLimit.truncated"]
    assert dones_seen >= 8
    assert (
        env.get_attr("render_mode") == [None] * 4 and env.env_is_wrapped(gym.Wrapper) == [False] * 4
    )
    env.close()


def test_RemoteVecEnv_refuses_a_next_step_vector_endpoint(serve):
    require("stable_baselines3")
    from rlmesh.sb3 import RemoteVecEnv

    address = serve(rlmesh.serve.Lanes([gym.make("CartPole-v1") for _ in range(2)])).address
    with pytest.raises(ValueError, match="same-step"):
        RemoteVecEnv([address])
    disabled = serve(
        rlmesh.serve.Lanes([gym.make("CartPole-v1") for _ in range(2)], autoreset="disabled")
    ).address
    env = RemoteVecEnv([disabled])  # DISABLED lanes are reset here
    env.reset()
    ended = 0
    for _ in range(100):
        env.step_async(np.zeros(2, int))
        obs, _, dones, infos = env.step_wait()
        for i in dones.nonzero()[0]:
            ended += 1
            assert abs(float(obs[i][0])) < 0.06 and infos[i]["terminal_observation"].shape == (4,)
    assert ended >= 10
    env.close()


@pytest.mark.slow
def test_PPO_learns_CartPole_on_four_endpoints(serve_process):
    require("stable_baselines3")
    require("torch")
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecMonitor

    from rlmesh.sb3 import RemoteVecEnv

    addresses = [serve_process("CartPole-v1")[1] for _ in range(4)]
    env = VecMonitor(RemoteVecEnv(addresses))
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=256,
        batch_size=256,
        n_epochs=10,
        learning_rate=1e-3,
        gamma=0.98,
        gae_lambda=0.8,
        seed=1,
        device="cpu",
        verbose=0,
    )
    model.learn(total_timesteps=25_000)
    env.close()
    mean, _ = evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=10)
    assert mean >= 150  # a random policy scores ~22; PPO on a local CartPole reaches 500 here


def test_the_many_endpoints_example_trains_briefly_and_cleans_up():
    require("stable_baselines3")
    require("torch")
    script = Path(__file__).resolve().parents[2] / "examples" / "train" / "sb3_many_endpoints.py"
    out = subprocess.run(
        [sys.executable, str(script), "--endpoints", "2", "--total-timesteps", "512"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "trained 512 steps on 2 endpoints" in out.stdout
