"""Sessions between processes on one host go through shared-memory rings, transparently."""

from __future__ import annotations

import os
import time

import gymnasium as gym
import pytest

import rlmesh.numpy as rnp
from conftest import child_env
from rlmesh.transport import shm

pytestmark = pytest.mark.skipif(not shm.shm_supported(), reason="shared-memory rings need x86-64 Linux")


def _ring_files() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(f"rlmesh-{os.getpid()}-")}


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_a_session_with_a_server_process_uses_rings_and_leaves_no_file(serve_process, transport):
    _proc, address = serve_process("CartPole-v1", transport=transport)
    with rnp.RemoteEnv(address) as env:
        assert env._session.conn.shm is None  # a connect alone never pays for the rings
        obs, _ = env.reset(seed=3)
        for i in range(300):
            if i == 2:
                assert env._session.conn.shm is not None  # moved before the third request
                assert _ring_files() == set()  # and the file is already unlinked
            obs, reward, terminated, truncated, _ = env.step(i % 2)
            assert obs.shape == (4,) and reward == 1.0
            if terminated or truncated:
                obs, _ = env.reset()
    assert _ring_files() == set()


def test_a_vector_session_on_rings_matches_gymnasium(serve_process):
    _proc, address = serve_process("CartPole-v1", "--num-envs", "4")
    with rnp.RemoteVectorEnv(address) as env:
        obs, info = env.reset(seed=0)
        assert obs.shape == (4, 4) and len(info["episode_ids"]) == 4
        for i in range(50):
            obs, rewards, terminated, truncated, info = env.step([i % 2] * 4)
            assert rewards.shape == (4,) and terminated.dtype == bool
        assert env._session.conn.shm is not None


def test_a_server_with_RLMESH_SHM_0_declines_and_the_socket_carries_on(serve_process):
    env_vars = child_env()
    env_vars["RLMESH_SHM"] = "0"
    _proc, address = serve_process("CartPole-v1", env=env_vars)
    with rnp.RemoteEnv(address) as env:
        env.reset(seed=0)
        for _ in range(5):
            assert env.step(1)[0].shape == (4,)
        assert env._session.conn.shm is None
    assert _ring_files() == set()


def test_a_client_with_RLMESH_SHM_0_stays_on_the_socket(serve_process, monkeypatch):
    _proc, address = serve_process("CartPole-v1")
    monkeypatch.setenv("RLMESH_SHM", "0")
    with rnp.RemoteEnv(address) as env:
        env.reset(seed=0)
        for _ in range(5):
            env.step(0)
        assert env._session.conn.shm is None


def test_a_server_in_this_process_keeps_the_socket(serve):
    server = serve(gym.make("CartPole-v1"))
    with rnp.RemoteEnv(server.address) as env:
        env.reset(seed=0)
        for _ in range(5):
            env.step(0)
        assert env._session.conn.shm is None  # one GIL for both ends: sockets do better
    assert _ring_files() == set()


def test_frames_larger_than_the_ring_travel_on_the_socket_in_order(serve_process):
    _proc, address = serve_process("integration_envs:make_big_obs", transport="unix")
    with rnp.RemoteEnv(address) as env:
        obs, _ = env.reset()
        assert obs.shape == (1200, 1000) and int(obs[5, 5]) == 7
        for t in range(1, 6):
            obs, *_ = env.step(t % 2)
            assert int(obs[5, 5]) == t and int(obs[0, 0]) == t % 2
        assert env._session.conn.shm is not None


def test_a_request_timeout_on_rings_raises_TimeoutError_in_time(serve_process):
    proc, address = serve_process("integration_envs:make_sleepy")
    env = rnp.RemoteEnv(address, request_timeout_seconds=0.3)
    try:
        env.reset()
        env.step(0)
        env.step(0)
        assert env._session.conn.shm is not None
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"timed out after 0\.300s"):
            env.step(1)  # the env hangs for a minute
        assert time.monotonic() - started < 10
    finally:
        proc.kill()  # stuck in the env: no graceful stop to wait for
        proc.wait(30)
        env.close()
