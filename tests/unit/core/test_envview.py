"""The one env view (``rlmesh._envview``): how every driver reads env results (issue 10 item 1)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from rlmesh._envview import (
    declared_autoreset,
    is_vector_env,
    lane_final_info,
    lane_info,
    next_step_violation,
    normalize_reset,
    normalize_step,
    vector_lanes,
)


def test_a_read_only_mapping_is_an_info_for_reset_and_step() -> None:
    """ENVCALL-2/3: any Mapping is info; it comes back as a plain dict."""
    info = types.MappingProxyType({"a": 1})
    assert normalize_reset((np.zeros(2), info))[1] == {"a": 1}
    assert type(normalize_reset((np.zeros(2), info))[1]) is dict
    assert normalize_step((0, 1.0, False, False, info), None)[4] == {"a": 1}


def test_a_reset_tuple_without_an_info_is_the_observation() -> None:
    """ENVCALL-2: a 2-tuple whose second item is not a mapping is a tuple observation."""
    obs, info = normalize_reset((1, 2))
    assert obs == (1, 2) and info == {}


def test_a_legacy_four_tuple_splits_done_by_the_time_limit_flag() -> None:
    """ENVCALL-3: ``done`` with ``TimeLimit.truncated`` is truncation, otherwise termination."""
    _, _, te, tr, _ = normalize_step((0, 1.0, True, {"TimeLimit.truncated": True}), None)
    assert (te, tr) == (False, True)
    _, _, te, tr, _ = normalize_step((0, 1.0, True, {}), None)
    assert (te, tr) == (True, False)


def test_one_lane_of_a_masked_vector_info() -> None:
    """The one slicer: masks drop keys per lane, length-n arrays/lists slice, the rest stays whole."""
    info = {
        "is_success": np.array([True, False]),
        "_is_success": np.array([True, False]),
        "names": ["a", "b"],
        "shared": 3,
        "nested": {"x": np.array([1, 2])},
    }
    assert lane_info(info, 0, 2) == {"is_success": True, "names": "a", "shared": 3, "nested": {"x": 1}}
    assert lane_info(info, 1, 2) == {"names": "b", "shared": 3, "nested": {"x": 2}}


def test_final_info_wins_for_the_lane_that_ended() -> None:
    """AR-7: a lane's ``final_info`` entry (list or batched dict) is its episode's last info."""
    listed = {"final_info": [{"is_success": True}, {}], "_final_info": np.array([True, False]), "t": np.array([5, 6])}
    assert lane_final_info(listed, 0, 2) == {"is_success": True}
    assert lane_final_info(listed, 1, 2) == {}
    batched = {"final_info": {"r": np.array([1.0, 2.0]), "_r": np.array([False, True])}}
    assert lane_final_info(batched, 1, 2) == {"r": 2.0}
    assert lane_final_info({"t": np.array([5, 6])}, 1, 2) == {"t": 6}


class _Duck:
    def __init__(self, n: int, metadata: object = None) -> None:
        self.num_envs = n
        self.metadata = metadata


def test_vector_detection_and_autoreset_are_one_rule() -> None:
    """SRV-3 / AR-1: num_envs makes a vector env; no declared mode is NextStep; unknown is refused."""
    assert is_vector_env(_Duck(2)) and vector_lanes(_Duck(3)) == 3
    assert vector_lanes(object()) is None
    with pytest.raises(ValueError, match="num_envs=0"):
        vector_lanes(_Duck(0))
    assert declared_autoreset(None) == "NextStep"
    assert declared_autoreset({"autoreset_mode": "SameStep"}) == "SameStep"
    with pytest.raises(ValueError, match="Weird"):
        declared_autoreset({"autoreset_mode": "Weird"})
    assert "lane 3" in next_step_violation(3)


def test_the_env_id_rule_is_the_servers() -> None:
    """SRV-11: a non-empty str ``spec.id``, else ``UnknownEnv-v1`` (an empty or non-str id too)."""
    from rlmesh._envview import spec_id

    assert spec_id(types.SimpleNamespace(id="CartPole-v1")) == "CartPole-v1"
    assert spec_id(types.SimpleNamespace(id="")) == "UnknownEnv-v1"
    assert spec_id(types.SimpleNamespace(id=7)) == "UnknownEnv-v1"
    assert spec_id(None) == "UnknownEnv-v1"
