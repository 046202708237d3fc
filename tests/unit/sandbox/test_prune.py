"""``rlmesh sandbox prune`` (issue 29 item 9): removes the caches rlmesh made, refuses everything else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sbx_fakes import fake_docker_fixture  # noqa: F401  (the fake_docker fixture)

from rlmesh.cli import main as cli_main
from rlmesh.sandbox._docker import DockerCLI
from rlmesh.sandbox._prune import prune
from rlmesh.sandbox._venv import READY_MARKER

pytestmark = pytest.mark.slow  # sandbox (child processes): kept out of make test-fast


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    venvs = root / "venv"
    venvs.mkdir(parents=True)
    monkeypatch.setenv("RLMESH_SANDBOX_CACHE", str(root))
    for name in ("gym-aaa", "gym-bbb"):
        (venvs / name / "bin").mkdir(parents=True)
        (venvs / name / READY_MARKER).write_text(json.dumps({"venv": name}))
        (venvs / name / "lib.bin").write_bytes(b"x" * 1000)
        (venvs / f"{name}.build.log").write_text("log")
        (venvs / f".{name}.lock").write_text("")
    (venvs / f".gym-ccc.tmp-{_dead_pid()}").mkdir()  # a builder that died half-way
    (venvs / f".gym-ddd.tmp-{os.getpid()}").mkdir()  # one being built right now
    (venvs / "my-project-env").mkdir()  # the user's: no marker
    (venvs / "my-project-env" / "keep.txt").write_text("mine")
    (venvs / "notes.txt").write_text("mine too")
    return venvs


def test_prune_removes_only_the_venvs_rlmesh_made(cache: Path) -> None:
    report = prune(docker=False)
    assert sorted(p.name for p in cache.iterdir()) == [
        ".gym-ddd.tmp-" + str(os.getpid()),
        "my-project-env",
        "notes.txt",
    ]
    assert (cache / "my-project-env" / "keep.txt").read_text() == "mine"
    assert sorted(report.foreign) == sorted(
        [str(cache / "my-project-env"), str(cache / "notes.txt")]
    )
    assert report.freed_bytes >= 2000 and not report.errors
    assert any("being built" in k for k in report.kept)


def test_a_dry_run_removes_nothing(cache: Path) -> None:
    before = sorted(p.name for p in cache.iterdir())
    report = prune(dry_run=True, docker=False)
    assert sorted(p.name for p in cache.iterdir()) == before
    assert any("gym-aaa" in r for r in report.removed)


def test_a_venv_in_use_is_kept(cache: Path) -> None:
    python = cache / "gym-aaa" / "bin" / "python"
    python.symlink_to(sys.executable)
    proc = subprocess.Popen([str(python), "-c", "import time; time.sleep(30)"])
    try:
        # Popen returns once the child exec'd, but its argv shows in /proc a moment later
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        for _ in range(500):  # bounded: 5 s
            if cmdline.read_bytes().startswith(str(python).encode()):
                break
            time.sleep(0.01)
        report = prune(docker=False)
        assert (cache / "gym-aaa").is_dir() and not (cache / "gym-bbb").exists()
        assert any("in use" in k for k in report.kept)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_docker_prune_removes_labelled_stopped_containers_and_images_only(
    fake_docker: Any, cache: Path
) -> None:
    fake_docker.on("version", {"stdout": "27.0\n"})
    fake_docker.on(
        "ps", {"stdout": "c1\texited\trlmesh-sandbox-a\nc2\trunning\trlmesh-sandbox-b\n"}
    )
    fake_docker.on(
        "image ls", {"stdout": "i1\trlmesh-sandbox/gym:abc\ni2\trlmesh-sandbox/gym:def\n"}
    )
    fake_docker.on(
        "rmi",
        {"rc": 0},
        {"rc": 1, "stderr": "conflict: image is being used by running container c2\n"},
    )
    report = prune(venvs=False, cli=DockerCLI())
    calls = fake_docker.calls()
    ps = next(c for c in calls if c[0] == "ps")
    ls = next(c for c in calls if c[:2] == ["image", "ls"])
    assert (
        "label=rlmesh.sandbox=1" in ps and "label=rlmesh.sandbox.image=1" in ls
    )  # only what we labelled
    assert [c for c in calls if c[0] == "rm"] == [["rm", "c1"]]  # never the running one, never -f
    assert [c[1] for c in calls if c[0] == "rmi"] == [
        "rlmesh-sandbox/gym:abc",
        "rlmesh-sandbox/gym:def",
    ]
    assert (
        "container rlmesh-sandbox-a" in report.removed
        and "image rlmesh-sandbox/gym:abc" in report.removed
    )
    assert any("being used" in k for k in report.kept) and any("running" in k for k in report.kept)


def test_the_cli_prunes_and_reports(
    cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMESH_DOCKER", "definitely-not-docker-here")
    assert cli_main(["sandbox", "prune", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would remove: venv" in out and "not created by rlmesh, left alone" in out
    assert (cache / "gym-aaa").exists()
    assert cli_main(["sandbox", "prune", "--venvs-only"]) == 0
    assert not (cache / "gym-aaa").exists() and (cache / "my-project-env").exists()
