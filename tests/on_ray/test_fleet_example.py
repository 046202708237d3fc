"""examples/train/ppo_fleet.py trains on a Ray fleet end to end (a short run, as a user would)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require, require_ray

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    require_ray()
    require("torch", "the PPO example")
    env = {**os.environ, "RLMESH_WORKFLOW_EDITION": "", "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "examples/train/ppo_fleet.py", "--total-timesteps", "2048", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_ppo_trains_on_one_actor_serving_four_lanes() -> None:
    out = run_example("--actors", "1", "--lanes", "4")
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"1 actors serving in [\d.]+s at 127\.0\.0\.1:\d+", out.stdout)
    assert re.search(r"\d+ episodes, mean return of the last \d+: [\d.]+", out.stdout)


def test_the_fleet_run_sees_the_same_episodes_as_make_vec() -> None:
    fleet = run_example("--actors", "1", "--lanes", "4")
    local = run_example("--local", "--actors", "1", "--lanes", "4")
    assert fleet.returncode == 0 and local.returncode == 0, (
        fleet.stderr[-2000:] + local.stderr[-2000:]
    )
    summary = re.compile(r"(\d+ episodes, mean return of the last \d+: [\d.]+)")
    assert summary.search(fleet.stdout).group(1) == summary.search(local.stdout).group(1)  # type: ignore[union-attr]


def test_ppo_trains_on_the_default_four_actor_fleet() -> None:
    out = run_example()
    assert out.returncode == 0, out.stderr[-3000:]
    assert "4 actors serving" in out.stdout and "episodes, mean return" in out.stdout
