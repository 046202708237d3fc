"""``RemoteModel`` against an in-memory model endpoint: a served model drives a local env (MOD-40..45)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
import rlmesh.numpy as rnp
from rlmesh.errors import HandshakeError, ModelError, RequestTimeout
from rlmesh.wire import messages as m

from ._memory import Network, error, silence

MODEL = "tcp://model.test:1"


class Recorder(rnp.Model):
    """Pushes the cart the way the pole leans; remembers what it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[np.ndarray[Any, Any]] = []
        self.ended: list[str] = []

    def predict(self, obs: Any) -> int:
        self.seen.append(np.array(obs))
        return int(obs[2] > 0)

    def on_episode_end(self, episode_id: str) -> None:
        self.ended.append(episode_id)


class Broken(rnp.Model):
    def predict(self, obs: Any) -> int:
        raise RuntimeError("weights missing")


def test_a_served_model_drives_a_local_env_for_whole_episodes(net: Network) -> None:
    model = Recorder()
    net.serve_model(model)
    remote = rlmesh.RemoteModel(MODEL)
    assert repr(remote) == f"RemoteModel(address='{MODEL}')" and remote.address == MODEL
    result = remote.run(gym.make("CartPole-v1"), seeds=[0, 1])
    assert result.num_episodes == 2
    first = gym.make("CartPole-v1").reset(seed=0)[0]
    np.testing.assert_array_equal(model.seen[0], first)  # the raw observation reached the model
    assert len(model.ended) == 2  # the served model heard both episodes end
    assert sum(int(e.steps) for e in result.episodes) == len(model.seen)


def test_a_served_model_drives_a_remote_env(net: Network) -> None:
    model = Recorder()
    net.serve_model(model)
    net.serve_env(gym.make("CartPole-v1"), "tcp://env.test:1")
    result = rlmesh.RemoteModel(MODEL).run(rnp.RemoteEnv("tcp://env.test:1"), seeds=[3])
    assert result.num_episodes == 1
    np.testing.assert_array_equal(model.seen[0], gym.make("CartPole-v1").reset(seed=3)[0])


def test_a_model_failure_reaches_the_caller_as_a_model_error(net: Network) -> None:
    net.serve_model(Broken())
    with pytest.raises(
        ModelError, match=r"model error: predict failed: RuntimeError: weights missing"
    ):
        rlmesh.RemoteModel(MODEL).run(gym.make("CartPole-v1"), seeds=[0])


def test_a_recoverable_model_error_keeps_its_code(net: Network) -> None:
    ep = net.serve_model(Recorder())
    ep.on(m.Predict, error("INVALID_ACTION", "predict: observation does not match", op="predict"))
    with pytest.raises(ModelError, match="observation does not match") as info:
        rlmesh.RemoteModel(MODEL).run(gym.make("CartPole-v1"), seeds=[0])
    assert info.value.code == "INVALID_ACTION" and info.value.recoverable


def test_a_silent_model_is_a_remote_model_timeout(net: Network) -> None:
    ep = net.serve_model(Recorder())
    ep.on(m.Predict, silence())
    with pytest.raises(RequestTimeout, match=r"remote model request timed out after 0.250s"):
        rlmesh.RemoteModel(MODEL, request_timeout_seconds=0.25).run(
            gym.make("CartPole-v1"), seeds=[0]
        )


def test_an_env_endpoint_is_not_a_model(net: Network) -> None:
    net.serve_env(
        gym.make("CartPole-v1"), MODEL
    )  # the wrong kind of endpoint at the model's address
    with pytest.raises(HandshakeError):
        rlmesh.RemoteModel(MODEL).run(gym.make("CartPole-v1"), seeds=[0])


def test_nothing_is_dialled_until_a_session_starts(net: Network) -> None:
    rlmesh.RemoteModel(MODEL)
    assert net.dialled == []
    with pytest.raises(
        ConnectionError,
        match=r"could not connect to a model at 'tcp://model.test:1'; is the ModelServer running",
    ):
        rlmesh.RemoteModel(MODEL).run(gym.make("CartPole-v1"), seeds=[0])


def test_the_model_address_is_one_form_or_the_other() -> None:
    with pytest.raises(
        ValueError, match="cannot be combined with the host/port/path/transport helpers"
    ):
        rlmesh.RemoteModel("tcp://x.test:1", port=2)
    assert rlmesh.RemoteModel(host="127.0.0.1", port=9).address == "tcp://127.0.0.1:9"
    assert rlmesh.RemoteModel("127.0.0.1:9").address == "127.0.0.1:9"  # as given
