"""EnvFleet refuses bad arguments before touching Ray (no Ray needed: these run in the main suite)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from rlmesh.ray import EnvFleet


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("CartPole-v1", 0), {}, ValueError, "n must be >= 1"),
        (("CartPole-v1", "2"), {}, TypeError, "n must be an int"),
        (("CartPole-v1", 2), {"lanes": 0}, ValueError, "lanes must be >= 1"),
        ((42, 2), {}, TypeError, "env must be a Gymnasium id"),
        (("  ", 2), {}, ValueError, "env must name an env"),
        (("CartPole-v1", 2), {"max_restarts": -2}, ValueError, "max_restarts must be an int >= -1"),
        (("CartPole-v1", 2), {"resources": {"CPU": -1}}, ValueError, "resource 'CPU' must be a finite amount"),
        (("CartPole-v1", 2), {"resources": ["CPU"]}, TypeError, "resources must be a mapping"),
        (("CartPole-v1", 2), {"autoreset": "same-step"}, ValueError, "autoreset applies to lanes > 1"),
        (("CartPole-v1", 2), {"env_kwargs": [1]}, TypeError, "env_kwargs must be a mapping"),
        (("CartPole-v1", 2), {"options": {"idle": 1}}, TypeError, "options must be a ServeOptions"),
        (("CartPole-v1", 2), {"start_timeout_seconds": 0}, ValueError, "start_timeout_seconds must be positive"),
        (("CartPole-v1", 2), {"actor_options": {"lifetime": "detached"}}, ValueError, "never detached"),
        ((lambda: None, 2), {"sandbox": "venv"}, TypeError, "sandbox source string"),
        (("gym://CartPole-v1", 2), {"sandbox": {"image": "x"}}, TypeError, "sandbox= takes the keys"),
    ],
)
def test_bad_arguments_are_refused_with_a_clear_error(args: Any, kwargs: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        EnvFleet(*args, **kwargs)


def test_importing_rlmesh_ray_does_not_import_ray() -> None:
    code = "import sys, rlmesh, rlmesh.ray; print('ray' in sys.modules, 'gymnasium' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "False"]
