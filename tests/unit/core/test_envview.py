"""The one env view (``rlmesh._envview``): how every driver reads env results (issue 10 item 1)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from rlmesh._envkit.checks import Checks, local_checks, local_scalar_step
from rlmesh._envkit.classify import declared_autoreset, is_vector_env, vector_lanes
from rlmesh._envkit.results import (
    lane_final_info,
    lane_info,
    next_step_violation,
    normalize_reset,
    normalize_step,
    read_vector_step,
)
from rlmesh._keys import CONFORMANCE_WARNING_KEY
from rlmesh.errors import EnvironmentException, InvalidAction


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
    assert lane_info(info, 0, 2) == {
        "is_success": True,
        "names": "a",
        "shared": 3,
        "nested": {"x": 1},
    }
    assert lane_info(info, 1, 2) == {"names": "b", "shared": 3, "nested": {"x": 2}}


def test_final_info_wins_for_the_lane_that_ended() -> None:
    """AR-7: a lane's ``final_info`` entry (list or batched dict) is its episode's last info."""
    listed = {
        "final_info": [{"is_success": True}, {}],
        "_final_info": np.array([True, False]),
        "t": np.array([5, 6]),
    }
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
    from rlmesh._envkit.classify import spec_id

    assert spec_id(types.SimpleNamespace(id="CartPole-v1")) == "CartPole-v1"
    assert spec_id(types.SimpleNamespace(id="")) == "UnknownEnv-v1"
    assert spec_id(types.SimpleNamespace(id=7)) == "UnknownEnv-v1"
    assert spec_id(None) == "UnknownEnv-v1"


# -- Checks: what every driver checks, under the validation policy (SRV-60, CNF-2..4, INFO-4) ---------


def _box_checks(policy: str | None = None, lanes: int | None = None) -> Checks:
    from rlmesh.spaces import Box

    return Checks(Box(0.0, 1.0, (2,)).spec, Box(-1.0, 1.0, (1,)).spec, lanes, policy)


def test_the_policy_is_read_once_when_the_checks_are_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """CNF-4: unset or unknown -> warn; a later change of the variable does not reach built checks."""
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", "Strict ")
    checks = _box_checks()
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", "off")
    assert checks.policy == "strict"
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", "loud")
    assert _box_checks().policy == "warn"


def test_an_observation_out_of_range_is_fatal_under_strict_and_warned_once_under_warn() -> None:
    """SRV-60 / INFO-4: the served words; a warning per (kind, path) per session."""
    with pytest.raises(EnvironmentException) as err:
        _box_checks("strict").observation([0.5, 2.0], "step")
    assert (err.value.code, err.value.recoverable) == ("INTERNAL", False)
    assert (
        err.value.message
        == "step failed: observation out of range at $: Box value at element 1 out of bounds: above high bound"
    )
    warn = _box_checks("warn")
    for _ in range(2):
        warn.observation([0.5, 2.0], "step")
    info = warn.local_info({"x": 1}, "step")
    assert info == {
        "x": 1,
        CONFORMANCE_WARNING_KEY: [
            {
                "kind": "observation",
                "path": "$",
                "detail": "Box value at element 1 out of bounds: above high bound",
            }
        ],
    }
    assert warn.local_info({}, "step") == {}
    warn.begin_session()
    warn.observation([0.5, 2.0], "reset")
    assert CONFORMANCE_WARNING_KEY in warn.info({}, "reset")


def test_a_structural_deviation_is_refused_under_every_policy() -> None:
    """CNF-2: an observation of the wrong shape is fatal; an action's encoder error is raised as is."""
    for policy in ("strict", "warn", "off"):
        checks = _box_checks(policy)
        with pytest.raises(
            EnvironmentException,
            match="does not match observation_space at \\$: Box value has shape",
        ):
            checks.observation([0.5], "reset")
        with pytest.raises(ValueError, match=r"^\$: Box value contains NaN"):
            checks.action([float("nan")])


def test_an_action_out_of_range_is_a_recoverable_invalid_action_under_strict_only() -> None:
    with pytest.raises(InvalidAction, match="action out of range at \\$") as err:
        _box_checks("strict").action([2.0])
    assert err.value.recoverable
    assert _box_checks("off").action([2.0]).tolist() == [2.0]
    assert _box_checks("off").local_info({}, "step") == {}


def test_in_process_checks_are_none_under_off_or_for_unconvertible_spaces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CNF-4: under "off" an in-process run checks nothing (its hot path is the bare env call)."""
    from rlmesh.spaces import Box

    spec = Box(0.0, 1.0, (2,)).spec
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", "off")
    assert local_checks(spec, spec, None) is None
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", "strict")
    assert local_checks(spec, spec, 3) is not None
    assert local_checks(object(), spec, None) is None


def test_an_unreadable_reward_is_worded_as_the_served_driver_words_it() -> None:
    """ERR-2: ``[INTERNAL] step failed: ExcType: text``, fatal, from both drivers."""
    step = local_scalar_step(lambda action: (0, "one", False, False, {}), None)
    with pytest.raises(EnvironmentException) as err:
        step(0)
    assert (
        str(err.value)
        == "[INTERNAL] step failed: ValueError: could not convert string to float: 'one'"
    )
    assert not err.value.recoverable
    with pytest.raises(ValueError, match="vector env returned 3 values for 2 lanes"):
        read_vector_step(
            (np.zeros((2, 1)), np.ones(3), np.zeros(2, bool), np.zeros(2, bool), {}), 2
        )
