"""WorkflowEditionWarning: shown only where the user can act, and its suggested fix works.

Each case runs in a fresh interpreter (the warning fires at most once per process) from an
empty directory (no ``[tool.rlmesh]`` found) with nothing declared in the environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

USER_ENV = """
import gymnasium as gym
class Mine(gym.Env):
    observation_space = gym.spaces.Discrete(3)
    action_space = gym.spaces.Discrete(2)
"""


def _stderr(code: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "RLMESH_WORKFLOW_EDITION"}
    script = (
        "import warnings; warnings.simplefilter('always')\nimport rlmesh, gymnasium as gym\n" + code
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert out.returncode == 0, out.stderr
    return out.stderr


def test_serving_gymnasiums_own_env_does_not_warn(tmp_path: Path) -> None:
    code = (
        "rlmesh.EnvServer(gym.make('CartPole-v1'), '127.0.0.1:0').shutdown()\n"
        "rlmesh.EnvServer(gym.make_vec('CartPole-v1', num_envs=2), '127.0.0.1:0').shutdown()\n"
    )
    assert "WorkflowEditionWarning" not in _stderr(code, tmp_path)


def test_the_users_own_env_warns_and_the_suggested_fix_silences_it(tmp_path: Path) -> None:
    text = _stderr(USER_ENV + "rlmesh.EnvServer(Mine(), '127.0.0.1:0').shutdown()\n", tmp_path)
    assert "WorkflowEditionWarning" in text
    fix = 'options=rlmesh.ServeOptions(workflow_edition="2026.06")'
    assert fix in text
    fixed = USER_ENV + f"rlmesh.EnvServer(Mine(), '127.0.0.1:0', {fix}).shutdown()\n"
    assert "WorkflowEditionWarning" not in _stderr(fixed, tmp_path)
