"""The driver's step, resolved at bind (issue 24), still checks what the specs require.

A step reads a one-leaf action straight off the frame and inlines the common case of
the observation checks; everything off that road must keep its errors and warnings:
actions of the wrong type, size or range (CNF-4 strict), observations with NaN (CNF-2)
or out of range (CNF-3: fatal under strict, a warning under warn, nothing under off).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from rlmesh.serve._driven import driven_env
from rlmesh.serve._driver import Driver, RequestFailed
from rlmesh.wire import messages as m

WARNING_KEY = "rlmesh.conformance.warning"


class BoxEnv:
    """Box(-1, 1, (3,)) action and observation; the observation is what ``next_obs`` says."""

    metadata: dict[str, Any] = {}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.next_obs = np.zeros(3, np.float32)
        self.actions: list[Any] = []

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        return np.zeros(3, np.float32), {}

    def step(self, action: Any) -> Any:
        self.actions.append(action)
        return self.next_obs, 1.0, False, False, {}

    def close(self) -> None:
        pass


class DiscreteEnv(BoxEnv):
    def __init__(self) -> None:
        super().__init__()
        self.action_space = spaces.Discrete(3)


def _driver(env: Any) -> Driver:
    d = Driver(driven_env(env))
    d.begin_session()
    d.reset(m.Reset())
    return d


def _seg(a: np.ndarray[Any, Any]) -> list[Any]:
    return [np.ascontiguousarray(a).reshape(-1).view(np.uint8)]


def test_box_action_straight_off_the_frame() -> None:
    env = BoxEnv()
    d = _driver(env)
    reply, segs = d.step(m.Step(action=[]), _seg(np.array([0.5, -0.5, 0.0], np.float32)))
    assert env.actions[-1].tolist() == [0.5, -0.5, 0.0]
    assert reply.reward == 1.0 and len(segs) == 1


def test_box_action_of_the_wrong_size_is_invalid() -> None:
    d = _driver(BoxEnv())
    with pytest.raises(RequestFailed) as err:
        d.step(m.Step(action=[]), _seg(np.zeros(2, np.float32)))
    assert err.value.code == "INVALID_ACTION" and err.value.recoverable


def test_box_action_with_nan_is_invalid() -> None:
    d = _driver(BoxEnv())
    with pytest.raises(RequestFailed) as err:
        d.step(m.Step(action=[]), _seg(np.array([np.nan, 0, 0], np.float32)))
    assert err.value.code == "INVALID_ACTION" and "NaN" in err.value.message


def test_box_action_out_of_range_is_refused_under_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", "strict")
    env = BoxEnv()
    d = _driver(env)
    with pytest.raises(RequestFailed) as err:
        d.step(m.Step(action=[]), _seg(np.array([2.0, 0, 0], np.float32)))
    assert err.value.code == "INVALID_ACTION" and "out of range" in err.value.message
    assert env.actions == []  # not delivered


def test_box_action_out_of_range_is_a_warning_under_warn() -> None:
    env = BoxEnv()
    d = _driver(env)
    reply, _ = d.step(m.Step(action=[]), _seg(np.array([2.0, 0, 0], np.float32)))
    assert env.actions[-1][0] == 2.0
    assert reply.info[WARNING_KEY][0]["kind"] == "action"


@pytest.mark.parametrize("bad", [1.0, "1", True])
def test_discrete_action_that_is_no_int_is_invalid(bad: Any) -> None:
    d = _driver(DiscreteEnv())
    with pytest.raises(RequestFailed) as err:
        d.step(m.Step(action=[bad]), [])
    assert err.value.code == "INVALID_ACTION"


def test_discrete_action_out_of_range_is_invalid() -> None:
    env = DiscreteEnv()
    d = _driver(env)
    with pytest.raises(RequestFailed) as err:
        d.step(m.Step(action=[3]), [])
    assert err.value.code == "INVALID_ACTION" and env.actions == []
    d.step(m.Step(action=[2]), [])
    assert env.actions == [2]


def test_observation_with_nan_ends_the_session() -> None:
    env = BoxEnv()
    d = _driver(env)
    env.next_obs = np.array([0, np.nan, 0], np.float32)
    with pytest.raises(RequestFailed) as err:
        d.step(m.Step(action=[]), _seg(np.zeros(3, np.float32)))
    assert err.value.code == "INTERNAL" and not err.value.recoverable and "NaN" in err.value.message


def test_observation_out_of_range_warns_once_under_warn() -> None:
    env = BoxEnv()
    d = _driver(env)
    env.next_obs = np.array([0, 5.0, 0], np.float32)
    first, _ = d.step(m.Step(action=[]), _seg(np.zeros(3, np.float32)))
    second, _ = d.step(m.Step(action=[]), _seg(np.zeros(3, np.float32)))
    assert first.info[WARNING_KEY][0]["kind"] == "observation"
    assert second.info is None  # once per (kind, path) per session


def test_observation_out_of_range_is_fatal_under_strict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", "strict")
    env = BoxEnv()
    d = _driver(env)
    env.next_obs = np.array([0, 5.0, 0], np.float32)
    with pytest.raises(RequestFailed) as err:
        d.step(m.Step(action=[]), _seg(np.zeros(3, np.float32)))
    assert err.value.code == "INTERNAL" and "out of range" in err.value.message


def test_observation_of_another_dtype_is_coerced() -> None:
    env = BoxEnv()
    d = _driver(env)
    env.next_obs = np.array([0.25, 0, 0], np.float64)
    _, segs = d.step(m.Step(action=[]), _seg(np.zeros(3, np.float32)))
    assert segs[0].dtype == np.float32 and segs[0][0] == 0.25


def test_off_checks_no_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", "off")
    env = BoxEnv()
    d = _driver(env)
    env.next_obs = np.array([0, 5.0, 0], np.float32)
    reply, _ = d.step(m.Step(action=[]), _seg(np.array([2.0, 0, 0], np.float32)))
    assert reply.info is None and env.actions[-1][0] == 2.0


def test_vector_discrete_action_out_of_range_is_invalid() -> None:
    env = driven_env([DiscreteEnv(), DiscreteEnv()])
    d = Driver(env)
    d.begin_session()
    d.reset(m.Reset())
    with pytest.raises(RequestFailed) as err:
        d.step(m.Step(action=[]), _seg(np.array([0, 7], np.int64)))
    assert err.value.code == "INVALID_ACTION" and "lane 1" in err.value.message
    reply, segs = d.step(m.Step(action=[]), _seg(np.array([0, 2], np.int64)))
    assert len(segs) == 4  # observation, rewards, terminated, truncated
