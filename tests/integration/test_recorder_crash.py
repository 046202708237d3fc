"""A recording process killed with SIGKILL leaves a recoverable bundle (issue 28 item 2).

A child process records two finished episodes, starts a third whose env never returns
from ``step``, says so on stdout, and is killed with ``SIGKILL`` (an OOM kill or a
pre-emption). Its staging dir holds the journal of the finished episodes beside their
media: ``orphans`` lists it, ``ResultSet.load`` says it is not a bundle yet, a new
recorder warns that it is there, and ``recover`` turns it into a bundle whose videos
decode; the in-flight episode is not in it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import rlmesh.recorder as recorder
from conftest import require
from rlmesh.recorder import Recorder, ResultSet

pytestmark = pytest.mark.slow  # child processes or video encoding

HERE = Path(__file__).resolve().parent
ENVS = HERE.parent / "unit" / "recorder"

CHILD = textwrap.dedent(
    """
    import sys, threading
    sys.path.insert(0, sys.argv[2])
    import rlmesh
    from recorder_envs import CamEnv
    from rlmesh.recorder import Recorder

    class Hang(CamEnv):
        def step(self, action):
            if self.t == 1:
                print("HANGING", rec._proc.proc.pid, rec._staging, flush=True)
                threading.Event().wait(300)  # killed long before
            return super().step(action)

    rec = Recorder(staging_dir=sys.argv[1], codec="h264")
    hooks = rec.capture(model="pi", env="Cam-v0", config={"ckpt": 7})
    rlmesh.run(rlmesh.RANDOM_SAMPLE, CamEnv(3), seeds=[10, 11], hooks=hooks)
    rlmesh.run(rlmesh.RANDOM_SAMPLE, Hang(3), seeds=[12], hooks=hooks)
    """
)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _decode(path: Path) -> int:
    import av

    with av.open(str(path)) as container:
        return sum(1 for _ in container.decode(video=0))


def test_a_sigkilled_recording_is_recovered_from_its_journal(tmp_path: Path) -> None:
    require("av", "video recording")
    stage = tmp_path / "stage"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(stage), str(ENVS)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    encoder_pid = 0
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 120)
        assert ready, "the child never reached its hanging step"
        line = child.stdout.readline().decode().split()
        assert line[:1] == ["HANGING"], line
        encoder_pid, staging = int(line[1]), Path(line[2])
        child.send_signal(signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    for _ in range(600):  # the encoder process sees its pipe close and finishes its files
        if _gone(encoder_pid):
            break
        time.sleep(0.05)
    assert _gone(encoder_pid), "the encoder process outlived its killed owner"

    # What is on disk: visibly partial, listed, and announced to the next recorder.
    assert (staging / "journal.jsonl").is_file() and not (staging / "result.json").exists()
    with pytest.raises(FileNotFoundError, match="recover"):
        ResultSet.load(staging)
    assert recorder.orphans(stage) == [staging]
    with pytest.warns(UserWarning, match="1 staging dir"), Recorder(staging_dir=stage) as other:
        other.capture(model="x", env="y", cameras=[])

    out = recorder.recover(staging, tmp_path / "recovered")
    doc = json.loads((out / "result.json").read_text())
    assert doc["partial"] is True
    (w,) = doc["workloads"]
    assert (w["model"], w["config"]) == ("pi", {"ckpt": 7})
    assert [e["seed"] for e in w["episodes"]] == [10, 11]  # the in-flight episode is not there
    for e in w["episodes"]:
        (m,) = e["media"]
        assert _decode(out / m["path"]) == m["frameCount"] == 4
        assert len((out / e["stepLog"]).read_text().splitlines()) == 3
    assert (out / "index.html").is_file()
    assert not staging.exists() and recorder.orphans(stage) == []  # recovered: no pile-up
