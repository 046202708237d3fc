"""rlmesh.gymnasium against served envs: check_env, wrappers, gymnasium.make, reproduction (issue 12)."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gym_envs import DictRenderEnv
from gymnasium.utils.env_checker import check_env

import rlmesh.gymnasium as rg

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::UserWarning")]


def test_check_env_passes_on_a_remote_cartpole(serve):
    server = serve(gym.make("CartPole-v1"))
    with rg.RemoteEnv(server.address) as env:
        assert isinstance(env, gym.Env) and env.unwrapped is env
        assert isinstance(env.observation_space, gym.spaces.Box) and isinstance(
            env.action_space, gym.spaces.Discrete
        )
        assert env.spec is not None and env.spec.id == "CartPole-v1"
        assert env.spec.max_episode_steps == 500  # the server knows gym.make's TimeLimit
        check_env(env)
        obs, info = env.reset(seed=3)
        assert info == {}  # only the env's own keys by default
        assert env.step(0)[4] == {}


def test_check_env_passes_on_a_remote_dict_env_with_rgb_array_rendering(serve):
    server = serve(DictRenderEnv())
    with rg.RemoteEnv(server.address) as env:
        assert isinstance(env.observation_space, gym.spaces.Dict)
        assert env.render_mode == "rgb_array" and env.metadata["render_modes"] == ["rgb_array"]
        check_env(env)
        env.reset(seed=1)
        frame = env.render()
        assert frame.shape == (8, 8, 3) and frame.dtype == np.uint8


def test_episode_info_adds_the_runtime_keys(serve):
    server = serve(DictRenderEnv())
    with rg.RemoteEnv(server.address, episode_info=True) as env:
        _, info = env.reset(seed=0)
        assert info["t"] == 0 and len(info["episode_ids"]) == 1
        _, _, _, _, info = env.step(env.action_space.sample())
        assert info["completed_episodes"] == 0 and info["t"] == 1


def test_the_standard_wrappers_stack_on_a_remote_env(serve):
    server = serve(DictRenderEnv())
    env = rg.RemoteEnv(server.address)
    wrapped = gym.wrappers.NormalizeObservation(
        gym.wrappers.FlattenObservation(
            gym.wrappers.RecordEpisodeStatistics(gym.wrappers.TimeLimit(env, 3))
        )
    )
    obs, _ = wrapped.reset(seed=0)
    assert obs.shape == (2 + 3 + 4,)
    for _ in range(3):
        obs, _, terminated, truncated, info = wrapped.step(wrapped.action_space.sample())
    assert (
        truncated and not terminated and info["episode"]["l"] == 3
    )  # TimeLimit cut the 5-step episode
    wrapped.close()
    assert env.client.closed


def test_gymnasium_make_builds_the_remote_env_with_the_usual_wrappers(serve):
    server = serve(gym.make("CartPole-v1"))
    env = gym.make(rg.REMOTE_ID, address=server.address, max_episode_steps=20)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env.reset(seed=0)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, info = env.step(
            0
        )  # always push left: ends well before 20 or at 20
        steps += 1
        done = terminated or truncated
    assert info["episode"]["l"] == steps <= 20
    assert isinstance(env.unwrapped, rg.RemoteEnv)
    env.close()


def test_a_remote_cartpole_reproduces_a_local_one_step_for_step(serve):
    server = serve(gym.make("CartPole-v1"))
    local = gym.make("CartPole-v1")
    with rg.RemoteEnv(server.address) as remote:
        o1, _ = remote.reset(seed=123)
        o2, _ = local.reset(seed=123)
        actions = np.random.default_rng(0).integers(0, 2, 300)
        for a in actions:
            assert np.array_equal(o1, o2)
            r1 = remote.step(int(a))
            r2 = local.step(int(a))
            o1, o2 = r1[0], r2[0]
            assert r1[1:4] == r2[1:4]
            if r1[2] or r1[3]:
                o1, _ = remote.reset()
                o2, _ = local.reset()


def test_a_remote_env_cannot_be_pickled_and_says_what_to_do(serve):
    server = serve(gym.make("CartPole-v1"))
    with (
        rg.RemoteEnv(server.address) as env,
        pytest.raises(TypeError, match="pass the address and reconnect"),
    ):
        pickle.dumps(env)


def test_a_remote_env_refuses_a_lane_endpoint_and_points_to_the_vector_class(serve):
    server = serve([gym.make("CartPole-v1") for _ in range(2)])
    with pytest.raises(ValueError, match="RemoteVectorEnv"):
        rg.RemoteEnv(server.address)


@pytest.mark.parametrize("flavour", ["rlmesh", "rlmesh.numpy"])
def test_every_client_flavour_refuses_pickling_with_a_clear_type_error(serve, flavour):
    import importlib

    server = serve(gym.make("CartPole-v1"))
    cls = importlib.import_module(flavour).RemoteEnv
    with (
        cls(server.address) as env,
        pytest.raises(TypeError, match="live connection cannot be pickled"),
    ):
        pickle.dumps(env)


@pytest.mark.filterwarnings("always::UserWarning")
def test_gymnasium_make_with_the_served_render_mode_renders_without_warnings(serve, recwarn):
    server = serve(DictRenderEnv())
    env = gym.make(rg.REMOTE_ID, address=server.address, render_mode="rgb_array")
    env.reset(seed=0)
    assert env.render().shape == (8, 8, 3)
    env.close()
    assert not [w for w in recwarn if "render_mode" in str(w.message)]


def test_asking_for_a_render_mode_the_server_does_not_render_is_refused(serve):
    server = serve(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="chosen where the env is served"):
        rg.RemoteEnv(server.address, render_mode="rgb_array")
    rg.RemoteEnv(server.address).close()  # the refused attempt released the endpoint
