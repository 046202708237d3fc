"""``WorkflowEditionWarning`` says in plain words what a workflow edition is and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlmesh._build as build
from rlmesh import WorkflowEditionWarning


def test_the_warning_explains_what_an_edition_is_and_how_to_pin_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("RLMESH_WORKFLOW_EDITION", raising=False)
    monkeypatch.chdir(tmp_path)  # no [tool.rlmesh] to find
    monkeypatch.setattr(build, "_warned", False)
    with pytest.warns(WorkflowEditionWarning) as caught:
        assert build.resolve_declared_edition(warn=True, who="the served env mine:Env") is None
    (warning,) = caught
    text = str(warning.message)
    assert text.startswith("the served env mine:Env declares no workflow edition")
    assert "A workflow edition is the dated set of behaviours" in text  # what it is
    assert "nothing changes today" in text and "keeps today's behaviour" in text  # why it matters
    assert 'workflow_edition="2026.06"' in text and "RLMESH_WORKFLOW_EDITION=''" in text  # the fix
