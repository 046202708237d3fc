"""Envelope and label checks behind ``python -m rlmesh._describe --check*`` (AUTH-22, DELTA-54)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlmesh._cli.describe import module_main as describe_module_main
from rlmesh._describe import CheckReport, check_labels, check_target
from rlmesh.authoring import describe_json


def labels_for(doc: Any, **extra: str) -> dict[str, str]:
    return {"dev.rlmesh.describe": doc if isinstance(doc, str) else json.dumps(doc), **extra}


def test_CheckReport_is_ok_only_without_failures_and_renders_a_summary() -> None:
    r = CheckReport(warnings=["w"], passed=["p"])
    assert r.ok and r.to_dict() == {
        "failed": [],
        "warnings": ["w"],
        "not_checked": [],
        "passed": ["p"],
    }
    r.failed.append("f")
    assert not r.ok
    assert r.render("img").splitlines() == [
        "FAIL: f",
        "warn: w",
        "ok: p",
        "FAIL: img: 1 failed, 1 warnings, 0 not checked",
    ]


def test_a_missing_describe_label_is_not_checked_not_failed() -> None:
    r = check_labels({})
    assert r.ok and r.not_checked == ["no dev.rlmesh.describe label"]


@pytest.mark.parametrize(
    ("raw", "match"),
    [("{not json", "not valid JSON"), ({"schema_version": 2, "kind": "env"}, "schema_version must be 1"),
     ({"schema_version": 1, "kind": "policy"}, "kind must be")],
)  # fmt: skip
def test_a_malformed_envelope_fails(raw: Any, match: str) -> None:
    r = check_labels(labels_for(raw))
    assert not r.ok and match in r.failed[0]


def test_an_env_without_tags_fails_and_error_badges_warn() -> None:
    doc = json.loads(describe_json("authoring_targets:TinyFactory"))
    doc["variants"]["catalog"][0]["error"] = "size: 9 not in choices"
    r = check_labels(labels_for(doc))
    assert any("publishes no adapter tags" in m for m in r.failed)
    assert any("variant 'small'" in m for m in r.warnings)


def test_a_missing_dependency_badge_fails_a_baked_label_but_is_not_checked_for_a_class() -> None:
    doc = {"schema_version": 1, "kind": "env", "env_spec": {"error": "No module named 'mujoco'",
           "error_type": "ModuleNotFoundError"}, "env_tags": None}  # fmt: skip
    assert any("mujoco" in m for m in check_labels(labels_for(doc)).failed)

    from rlmesh.authoring import EnvFactory

    class NeedsMujoco(EnvFactory):
        def make(self) -> Any:
            import mujoco_not_installed_here  # noqa: F401

    r = check_target(NeedsMujoco)
    assert any("mujoco_not_installed_here" in m for m in r.not_checked)


def test_an_undrivable_edition_fails_and_a_missing_one_is_not_checked() -> None:
    base = {"schema_version": 1, "kind": "model", "model_spec": None}
    r = check_labels(labels_for({**base, "runtime": {"supported_workflow_editions": ["2026.06"],
                                                      "workflow_edition_error": "cannot drive"}}))  # fmt: skip
    assert "workflow edition: cannot drive" in r.failed
    assert any("carries none" in m for m in check_labels(labels_for(base)).not_checked)
    assert any("no class-level spec" in m for m in check_labels(labels_for(base)).warnings)


def test_the_package_label_is_validated() -> None:
    pkg = {"schemaVersion": 1, "checkpoints": [{"name": "Bad_Name", "uri": "s3://x"}, {"name": "ok"},
                                               {"name": "a", "uri": "u", "default": True},
                                               {"name": "b", "uri": "u", "default": True}, 3]}  # fmt: skip
    r = check_labels({"dev.rlmesh.package": json.dumps(pkg)})
    assert any("'Bad_Name' is not a DNS label" in m for m in r.failed)
    assert any("'ok' has no uri" in m for m in r.failed)
    assert any("checkpoint 4 must be an object" in m for m in r.failed)
    assert any("2 checkpoints as default" in m for m in r.warnings)
    assert (
        "schemaVersion must be 1"
        in check_labels({"dev.rlmesh.package": '{"schemaVersion": 2}'}).failed[0]
    )


def test_module_cli_check_labels_prints_a_report_and_exits_1_on_failure(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({}), encoding="utf-8")
    assert describe_module_main(["--check-labels", str(path)]) == 0
    assert (
        capfd.readouterr().out.splitlines()[-1]
        == f"ok: {path}: 0 failed, 0 warnings, 1 not checked"
    )
    path.write_text(json.dumps(labels_for("{bad")), encoding="utf-8")
    assert describe_module_main(["--check-labels", str(path), "--json"]) == 1
    assert "not valid JSON" in json.loads(capfd.readouterr().out)["failed"][0]


def test_module_cli_check_entrypoint_describes_and_checks(
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert describe_module_main(["--check-entrypoint", "authoring_targets:TinyFactory"]) == 1
    out = capfd.readouterr().out
    assert "FAIL: the env publishes no adapter tags" in out
    assert out.splitlines()[-1].startswith("FAIL: authoring_targets:TinyFactory: 1 failed")


def test_auth_check_an_ad_hoc_role_warns_and_registered_or_x_roles_do_not_DELTA_54_61() -> None:
    """CNF2 seed gap: the check API's ad-hoc-role advisory (a warning, never a failure)."""
    import rlmesh.adapters as A

    def check(*roles: str) -> CheckReport:
        spec = A.ModelSpec(
            {f"s{i}": A.State(role, dim=2) for i, role in enumerate(roles)},
            A.Action(A.Actuator("x/move", 2)),
        )
        doc = {"schema_version": 1, "kind": "model", "model_spec": spec.to_dict()}
        return check_labels(labels_for(doc))

    adhoc = check(A.EEF_POS, "proprio/wrist_torque_estimate", "x/my_sensor")
    assert adhoc.ok
    warned = [m for m in adhoc.warnings if "ad-hoc role" in m]
    assert (
        len(warned) == 1
        and '"proprio/wrist_torque_estimate"' in warned[0]
        and '"x/" namespace' in warned[0]
    )
    assert not [m for m in check(A.EEF_POS, "x/my_sensor").warnings if "ad-hoc role" in m]
