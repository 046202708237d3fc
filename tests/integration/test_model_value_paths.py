"""A model sees the same values in-process, behind a served env and as a served model (issue 10 item 3).

MOD-1 (the flavour only changes the bridge), VAL-6 (each space kind's value per flavour),
BKD-1/BKD-2 (numpy scalars), EVAL-8 (the env-side bridge). The env returns values the way
a hand-written env does -- numpy scalars, lists, tuples -- and every path must hand the
model what its space says, with the same types: ``np.float32(1.5)`` for a rank-0 Box is a
rank-0 array on every path, ``np.int64(3)`` for a Discrete is an ``int``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
from conftest import require
from rlmesh import Tensor
from rlmesh.serve import ModelServer

pytestmark = pytest.mark.timeout(60)

F32 = np.float32

CATALOGUE: dict[str, tuple[gym.Space[Any], Any]] = {
    "rank0-box-numpy-scalar": (gym.spaces.Box(0.0, 2.0, shape=(), dtype=F32), F32(1.5)),
    "discrete-numpy-int": (gym.spaces.Discrete(5), np.int64(3)),
    "box-from-list": (gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=F32), [0.5, 0.25]),
    "dict-of-kinds": (
        gym.spaces.Dict(
            {
                "a": gym.spaces.Box(0.0, 2.0, shape=(), dtype=F32),
                "n": gym.spaces.Discrete(3),
                "t": gym.spaces.Text(5),
                "m": gym.spaces.MultiBinary(3),
            }
        ),
        {"a": F32(1.5), "n": np.int64(2), "t": "hi", "m": np.array([1, 0, 1], np.int8)},
    ),
    "tuple-of-kinds": (
        gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=F32))),
        (np.int32(1), np.zeros(2, np.float64)),
    ),
}


class ScriptedEnv(gym.Env[Any, Any]):
    """Two steps per episode, always the same (hand-written, not canonical) observation."""

    def __init__(self, space: gym.Space[Any], obs: Any) -> None:
        self.observation_space = space
        self.action_space = gym.spaces.Discrete(2)
        self._obs = obs
        self._t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self._t += 1
        return self._obs, 1.0, self._t >= 2, False, {}


def describe(x: Any) -> Any:
    """Type, dtype, shape and content of what a corner saw."""
    if isinstance(x, dict):
        return {k: describe(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, [describe(v) for v in x])
    if isinstance(x, Tensor):
        return ("rlmesh.Tensor", x.dtype, tuple(x.shape), np.asarray(x).tolist())
    if hasattr(x, "shape") and hasattr(x, "dtype"):  # ndarray, torch.Tensor, jax.Array
        host = np.asarray(x.cpu() if hasattr(x, "cpu") else x)
        return (
            f"{type(x).__module__.split('.')[0]}.array",
            str(x.dtype),
            tuple(x.shape),
            host.tolist(),
        )
    return (type(x).__name__, x)


def _flavour(name: str) -> Any:
    if name == "plain":
        return rlmesh.Model
    if name == "numpy":
        return rlmesh.numpy.Model
    require(name)
    return __import__(f"rlmesh.{name}", fromlist=["Model"]).Model


def _recording_model(flavour: str, seen: list[Any]) -> Any:
    def predict(obs: Any) -> int:
        seen.append(describe(obs))
        return 0

    return _flavour(flavour)(predict)


@pytest.mark.parametrize("flavour", ["plain", "numpy", "torch", "jax"])
@pytest.mark.parametrize("case", sorted(CATALOGUE))
def test_local_served_env_and_served_model_show_the_model_the_same_values(
    flavour: str, case: str
) -> None:
    space, obs = CATALOGUE[case]
    local: list[Any] = []
    rlmesh.run(_recording_model(flavour, local), ScriptedEnv(space, obs), seeds=[0])

    via_env: list[Any] = []
    with rlmesh.EnvServer(ScriptedEnv(space, obs), "127.0.0.1:0").start() as env_server:
        rlmesh.run(_recording_model(flavour, via_env), env_server.address, seeds=[0])

    via_model: list[Any] = []
    server = ModelServer(_recording_model(flavour, via_model), "127.0.0.1:0").start()
    try:
        rlmesh.RemoteModel(server.address).run(ScriptedEnv(space, obs), seeds=[0])
    finally:
        server.shutdown()

    assert len(local) == 2
    assert via_model == local
    assert via_env == local


def test_a_rank0_box_numpy_scalar_is_a_rank0_tensor_for_a_plain_model() -> None:  # VAL-6
    seen: list[Any] = []
    space, obs = CATALOGUE["rank0-box-numpy-scalar"]
    rlmesh.run(_recording_model("plain", seen), ScriptedEnv(space, obs), seeds=[0])
    assert seen[0] == ("rlmesh.Tensor", "float32", (), 1.5)
