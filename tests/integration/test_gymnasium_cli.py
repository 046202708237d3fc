"""Command-line surprises of issue 12: autoreset flag, edition warning only where the user can act."""

from __future__ import annotations

import pytest

from conftest import child_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def _stderr_of(serve_process, short_tmp, target: str) -> str:
    env = child_env()
    env.pop("RLMESH_WORKFLOW_EDITION")  # as a user runs it: nothing declared anywhere
    proc, _ = serve_process(target, env=env)
    errs = sorted(short_tmp.glob("proc*.err"))
    return errs[-1].read_text()


def test_serving_a_plain_gymnasium_id_does_not_warn_about_the_edition(serve_process, short_tmp):
    assert "WorkflowEditionWarning" not in _stderr_of(serve_process, short_tmp, "CartPole-v1")


def test_serving_the_users_own_env_warns_and_names_the_flag(serve_process, short_tmp):
    text = _stderr_of(serve_process, short_tmp, "integration_envs:make_countdown")
    assert "WorkflowEditionWarning" in text and "--workflow-edition 2026.06" in text
