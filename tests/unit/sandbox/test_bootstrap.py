"""SBX-12 and DELTA-26: the in-sandbox bootstrap (spec loading, overrides, lane seeds, hf selection)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from rlmesh.sandbox._bootstrap import LaneSeeds, _select, build_target, main


def test_SBX12_usage_errors_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RLMESH_BOOTSTRAP_JSON", raising=False)
    assert main([]) == 2
    assert "usage" in capsys.readouterr().err
    monkeypatch.setenv(
        "RLMESH_BOOTSTRAP_JSON", json.dumps({"spec": {"kind": "gym", "env_id": "CartPole-v1"}})
    )
    assert (
        main([str(tmp_path / "bootstrap.json")]) == 2
    )  # the inline spec wins: no argument allowed
    monkeypatch.setenv("RLMESH_BOOTSTRAP_JSON", "[1]")
    assert main([]) == 2


def test_SBX12_env_overrides_and_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    require("gymnasium")
    monkeypatch.setenv("RLMESH_NUM_ENVS", "3")
    monkeypatch.setenv("RLMESH_MAKE_KWARGS", '{"max_episode_steps": 4}')
    env, _ = build_target(
        {"kind": "gym", "env_id": "CartPole-v1", "imports": ["json"], "num_envs": 1}
    )
    assert isinstance(env, list) and len(env) == 3
    assert env[0].spec.max_episode_steps == 4
    with pytest.raises(ImportError, match=r"SandboxBuild\(packages="):
        build_target({"kind": "gym", "env_id": "CartPole-v1", "imports": ["no_such_module_xyz"]})
    with pytest.raises(ValueError, match="unknown sandbox spec kind"):
        build_target({"kind": "nope"})


def test_DELTA26_lane_resets_roll_seeds_from_the_last_explicit_one() -> None:
    gym = require("gymnasium")
    lane = LaneSeeds.wrap(gym.make("CartPole-v1"))
    first, info = lane.reset(seed=10)
    assert info["seed"] == 10
    _, info = lane.reset()
    assert info["seed"] == 11
    again, info = LaneSeeds.wrap(gym.make("CartPole-v1")).reset(seed=10)
    assert (first == again).all()
    _, info = lane.reset(seed=2**63 - 1)
    _, info = lane.reset()
    assert info["seed"] == 0  # mod 2^63
    _, info = LaneSeeds.wrap(gym.make("CartPole-v1")).reset()
    assert "seed" not in info  # no seed known: none reported


def test_SBX10_suite_and_task_selection() -> None:
    env: Any = object()
    assert _select(env, None, None) is env
    assert _select({"a": env}, None, None) is env
    assert _select({"a": {"t": env}}, "a", "t") is env
    assert _select({"a": {"t": env}}, None, None) is env  # sole entries are auto-selected
    with pytest.raises(ValueError, match="several suites"):
        _select({"a": env, "b": env}, None, None)
    with pytest.raises(ValueError, match="no task 'x'"):
        _select({"a": {"t": env}}, "a", "x")
