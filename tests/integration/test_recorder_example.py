"""``examples/record_eval.py`` runs as a user would run it and writes a browsable bundle (REC-3..9)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def test_record_eval_example_writes_a_bundle_with_videos_steps_and_index(tmp_path: Path) -> None:
    av = require("av", "video recording")
    out = tmp_path / "bundle"
    own_tmp = (
        tmp_path / "tmp"
    )  # not the machine's /tmp: what other programs left there is no concern here
    own_tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, "examples/record_eval.py", str(out)],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(own_tmp)},
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr
    assert "4 episodes" in proc.stdout and "index.html" in proc.stdout
    assert "Warning" not in proc.stderr
    doc = json.loads((out / "result.json").read_text())
    (workload,) = doc["workloads"]
    assert workload["numEpisodes"] == 4 and workload["metrics"]["successRate"] == 1.0
    for episode in workload["episodes"]:
        assert [m["camera"] for m in episode["media"]] == ["render", "camera"]
        for m in episode["media"]:
            with av.open(str(out / m["path"])) as container:
                frames = list(container.decode(video=0))
            # render(): the reset frame and one per step; a role: the observation of each step
            assert len(frames) == m["frameCount"] == episode["steps"] + (m["camera"] == "render")
            assert (frames[0].width, frames[0].height) == (96, 96)
        assert len((out / episode["stepLog"]).read_text().splitlines()) == episode["steps"]
    assert (out / "index.html").read_text().count("<video") == 8
