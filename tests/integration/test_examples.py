"""The examples the README points at run end to end (as a user would run them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def run(args: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run an example as a user would: nothing silences the edition warning, and none shows."""
    env = {k: v for k, v in os.environ.items() if k != "RLMESH_WORKFLOW_EDITION"}
    out = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=150
    )
    assert "WorkflowEditionWarning" not in out.stderr, out.stderr  # the examples declare theirs
    return out


def test_quickstart_serves_cartpole_drives_it_and_evaluates_a_policy() -> None:
    out = run(["examples/quickstart.py"])
    assert out.returncode == 0, out.stderr
    assert "s over tcp://127.0.0.1:" in out.stdout and "µs a step" in out.stdout
    assert "10 episodes" in out.stdout and "server stopped" in out.stdout


def test_adapters_example_pairs_a_spec_d_policy_with_a_tagged_env_without_glue() -> None:
    out = run(["examples/adapters/run.py"])
    assert out.returncode == 0, out.stderr
    assert '"proprio" <- concat(ee_pos, ee_quat (quat_xyzw->rot6d), grip)' in out.stdout
    assert '"action/delta_eef_rot" <- model[3:9] (rot6d->axis_angle)' in out.stdout
    assert "success rate" in out.stdout


def test_factory_example_describes_without_serving() -> None:
    out = run(
        ["-m", "rlmesh.cli", "describe", "point_reach:PointReachFactory"],
        cwd=ROOT / "examples" / "factory",
    )
    assert out.returncode == 0, out.stderr
    assert "variant easy/center" in out.stdout and "variant hard/corner" in out.stdout


def test_factory_example_serves_from_its_folder_with_a_param(tmp_path: Path) -> None:
    """README: `rlmesh serve point_reach:PointReachFactory --param difficulty=hard` from examples/factory."""
    import time

    import rlmesh.numpy as rn

    ready = tmp_path / "addr"
    env = {**os.environ, "RLMESH_WORKFLOW_EDITION": ""}
    cmd = [
        sys.executable,
        "-m",
        "rlmesh.cli",
        "serve",
        "point_reach:PointReachFactory",
        "--address",
        "127.0.0.1:0",
        "--param",
        "difficulty=hard",
        "--ready-file",
        str(ready),
        "--allow-remote-shutdown",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT / "examples" / "factory",
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (
                proc.stderr.read() if proc.stderr else b""
            )
            time.sleep(0.05)
        client = rn.RemoteEnv(ready.read_text().strip())
        assert client.metadata["rlmesh.params.v1.binding"]["binding"] == {"difficulty": "hard"}
        client.reset(seed=0)
        assert client.shutdown()
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
