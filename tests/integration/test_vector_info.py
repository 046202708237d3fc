"""Vector step info as the seeds describe it: numpy values unwrapped as the metadata codec does.

Seed 000 (``rlmesh.sanitize_metadata``): numpy scalars and arrays are unwrapped "the way
the codec does (_asdict / tolist / item)". A vector env whose info carries
``np.asarray(actions)`` reaches ``rlmesh.numpy.RemoteVectorEnv`` as a list, so
``info["actions"] == [0, 1]`` is a plain comparison (it raised "The truth value of an
array ... is ambiguous"). ``rlmesh.gymnasium`` keeps Gymnasium's own vector-info layout.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
import rlmesh.gymnasium as rg
import rlmesh.numpy as rnp

pytestmark = pytest.mark.timeout(60)


class EchoVectorEnv(gym.vector.VectorEnv):  # type: ignore[type-arg]
    """Two lanes; the step info echoes the actions as an array, plus a numpy scalar."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self) -> None:
        self.num_envs = 2
        self.single_observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.single_action_space = gym.spaces.Discrete(3)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, 2)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, 2)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        return np.zeros((2, 2), np.float32), {"start": np.array([1.5, 2.5], np.float32)}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        info = {
            "actions": np.asarray(actions),
            "scale": np.float32(0.5),
            "_actions": np.ones(2, bool),
        }
        zeros = np.zeros(2, bool)
        return np.zeros((2, 2), np.float32), np.ones(2), zeros, zeros.copy(), info


def test_numpy_vector_client_gets_info_arrays_as_lists(serve: Any) -> None:
    server = serve(EchoVectorEnv())
    with rnp.RemoteVectorEnv(server.address) as env:
        _, info = env.reset(seed=0)
        assert info["start"] == [1.5, 2.5]
        _, _, _, _, info = env.step(np.array([0, 2]))
    assert info["actions"] == [0, 2] and type(info["actions"]) is list
    assert info["scale"] == 0.5 and type(info["scale"]) is float
    assert info["_actions"] == [True, True]
    assert info["completed_episodes"] == 0 and len(info["episode_ids"]) == 2  # runtime keys


def test_every_seed_flavour_vector_client_does_the_same(serve: Any) -> None:
    server = serve(EchoVectorEnv())
    with rlmesh.RemoteVectorEnv(server.address) as env:
        env.reset(seed=0)
        *_, info = env.step([1, 1])
    assert info["actions"] == [1, 1]


def test_the_gymnasium_vector_client_keeps_gymnasium_s_layout(serve: Any) -> None:
    server = serve(EchoVectorEnv())
    env = rg.RemoteVectorEnv(server.address)
    try:
        env.reset(seed=0)
        *_, info = env.step(np.array([2, 1]))
    finally:
        env.close()
    assert isinstance(info["actions"], np.ndarray) and info["actions"].tolist() == [2, 1]
    assert info["_actions"].tolist() == [True, True]
