"""``rlmesh describe`` and ``python -m rlmesh._describe`` (AUTH-22, DELTA-54/55, CLI brief)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlmesh._cli.describe import main as describe_main, module_main as describe_module_main
from rlmesh.authoring import describe_json

HERE = Path(__file__).parent
TARGET = "authoring_targets:TinyFactory"


def canonical(target: str = TARGET, **kwargs: object) -> str:
    return describe_json(target, **kwargs)  # type: ignore[arg-type]


def test_describe_json_flag_prints_exactly_the_canonical_envelope(
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert describe_main([TARGET, "--json", "--generated-at", "2026-06-01T00:00:00Z"]) == 0
    out, err = capfd.readouterr()
    assert out == canonical(generated_at="2026-06-01T00:00:00Z") + "\n"
    assert "TinyFactory.make printed this" in err  # the target's prints went to stderr


def test_describe_default_output_is_a_readable_summary(capfd: pytest.CaptureFixture[str]) -> None:
    assert describe_main([TARGET]) == 0
    out = capfd.readouterr().out
    assert out.startswith("env  authoring_targets:TinyFactory\n")
    assert "observation_space: box(2,) float32" in out
    assert "size: int default=2 choices=[2, 3]" in out
    assert "variant small (Small): {'size': 2}" in out


def test_describe_label_prints_the_oci_label_line(capfd: pytest.CaptureFixture[str]) -> None:
    assert describe_main([TARGET, "--label"]) == 0
    out = capfd.readouterr().out
    assert out.startswith('dev.rlmesh.describe={"schema_version":1,"kind":"env",')


def test_describe_out_writes_the_file(tmp_path: Path) -> None:
    out = tmp_path / "describe.json"
    assert describe_main([TARGET, "--json", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == canonical() + "\n"


def test_describe_a_bare_callable_needs_kind(capfd: pytest.CaptureFixture[str]) -> None:
    assert describe_main(["authoring_targets:make_tiny"]) == 1
    err = capfd.readouterr().err
    assert err.startswith("Error: TypeError:") and "kind=" in err
    assert describe_main(["authoring_targets:make_tiny", "--kind", "env", "--json"]) == 0


def test_describe_reports_errors_in_one_line_and_exit_1(capfd: pytest.CaptureFixture[str]) -> None:
    assert describe_main(["no_such_module_xyz:Thing"]) == 1
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "no_such_module_xyz" in err
    assert describe_main([TARGET, "--generated-at", "yesterday"]) == 1
    assert "RFC-3339" in capfd.readouterr().err


def test_describe_accepts_a_file_path_target(capfd: pytest.CaptureFixture[str]) -> None:
    path = HERE / "authoring_targets.py"
    assert describe_main([f"{path}:TinyFactory", "--json"]) == 0
    assert json.loads(capfd.readouterr().out)["target"]["qualname"] == TARGET


def test_describe_rejects_a_bad_kind_at_parse_time() -> None:
    with pytest.raises(SystemExit) as ei:
        describe_main([TARGET, "--kind", "policy"])
    assert ei.value.code == 2


def test_module_cli_takes_exactly_one_mode() -> None:
    for argv in ([], [TARGET, "--env", TARGET], ["--env", TARGET, "--model", TARGET]):
        with pytest.raises(SystemExit) as ei:
            describe_module_main(argv)
        assert ei.value.code == 2


def test_module_cli_env_and_model_modes_print_the_canonical_json(
    capfd: pytest.CaptureFixture[str],
) -> None:
    assert describe_module_main(["--env", "authoring_targets:make_tiny"]) == 0
    assert capfd.readouterr().out == canonical("authoring_targets:make_tiny", kind="env") + "\n"
    assert describe_module_main(["--model", "authoring_targets:predict_zero"]) == 0
    assert json.loads(capfd.readouterr().out)["corners"] == ["predict"]


@pytest.mark.slow  # a fresh interpreter
def test_python_m_rlmesh_describe_imports_nothing_beyond_the_target() -> None:
    """A subprocess: describing a numpy-only factory must not import gymnasium (or torch/jax)."""
    script = (
        "import sys\n"
        "from rlmesh._cli.describe import module_main as describe_module_main\n"
        f"code = describe_module_main([{TARGET!r}])\n"
        "heavy = sorted(m for m in ('gymnasium', 'torch', 'jax', 'rich', 'PIL') if m in sys.modules)\n"
        "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run([sys.executable, "-c", script], cwd=HERE, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY=\n" in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["kind"] == "env" and doc["target"]["entrypoint"] == TARGET


@pytest.mark.slow  # a fresh interpreter
def test_python_m_rlmesh__describe_runs_as_a_module() -> None:
    proc = subprocess.run([sys.executable, "-m", "rlmesh._describe", "--env", TARGET, "--generated-at",
                           "2026-06-01T00:00:00Z"], cwd=HERE, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["generated_at"] == "2026-06-01T00:00:00Z" and proc.stdout.endswith("}\n")
    assert "TinyFactory.make printed this" in proc.stderr


@pytest.mark.slow  # a fresh interpreter
def test_importing_rlmesh_authoring_does_not_load_the_describe_machinery_AUTH_12() -> None:
    script = (
        "import sys, rlmesh.authoring as a\n"
        "assert 'rlmesh.authoring._describe' not in sys.modules\n"
        "assert callable(a.describe) and 'rlmesh.authoring._describe' in sys.modules\n"
        "assert 'describe' in dir(a)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
