"""Client-side failures are typed (``rlmesh.errors``) and worded for the peer they concern (issue 10 item 6).

ERR-4/ERR-5: every failure a user can cause raises a class of the rlmesh hierarchy
that also subclasses the built-in the spec names.
"""

from __future__ import annotations

import socket
from typing import Any

import gymnasium as gym
import pytest
from integration_envs import CountdownEnv

import rlmesh
import rlmesh.numpy as rnp
from rlmesh.errors import ConnectFailed, EnvironmentException, InvalidContract, RLMeshException


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_model_endpoint_is_not_called_an_env_server() -> None:
    """A model connection failure names the ModelServer, never "remote environment" or the EnvServer."""
    port = _closed_port()
    model = rlmesh.RemoteModel(f"127.0.0.1:{port}", connect_timeout_seconds=2)
    with pytest.raises(ConnectFailed) as info:
        model.run(gym.make("CartPole-v1"), max_episodes=1)
    text = str(info.value)
    assert isinstance(info.value, ConnectionError)
    assert (
        f"could not connect to a model at 'tcp://127.0.0.1:{port}'; is the ModelServer running?"
        in text
    )
    assert "EnvServer" not in text and "environment" not in text


def test_a_partial_reset_before_a_full_reset_is_a_typed_not_ready_error(serve: Any) -> None:
    """A partial reset first raises EnvironmentException [NOT_READY] (still a RuntimeError)."""
    server = serve([CountdownEnv(), CountdownEnv()])
    with rnp.RemoteVectorEnv(server.address) as envs:
        with pytest.raises(EnvironmentException) as info:
            envs.reset(env_indices=[0])
        assert isinstance(info.value, RuntimeError)
        assert info.value.code == "NOT_READY"
        assert "full reset()" in str(info.value)
        envs.reset()  # the client is still usable
        obs, _ = envs.reset(env_indices=[1])
        assert len(obs) == 2


def test_invalid_contract_joins_the_hierarchy_as_a_connection_error() -> None:
    """The "published an invalid contract" failure keeps ``except ConnectionError`` working."""
    assert issubclass(InvalidContract, ConnectionError)
    assert issubclass(InvalidContract, RLMeshException)
    assert issubclass(InvalidContract, rlmesh.errors.HandshakeError)
