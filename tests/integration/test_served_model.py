"""Served models: Model.serve / ModelServer / rlmesh serve-model and RemoteModel (MOD-33..45)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
from served_models import Broken, Chunky, Lean, lean

import rlmesh
from rlmesh.errors import EndpointBusy, ModelError
from rlmesh.serve import ModelServer, wait_ready

HERE = Path(__file__).resolve().parent
pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


@pytest.fixture
def model_server():
    servers: list[ModelServer] = []

    def start(model: rlmesh.Model, address: str = "127.0.0.1:0") -> ModelServer:
        server = ModelServer(model, address).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.shutdown()


def test_served_model_on_episode_end_fires_once_per_episode(model_server) -> None:
    model = Lean()
    server = model_server(model)
    result = rlmesh.RemoteModel(server.address).run(gym.make("CartPole-v1"), seeds=[0, 1, 2])
    assert result.num_episodes == 3
    assert len(model.ends) == 3 and len(set(model.ends)) == 3  # the reference never fires it


def test_same_rewards_local_served_env_and_served_model(model_server, tmp_path) -> None:
    seeds = [3, 4, 5]
    local = rlmesh.run(rlmesh.numpy.Model(lean), gym.make("CartPole-v1"), seeds=seeds)
    server = model_server(Lean(), f"unix://{tmp_path}/model.sock")
    with rlmesh.EnvServer(gym.make("CartPole-v1"), "127.0.0.1:0").start() as env_server:
        served = rlmesh.RemoteModel(server.address).run(env_server.address, seeds=seeds)
    assert [e.reward for e in served.episodes] == [e.reward for e in local.episodes]
    assert [e.steps for e in served.episodes] == [e.steps for e in local.episodes]


def test_a_second_client_is_refused_while_the_first_holds_the_session(model_server) -> None:
    server = model_server(Lean())
    first = rlmesh.RemoteModel(server.address).session(gym.make("CartPole-v1"))
    first.reset(seed=0)
    with pytest.raises(EndpointBusy):
        rlmesh.RemoteModel(server.address).session(gym.make("CartPole-v1")).reset(seed=0)
    first.close()
    second = rlmesh.RemoteModel(server.address).session(gym.make("CartPole-v1"))
    second.reset(seed=0)
    second.close()


def test_model_server_survives_a_client_that_disconnects_mid_episode(model_server) -> None:
    model = Lean()
    server = model_server(model)
    sess = rlmesh.RemoteModel(server.address).session(gym.make("CartPole-v1"))
    obs, _ = sess.reset(seed=0)
    sess.step(sess.predict(obs))
    sess._route.session.conn.sock.shutdown(socket.SHUT_RDWR)  # the client vanishes mid-episode
    deadline = time.monotonic() + 10
    while not model.ends and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(model.ends) == 1  # the in-flight episode still ended for the model
    result = rlmesh.RemoteModel(server.address).run(gym.make("CartPole-v1"), seeds=[1])
    assert result.num_episodes == 1


def test_served_model_rejects_instruction(model_server) -> None:
    server = model_server(Lean())
    with pytest.raises(ValueError, match="instruction= is not supported"):
        rlmesh.RemoteModel(server.address).session(gym.make("CartPole-v1"), instruction="pick")


def test_a_failing_served_model_raises_model_error(model_server) -> None:
    server = model_server(Broken())
    with pytest.raises(
        ModelError,
        match="model error: predict failed: ZeroDivisionError: the policy divided by zero",
    ):
        rlmesh.RemoteModel(server.address).run(gym.make("CartPole-v1"), seeds=[0])


def test_chunks_replay_on_the_server_with_one_forward_per_horizon(model_server) -> None:
    model = Chunky()
    server = model_server(model)
    result = rlmesh.RemoteModel(server.address).run(
        gym.make("CartPole-v1"), seeds=[0], max_episode_steps=40, execution_horizon=4
    )
    assert result.total_steps == 40 and model.calls == 10


def test_served_model_drives_a_vector_env_lane_by_lane(model_server) -> None:
    model = Lean()
    server = model_server(model)
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(3)])
    result = rlmesh.RemoteModel(server.address).run(venv, max_episodes=5)
    assert result.num_episodes == 5
    assert len(model.ends) >= 5


def test_serve_model_cli_serves_a_callable_for_remote_model(tmp_path) -> None:
    ready = tmp_path / "addr"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmesh.cli",
            "serve-model",
            "served_models:lean",
            "--address",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (
                proc.stderr.read() if proc.stderr else ""
            )
            time.sleep(0.05)
        address = ready.read_text().strip()
        assert wait_ready(address, timeout_seconds=10).service == "model"
        result = rlmesh.RemoteModel(address).run(gym.make("CartPole-v1"), seeds=[0])
        assert result.episodes[0].reward == 500.0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
