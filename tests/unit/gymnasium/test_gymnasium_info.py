"""Info conversion of rlmesh.gymnasium (Gymnasium vector conventions, issue 12)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rlmesh.gymnasium import REMOTE_ID, RemoteEnv, RemoteVectorEnv
from rlmesh.gymnasium._info import _arrayify, _as_space_value


def test_importing_registers_the_remote_id_with_both_entry_points() -> None:
    spec = gym.spec(REMOTE_ID)
    assert spec.entry_point == "rlmesh.gymnasium:RemoteEnv"
    assert spec.vector_entry_point == "rlmesh.gymnasium:RemoteVectorEnv"


def test_the_classes_are_real_gymnasium_types() -> None:
    assert issubclass(RemoteEnv, gym.Env)
    assert issubclass(RemoteVectorEnv, gym.vector.VectorEnv)


def test_a_served_vector_info_gets_arrays_and_masks_back() -> None:
    space = gym.spaces.Box(0, 1, (2,), np.float32)
    info = {
        "x": [1, 2, 3],
        "_x": [True, False, True],
        "name": ["a", "b", "c"],
        "final_obs": [None, [0.5, 1], None],
    }
    out = _arrayify(info, 3, space)
    assert out["x"].tolist() == [1, 2, 3] and out["_x"].dtype == bool
    assert out["name"].dtype == object and out["name"][1] == "b"
    assert out["final_obs"][0] is None and out["final_obs"][1].dtype == np.float32


def test_plain_values_come_back_in_the_space_types() -> None:
    space = gym.spaces.Dict(
        {"a": gym.spaces.Box(0, 1, (2,), np.float32), "b": gym.spaces.Discrete(3)}
    )
    value = _as_space_value(space, {"a": [0.0, 1.0], "b": 2})
    assert value["a"].dtype == np.float32 and value["b"] == 2
    assert space.contains(value)
