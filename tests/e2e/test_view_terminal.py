"""The terminal viewer in a real terminal: tmux draws the picture and the HUD, keys work, the TTY is restored (VIEW-11..15)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import require_tool

pytestmark = pytest.mark.e2e

BOUND = 60.0

SCRIPT = textwrap.dedent(
    """
    import sys, termios, time
    import numpy as np
    import rlmesh
    from rlmesh.numpy import Model
    from rlmesh.view._synthetic import CounterEnv

    before = termios.tcgetattr(0)
    def paced(obs):
        time.sleep(0.004)
        return np.zeros(2, np.float32)

    episodes = []
    hooks = type("H", (rlmesh.RunHooks,), {"on_episode_end": lambda self, r: episodes.append(r)})()
    try:
        result = rlmesh.run(Model(paced), CounterEnv(160, 120, cameras=2, episode_steps=100000), max_episodes=3,
                            view=rlmesh.View("terminal", fps=20), hooks=hooks)
        print("RUN-ENDED", result.num_episodes)
    except KeyboardInterrupt as exc:
        print("QUIT", exc)
    print("EPISODES", len(episodes), "TRUNCATED", all(e.truncated for e in episodes))
    print("TTY-RESTORED", termios.tcgetattr(0) == before)
    sys.stdout.flush()
    time.sleep(60)
    """
)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Callable[..., str]]:
    exe = require_tool("tmux", "the terminal viewer test drives a real terminal")
    sock = f"rlmesh-view-{uuid.uuid4().hex[:8]}"

    def call(*args: str) -> str:
        return subprocess.run(
            [exe, "-L", sock, *args], capture_output=True, text=True, timeout=BOUND, check=False
        ).stdout

    try:
        yield call
    finally:
        call("kill-server")  # our private server only (its own socket name)


def _wait_for(
    tmux: Callable[..., str], pred: Callable[[str], bool], *, escapes: bool = False
) -> str:
    deadline = time.monotonic() + BOUND
    screen = ""
    while time.monotonic() < deadline:
        screen = tmux("capture-pane", "-p", *(["-e"] if escapes else []), "-t", "view")
        if pred(screen):
            return screen
        time.sleep(0.1)
    raise AssertionError(f"the pane never showed what was expected; last screen:\n{screen}")


def test_terminal_viewer_draws_reacts_to_keys_and_restores_the_terminal(
    tmux: Callable[..., str], tmp_path: Path
) -> None:
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TERM": "xterm-256color"}
    cmd = f"{sys.executable} {script}"
    tmux(
        "new-session",
        "-d",
        "-s",
        "view",
        "-x",
        "100",
        "-y",
        "30",
        "-e",
        f"PYTHONPATH={env['PYTHONPATH']}",
        cmd,
    )
    screen = _wait_for(tmux, lambda s: s.count("▀") > 500 and "step" in s)
    # the picture (half-blocks), the source row with the selected one bracketed, the hint, the HUD
    assert "[render]" in screen and "cam0" in screen and "cam1" in screen
    assert "q quit" in screen and "n skip ep" in screen
    assert "ep 1/3" in screen and "R +" in screen
    colour = tmux("capture-pane", "-p", "-e", "-t", "view")
    assert "38;2;" in colour and "48;2;" in colour  # truecolor foreground/background pairs
    tmux("send-keys", "-t", "view", "Right")  # next camera
    _wait_for(tmux, lambda s: "[cam0]" in s)
    tmux("send-keys", "-t", "view", "3")  # the third camera
    _wait_for(tmux, lambda s: "[cam1]" in s)
    tmux("send-keys", "-t", "view", "n")  # skip episode 1
    _wait_for(tmux, lambda s: "ep 2/3" in s)
    tmux("send-keys", "-t", "view", "q")  # quit
    screen = _wait_for(tmux, lambda s: "TTY-RESTORED" in s)
    assert "RUN-ENDED 1" in screen and "QUIT" not in screen  # quit returns the finished episodes
    assert "EPISODES 1 TRUNCATED True" in screen
    assert "TTY-RESTORED True" in screen
    assert "▀" not in screen  # the alternate screen is gone: the shell's screen is back
