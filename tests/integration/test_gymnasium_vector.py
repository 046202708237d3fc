"""rlmesh.gymnasium.RemoteVectorEnv on lanes and sync endpoints (issue 12)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import rlmesh
import rlmesh.gymnasium as rg
import rlmesh.numpy as rnp

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


def lanes(n: int = 4, **kw):
    return rlmesh.serve.Lanes([gym.make("CartPole-v1") for _ in range(n)], **kw)


def test_a_lane_endpoint_is_a_gymnasium_vector_env_with_batched_spaces(serve):
    server = serve(lanes())
    with rg.RemoteVectorEnv(server.address) as envs:
        assert isinstance(envs, gym.vector.VectorEnv) and envs.num_envs == 4
        assert isinstance(envs.single_action_space, gym.spaces.Discrete)
        assert envs.action_space == gym.spaces.MultiDiscrete([2] * 4)
        assert envs.observation_space.shape == (4, 4)
        assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        obs, info = envs.reset(seed=0)
        assert obs.shape == (4, 4) and info == {}
        obs, rew, term, trunc, info = envs.step(envs.action_space.sample())
        assert rew.dtype == np.float64 and term.dtype == bool and info == {}


def test_lanes_keep_earning_reward_after_their_episodes_end(serve):
    server = serve(lanes(3))
    with rg.RemoteVectorEnv(server.address, episode_info=True) as envs:
        envs.reset(seed=1)
        total = np.zeros(3)
        ends = np.zeros(3, int)
        completed = 0
        for _ in range(200):  # always push left: every CartPole episode ends within ~12 steps
            _, rew, term, trunc, info = envs.step(np.zeros(3, int))
            total += rew
            ends += term | trunc
            completed += info["completed_episodes"]
        assert (ends >= 5).all()  # every lane finished several episodes
        assert (total > 150).all()  # and kept earning: only the autoreset steps pay 0
        assert completed == ends.sum()  # each episode counted once


def test_lanes_reproduce_a_local_sync_vector_env_step_for_step(serve):
    server = serve(lanes(3))
    local = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    with rg.RemoteVectorEnv(server.address) as remote:
        o1, _ = remote.reset(seed=7)
        o2, _ = local.reset(seed=7)
        rng = np.random.default_rng(1)
        for _ in range(120):
            assert np.array_equal(o1, o2)
            a = rng.integers(0, 2, 3)
            o1, r1, t1, u1, _ = remote.step(a)
            o2, r2, t2, u2, _ = local.step(a)
            assert np.array_equal(r1, r2) and np.array_equal(t1, t2) and np.array_equal(u1, u2)


@pytest.mark.parametrize("endpoint", ["lanes", "sync"])
def test_the_vector_wrappers_stack_on_lanes_and_sync_endpoints(serve, endpoint):
    env = (
        lanes(2)
        if endpoint == "lanes"
        else gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    )
    server = serve(env)
    envs = rg.RemoteVectorEnv(server.address)
    wrapped = gym.wrappers.vector.NormalizeReward(
        gym.wrappers.vector.NormalizeObservation(
            gym.wrappers.vector.RecordEpisodeStatistics(
                gym.wrappers.vector.FlattenObservation(envs)
            )
        )
    )
    wrapped.reset(seed=0)
    episodes = 0
    for _ in range(100):
        _, _, _, _, info = wrapped.step(wrapped.action_space.sample())
        if "episode" in info:
            episodes += int(info["_episode"].sum())
            assert info["episode"]["l"][info["_episode"]].min() > 0
    assert episodes >= 2
    wrapped.close()
    assert envs.client.closed


def test_same_step_lanes_follow_gymnasiums_final_obs_convention(serve):
    server = serve(lanes(2, autoreset="same-step"))
    with rg.RemoteVectorEnv(server.address) as envs:
        assert envs.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
        envs.reset(seed=0)
        for _ in range(100):
            obs, _, term, trunc, info = envs.step(np.zeros(2, int))
            if (term | trunc).any():
                break
        done = term | trunc
        assert info["_final_obs"].tolist() == done.tolist()
        i = int(done.nonzero()[0][0])
        assert (
            info["final_obs"][i].shape == (4,) and abs(float(obs[i][0])) < 0.06
        )  # a fresh episode


def test_reset_mask_resets_only_the_masked_lanes_of_a_disabled_endpoint(serve):
    server = serve(lanes(2, autoreset="disabled"))
    with rg.RemoteVectorEnv(server.address) as envs:
        assert envs.metadata["autoreset_mode"] is AutoresetMode.DISABLED
        obs0, _ = envs.reset(seed=0)
        obs1, _, _, _, _ = envs.step(np.zeros(2, int))
        obs2, _ = envs.reset(seed=5, options={"reset_mask": np.array([True, False])})
        assert np.array_equal(obs2[1], obs1[1]) and not np.array_equal(obs2[0], obs1[0])


def test_gymnasium_make_vec_uses_the_vector_entry_point(serve):
    server = serve(lanes(2))
    envs = gym.make_vec(
        rg.REMOTE_ID, num_envs=2, vectorization_mode="vector_entry_point", address=server.address
    )
    assert isinstance(envs.unwrapped, rg.RemoteVectorEnv) and envs.num_envs == 2
    envs.close()


def test_the_cli_serves_next_step_lanes_by_default_and_disabled_on_request(serve_process):
    _, address = serve_process("CartPole-v1", "--num-envs", "2", "--autoreset", "disabled")
    with rnp.RemoteVectorEnv(address) as envs:
        assert envs.autoreset_mode == "Disabled"
        assert envs.metadata["autoreset_mode"] is AutoresetMode.DISABLED


def test_a_vector_endpoint_renders_one_frame_per_lane(serve):
    from gym_envs import DictRenderEnv

    server = serve([DictRenderEnv(), DictRenderEnv()])
    with rg.RemoteVectorEnv(server.address) as envs:
        assert envs.render_mode == "rgb_array"
        assert isinstance(envs.single_observation_space, gym.spaces.Dict)
        obs, _ = envs.reset(seed=0)
        assert obs["pos"].shape == (2, 2) and envs.observation_space.contains(obs)
        frames = envs.render()
        assert len(frames) == 2 and all(f.shape == (8, 8, 3) for f in frames)
        obs, _, _, _, info = envs.step(envs.action_space.sample())
        assert info["t"].tolist() == [1, 1] and info["_t"].tolist() == [
            True,
            True,
        ]  # Gymnasium's layout


def test_a_same_step_sync_endpoint_gives_the_local_vector_envs_info_layout(serve):
    kwargs = {
        "num_envs": 2,
        "vectorization_mode": "sync",
        "vector_kwargs": {"autoreset_mode": AutoresetMode.SAME_STEP},
    }
    server = serve(gym.make_vec("CartPole-v1", **kwargs))
    local = gym.make_vec("CartPole-v1", **kwargs)
    with rg.RemoteVectorEnv(server.address) as envs:
        envs.reset(seed=0)
        local.reset(seed=0)
        for _ in range(100):
            obs, _, term, trunc, info = envs.step(np.zeros(2, int))
            lobs, _, _, _, linfo = local.step(np.zeros(2, int))
            assert np.array_equal(obs, lobs)
            if (term | trunc).any():
                break
        assert (
            sorted(info)
            == sorted(linfo)
            == ["_final_info", "_final_obs", "final_info", "final_obs"]
        )
        assert info["_final_obs"].tolist() == linfo["_final_obs"].tolist()
        for mine, theirs in zip(info["final_obs"], linfo["final_obs"]):
            assert (mine is None and theirs is None) or (
                np.array_equal(mine, theirs) and mine.dtype == theirs.dtype
            )
