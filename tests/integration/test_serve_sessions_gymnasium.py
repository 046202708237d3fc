"""Issue 29 item 2 (with issue 25): ``gymnasium.make_vec`` on ``rlmesh/Remote-v0`` never steps
one served env twice. On a multi-session endpoint every handle is its own session; on a
single-session endpoint the second handle is a clear error that says what to do."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from sessions_envs import SessionEnv, make_session_env

import rlmesh
import rlmesh.gymnasium
from rlmesh.errors import EndpointBusy

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def endpoint():
    servers: list[Any] = []

    def start(sessions: int, cartpole: bool = False) -> str:
        if cartpole:
            target: Any = "CartPole-v1" if sessions > 1 else gym.make("CartPole-v1")
        else:
            target = functools.partial(make_session_env) if sessions > 1 else SessionEnv()
        server = rlmesh.EnvServer(target, "127.0.0.1:0", sessions=sessions).start()
        servers.append(server)
        return str(server.address)

    yield start
    for s in servers:
        s.shutdown()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec_on_a_multi_session_endpoint_gives_independent_lanes(endpoint, mode):
    address = endpoint(2)
    envs = gym.make_vec("rlmesh/Remote-v0", num_envs=2, vectorization_mode=mode, address=address)
    try:
        obs, info = envs.reset(seed=3)
        assert len(set(info["pid"].tolist())) == 2  # two sessions, two env processes
        ref = [SessionEnv(), SessionEnv()]
        want = np.stack([ref[i].reset(seed=3 + i)[0] for i in range(2)])
        np.testing.assert_array_equal(obs, want)
        for _ in range(5):
            obs = envs.step(np.zeros(2, np.int64))[0]
            want = np.stack([r.step(0)[0] for r in ref])
            np.testing.assert_array_equal(
                obs, want
            )  # each lane stepped exactly once per vector step
    finally:
        envs.close()


def test_make_vec_sync_on_a_single_session_endpoint_refuses_to_step_one_env_twice(endpoint):
    address = endpoint(1)
    envs = gym.make_vec("rlmesh/Remote-v0", num_envs=2, vectorization_mode="sync", address=address)
    try:
        envs.reset(seed=0)
        with pytest.raises(
            EndpointBusy, match=r"--sessions N.*--num-envs N.*RemoteVectorEnv\(\[\.\.\.\]\)"
        ):
            envs.step(np.zeros(2, np.int64))
    finally:
        envs.close()


def test_make_vec_async_on_a_single_session_endpoint_says_what_to_do(endpoint, capfd):
    """Gymnasium's async workers report a failed env build as a broken pipe; the worker's own
    traceback (on stderr) carries our EndpointBusy and what to do."""
    address = endpoint(1)
    with pytest.raises(Exception):  # noqa: B017 - Gymnasium decides what the parent raises
        envs = gym.make_vec(
            "rlmesh/Remote-v0", num_envs=2, vectorization_mode="async", address=address
        )
        try:
            envs.reset(seed=0)
            envs.step(np.zeros(2, np.int64))
        finally:
            envs.close()
    err = capfd.readouterr().err
    assert "EndpointBusy" in err and "--sessions N" in err and "RemoteVectorEnv([...])" in err


@pytest.mark.parametrize("sessions", [1, 2])
def test_check_env_keeps_passing(endpoint, sessions):
    address = endpoint(sessions, cartpole=True)
    env = gym.make("rlmesh/Remote-v0", address=address)
    try:
        check_env(env.unwrapped)
    finally:
        env.close()
