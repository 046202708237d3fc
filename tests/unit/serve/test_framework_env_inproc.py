"""``EnvServer(framework="torch")`` in process: the env receives torch actions and may return torch values."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from serve_wire import (  # noqa: F401  (fixtures)
    ScriptedEnv,
    Wire,
    no_threads_left_fixture,
    obs_of,
    short_dir_fixture,
    started_fixture,
)

from conftest import require
from rlmesh.serve import EnvServer
from rlmesh.serve._framework import resolve_framework
from rlmesh.wire import messages as m

pytestmark = pytest.mark.timeout(60)


class TorchEnv(ScriptedEnv):
    """Box actions; returns torch observations, rewards and flags; a dict info with a tensor."""

    def __init__(self, host_obs: bool = False) -> None:
        super().__init__(length=5)
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.host_obs = host_obs
        self.received: list[Any] = []

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        import torch

        return torch.zeros(3), {"t": torch.tensor(1.0)}

    def step(self, action: Any) -> Any:
        import torch

        self.received.append(action)
        obs = np.full(3, 0.25, np.float32) if self.host_obs else torch.full((3,), 0.25)
        return obs, torch.tensor(1.5), torch.tensor(False), False, {}

    def render(self) -> Any:
        import torch

        return torch.zeros((2, 2, 3), dtype=torch.uint8)


def test_a_torch_env_gets_tensors_and_its_tensors_travel_as_arrays(started: Any) -> None:
    torch = require("torch")
    env = TorchEnv()
    server = started(EnvServer, env, framework="torch")
    with Wire(server.address) as client:
        client.hello()
        client.request(m.Reset())
        assert obs_of(client.segments) == [0.0, 0.0, 0.0]
        reply = client.request(m.Step(action=[]), [np.array([0.5, -0.5], np.float32)])
        assert (
            isinstance(reply, m.StepReply)
            and reply.reward == 1.5
            and obs_of(client.segments) == [0.25] * 3
        )
        assert client.request(m.Render()).shape == [2, 2, 3]
    assert isinstance(env.received[0], torch.Tensor) and env.received[0].tolist() == [0.5, -0.5]


def test_a_torch_env_returning_numpy_observations_is_warned_once(
    started: Any, caplog: pytest.LogCaptureFixture
) -> None:
    require("torch")
    server = started(EnvServer, TorchEnv(host_obs=True), framework="torch", device="cpu")
    with caplog.at_level(logging.WARNING, logger="rlmesh.serve"), Wire(server.address) as client:
        client.hello()
        client.request(m.Reset())
        for _ in range(2):
            assert isinstance(
                client.request(m.Step(action=[]), [np.zeros(2, np.float32)]), m.StepReply
            )
    assert caplog.text.count("returned an observation leaf of type numpy.ndarray") == 1


def test_torch_lanes_get_their_own_tensor_actions(started: Any) -> None:
    torch = require("torch")
    lanes = [TorchEnv(), TorchEnv()]
    server = started(EnvServer, lanes, framework="torch")
    with Wire(server.address) as client:
        client.hello()
        client.request(m.Reset())
        reply = client.request(m.Step(action=[]), [np.array([[0.1, 0.2], [0.3, 0.4]], np.float32)])
        assert isinstance(reply, m.StepReply), reply
    assert all(isinstance(e.received[0], torch.Tensor) for e in lanes)
    assert [round(float(x), 3) for x in lanes[1].received[0]] == [0.3, 0.4]


def test_framework_and_device_are_checked() -> None:
    assert resolve_framework(None, None) == (None, None)
    assert resolve_framework("numpy", None) == (None, None)
    with pytest.raises(ValueError, match="requires a framework with a device"):
        resolve_framework(None, "cuda:0")
    with pytest.raises(ValueError, match="requires a framework with a device"):
        resolve_framework("numpy", "cpu")
    with pytest.raises(ValueError, match="unknown framework 'tensorflow'"):
        resolve_framework("tensorflow", None)
