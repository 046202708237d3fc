"""The torch flavour's env clients against in-memory endpoints: ``torch.Tensor`` values, ``device=``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from conftest import require

from ._memory import Network

torch = require("torch")
import rlmesh.torch as rt  # noqa: E402

ENV = "tcp://env.test:1"


def test_a_torch_client_returns_tensors_with_the_local_values(net: Network) -> None:
    net.serve_env(gym.make("CartPole-v1"))
    env = rt.RemoteEnv(ENV, device="cpu")
    assert env.device == torch.device("cpu")
    obs, _ = env.reset(seed=4)
    assert isinstance(obs, torch.Tensor) and obs.dtype == torch.float32
    local = gym.make("CartPole-v1")
    np.testing.assert_array_equal(obs.numpy(), local.reset(seed=4)[0])
    obs, reward, terminated, truncated, _ = env.step(torch.tensor(1))
    np.testing.assert_array_equal(obs.numpy(), local.step(1)[0])
    assert (reward, terminated, truncated) == (1.0, False, False)
    env.close()


def test_a_torch_vector_client_batches_lanes_as_tensors(net: Network) -> None:
    net.serve_env(gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"))
    env = rt.RemoteVectorEnv(ENV)
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, torch.Tensor) and tuple(obs.shape) == (2, 4)
    obs, rewards, terms, truncs, _ = env.step(torch.tensor([0, 1]))
    assert isinstance(rewards, torch.Tensor) and rewards.tolist() == [1.0, 1.0]
    assert isinstance(terms, torch.Tensor) and not bool(terms.any() or truncs.any())
    env.close()


def test_torch_actions_fan_out_to_many_endpoints(net: Network) -> None:
    for address in ("tcp://a.test:1", "tcp://b.test:1"):
        net.serve_env(gym.make("CartPole-v1"), address)
    env = rt.RemoteVectorEnv(["tcp://a.test:1", "tcp://b.test:1"], device="cpu")
    assert isinstance(env, rt.RemoteVectorEnv) and env.device == torch.device("cpu")
    obs, _ = env.reset(seed=2)
    want = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    np.testing.assert_array_equal(obs.numpy(), want.reset(seed=2)[0])
    obs, rewards, *_ = env.step(torch.tensor([1, 0]))
    np.testing.assert_array_equal(obs.numpy(), want.step(np.array([1, 0]))[0])
    assert isinstance(rewards, torch.Tensor)
    env.close()


class Painted(gym.Env):  # type: ignore[type-arg]
    metadata = {"render_modes": ["rgb_array"]}
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)
    render_mode = "rgb_array"

    def reset(
        self, *, seed: int | None = None, options: object = None
    ) -> tuple[int, dict[str, object]]:
        return 0, {}

    def render(self) -> np.ndarray:  # type: ignore[type-arg]
        return np.full((2, 3, 3), 9, np.uint8)


def test_a_torch_client_renders_a_tensor_frame(net: Network) -> None:
    net.serve_env(Painted())
    env = rt.RemoteEnv(ENV)
    env.reset()
    frame = env.render()
    assert (
        isinstance(frame, torch.Tensor)
        and tuple(frame.shape) == (2, 3, 3)
        and int(frame[0, 0, 0]) == 9
    )
    env.close()


def test_an_unknown_device_is_refused_before_dialling(net: Network) -> None:
    with pytest.raises((ValueError, RuntimeError)):
        rt.RemoteEnv(ENV, device="nonsense:7")
    assert net.dialled == []
