"""No frame ring outlives a killed recorder.

A recorder hands frames to its encoder process through a ring: a file in ``/dev/shm`` the
encoder maps and unlinks when it opens the video. A recorder killed at the start of an
episode, while its encoder is still busy (finishing the previous episode's video) and dies
with it (the whole process group killed: an OOM kill, a pre-emption), leaves that ring
behind. Here the encoder is held with SIGSTOP from the episode's start, so the window is
always open; ``orphans()`` and ``recover()`` must remove the ring of a dead recorder, and a
live recorder's rings must be left alone.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rlmesh.recorder as recorder
from conftest import require

pytestmark = pytest.mark.slow  # child processes and video encoding

ENVS = Path(__file__).resolve().parent.parent / "unit" / "recorder"

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
                print("HANGING", flush=True)
                threading.Event().wait(300)  # killed long before
            return super().step(action)

    rec = Recorder(staging_dir=sys.argv[1], codec="h264")
    hooks = rec.capture(model="pi", env="Cam-v0")
    rlmesh.run(rlmesh.RANDOM_SAMPLE, CamEnv(3), seeds=[10], hooks=hooks)
    print("ENCODER", rec._proc.proc.pid, flush=True)
    sys.stdin.readline()  # the test holds the encoder now
    rlmesh.run(rlmesh.RANDOM_SAMPLE, Hang(3), seeds=[12], hooks=hooks)
    """
)


def rings(pid: int) -> list[str]:
    dirs = ["/dev/shm", os.environ.get("TMPDIR", "/tmp")]
    return sorted(
        n
        for d in dirs
        if os.path.isdir(d)
        for n in os.listdir(d)
        if n.startswith(f"rlmesh-rec-{pid}-")
    )


def line(child: subprocess.Popen[bytes]) -> list[str]:
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], 120)
    assert ready, "the child said nothing"
    return child.stdout.readline().decode().split()


@pytest.mark.parametrize("cleanup", ["orphans", "recover"])
def test_a_ring_left_by_a_recorder_killed_at_an_episode_start_is_removed(
    tmp_path: Path, cleanup: str
) -> None:
    require("av", "video recording")
    stage = tmp_path / "stage"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(stage), str(ENVS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    encoder = 0
    try:
        said = line(child)
        assert said[:1] == ["ENCODER"], said
        encoder = int(said[1])
        os.kill(encoder, signal.SIGSTOP)  # busy: it will not get to open the next video
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert line(child) == ["HANGING"]
        assert rings(child.pid), "the episode's ring was not created"
        for pid in (child.pid, encoder):  # the recorder and its encoder die together
            os.kill(pid, signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        if encoder:
            try:
                os.kill(encoder, signal.SIGKILL)
            except ProcessLookupError:
                pass
    left = rings(child.pid)
    assert left, "the attack did not leave a ring behind"
    (staging,) = recorder.orphans(stage)  # (orphans() sweeps the dead recorder's rings)
    if cleanup == "recover":
        for name in left:  # put them back: recover() must sweep them by itself too
            Path("/dev/shm" if os.path.isdir("/dev/shm") else "/tmp", name).touch()
        recorder.recover(staging, tmp_path / "recovered")
    assert rings(child.pid) == []


def test_the_rings_of_a_live_recorder_are_left_alone(tmp_path: Path) -> None:
    mine = Path(
        "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp", f"rlmesh-rec-{os.getpid()}-test"
    )
    mine.write_bytes(b"\0" * 64)
    try:
        recorder.orphans(tmp_path)
        assert mine.exists()
    finally:
        mine.unlink()
