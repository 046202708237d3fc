"""The fan-out engine's pure parts: lane seeds, action slicing, info merging (issue 26)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from rlmesh.client._fanout import normalize_autoreset
from rlmesh.client._lanes import (
    add_info,
    concat,
    lane_infos,
    lane_of,
    lane_seeds,
    merge,
    take,
)


def test_an_int_seed_seeds_lane_i_with_seed_plus_i_and_lists_go_per_lane_or_per_reset_lane():
    assert lane_seeds(10, 4, [0, 1, 2, 3]) == [10, 11, 12, 13]
    assert lane_seeds(None, 4, [0, 1]) is None
    assert lane_seeds([5, None, 7, 8], 4, [1, 2]) == [5, None, 7, 8]  # one per lane
    assert lane_seeds([5, 7], 4, [1, 3]) == [None, 5, None, 7]  # one per reset lane
    with pytest.raises(ValueError, match="expected 4 seeds"):
        lane_seeds([1, 2, 3], 4, [0])
    with pytest.raises(TypeError):
        lane_seeds("7", 4, [0])


def test_actions_are_sliced_per_endpoint_and_a_wrong_lane_count_is_a_ValueError():
    actions = {
        "arm": np.arange(12, dtype=np.float32).reshape(6, 2),
        "grip": np.array([0, 1, 0, 1, 1, 0]),
    }
    part = take(actions, slice(1, 3), 6, "actions")
    assert part["arm"].tolist() == [[2, 3], [4, 5]] and part["grip"].tolist() == [1, 0]
    one = take(actions, 4, 6, "actions")
    assert one["arm"].tolist() == [8, 9] and int(one["grip"]) == 1
    with pytest.raises(
        ValueError, match=r"actions\['grip'\] has shape \[5\]; expected a leading lane axis of 6"
    ):
        take({"grip": np.zeros(5)}, 0, 6, "actions")


def test_lanes_concatenate_in_address_order():
    out = concat([{"x": np.zeros((1, 2))}, {"x": np.ones((3, 2))}])
    assert out["x"].shape == (4, 2) and out["x"][1:].all() and not out["x"][0].any()


def test_infos_merge_exactly_as_gymnasiums_add_info():
    local = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3)
    lanes = [{"t": 1, "name": "a"}, None, {"t": 3, "obs": np.ones(2), "sub": {"k": 1.5}}]
    want: dict = {}
    for i, lane in enumerate(lanes):
        if lane:
            want = local._add_info(want, lane, i)
    got = merge(lanes, 3)
    assert sorted(got) == sorted(want)
    for key in want:
        if isinstance(want[key], dict):
            assert all(np.array_equal(got[key][k], want[key][k]) for k in want[key])
        else:
            assert np.array_equal(got[key], want[key]) and got[key].dtype == want[key].dtype
    assert add_info({}, {"final_obs": np.zeros(4)}, 1, 2)["final_obs"].dtype == object


def test_a_lane_endpoints_info_is_split_per_lane_with_same_step_final_obs():
    info = {
        "final_info": [{"t": 1}, {"t": 9}],
        "_final_info": np.array([True, True]),
        "final_obs": [None, np.array([4.0])],
        "reset_info": [None, {"seed": -1}],
    }
    lanes = lane_infos(info, 2, True, np.array([False, True]))
    assert lanes[0] == {"t": 1}
    assert (
        lanes[1]["final_info"] == {"t": 9}
        and lanes[1]["seed"] == -1
        and lanes[1]["final_obs"].tolist() == [4.0]
    )
    vector_layout = {"t": np.array([1, 2]), "_t": np.array([False, True]), "shared": 7}
    assert lane_of(vector_layout, 0, 2) == {"shared": 7} and lane_of(vector_layout, 1, 2)["t"] == 2


def test_autoreset_modes_are_read_in_every_spelling():
    assert normalize_autoreset(AutoresetMode.SAME_STEP) == "SameStep"
    assert normalize_autoreset("next-step") == normalize_autoreset("NextStep") == "NextStep"
    assert normalize_autoreset(None) is None
    with pytest.raises(ValueError, match="autoreset_mode"):
        normalize_autoreset("sometimes")
