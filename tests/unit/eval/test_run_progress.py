"""``progress=``: the run's live line in one process, as ``workers=`` and the CLI draw it (issue 39 item 1).

Default: on when stderr is a terminal (or in Jupyter), once the run has gone on for
``SHOW_AFTER_SECONDS``; ``True`` always; ``False`` never. The line is computed from
finished episodes: the drive loop makes no call for it per step.
"""

from __future__ import annotations

import io
import os
import sys
import threading
from typing import Any

import numpy as np
import pytest

from conftest import require

require("gymnasium")

from eval_envs import CountEnv  # noqa: E402

import rlmesh  # noqa: E402
from rlmesh.eval import _progress  # noqa: E402
from rlmesh.eval._observers import HooksObserver, ObserverList  # noqa: E402
from rlmesh.eval._progress import RunProgress  # noqa: E402

EVAL_DIR = os.path.dirname(os.path.abspath(_progress.__file__)) + os.sep


class Stream(io.StringIO):
    """A stream that says whether it is a terminal and signals each write."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty
        self.wrote = threading.Event()

    def isatty(self) -> bool:
        return self.tty

    def write(self, s: str) -> int:
        n = super().write(s)
        self.wrote.set()
        return n


class WaitsForTheLine(CountEnv):
    """Its first step waits (at most 10 s) until the progress line was drawn on ``stream``."""

    def __init__(self, stream: Stream, length: int = 3) -> None:
        super().__init__(length, success=True)
        self.stream = stream

    def step(self, action: Any) -> Any:
        if not self.actions:
            assert self.stream.wrote.wait(10.0), "the progress line was never drawn"
        return super().step(action)


def policy(obs: Any) -> Any:
    return np.zeros(1, np.float32)


def test_progress_true_draws_the_line_wherever_stderr_goes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = rlmesh.run(policy, CountEnv(4, success=True), seeds=range(3), progress=True)
    assert result.num_episodes == 3
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines, "progress=True printed nothing"
    final = lines[-1]  # stderr is no terminal: plain lines, the final one last
    assert (
        final.startswith("episodes 3/3 | ") and " steps/s | " in final and " ep/s | ETA " in final
    )
    assert final.endswith("success 100% (95% CI 44%-100%)")
    assert "workers" not in final  # one process


def test_by_default_nothing_is_drawn_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rlmesh.run(policy, CountEnv(2), seeds=range(2))
    rlmesh.numpy.Model(policy).run(CountEnv(2), seeds=range(2))
    with rlmesh.session(policy, CountEnv(2)) as sess:
        sess.run(seeds=range(2))
    assert capsys.readouterr().err == ""


def test_progress_false_draws_nothing_even_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = Stream(tty=True)
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(_progress, "SHOW_AFTER_SECONDS", 0.0)
    rlmesh.run(policy, CountEnv(2), seeds=range(2), progress=False)
    assert tty.getvalue() == ""


def test_by_default_a_terminal_shows_the_line_once_the_run_has_gone_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tty = Stream(tty=True)
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(_progress, "SHOW_AFTER_SECONDS", 0.0)  # "gone on long enough" at once
    result = rlmesh.run(policy, WaitsForTheLine(tty), seeds=range(2))
    assert result.num_episodes == 2
    text = tty.getvalue()
    assert "episodes 0/2 | " in text  # drawn while the first episode ran
    assert "episodes 2/2 | " in text  # and the final line left behind


def test_by_default_a_run_quicker_than_the_delay_prints_nothing_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tty = Stream(tty=True)
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(_progress, "SHOW_AFTER_SECONDS", 3600.0)
    with rlmesh.session(policy, CountEnv(3)) as sess:
        sess.run(seeds=range(4))
    assert tty.getvalue() == ""


def test_in_jupyter_the_line_is_redrawn_in_place_with_a_carriage_return(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = Stream(tty=False)  # a kernel's stderr is no terminal
    monkeypatch.setattr(_progress, "in_jupyter", lambda: True)
    monkeypatch.setattr(_progress, "SHOW_AFTER_SECONDS", 0.0)
    line = RunProgress(2, enabled=None, out=out)
    assert line.enabled
    line.start()
    assert out.wrote.wait(10.0)
    for _ in range(2):
        line.update(episode=rlmesh.EpisodeResult(0, 0, 5, 1.0, True, False, success=False))
    line.close()
    text = out.getvalue()
    assert text.startswith("\repisodes 0/2 | ") and text.endswith("\n")
    assert "\repisodes 2/2 | " in text and "\x1b" not in text
    assert text.count("\n") == 1  # one line, redrawn


def test_progress_takes_only_true_false_or_none() -> None:
    with pytest.raises(TypeError, match="progress= takes True, False or None"):
        rlmesh.run(policy, CountEnv(2), progress="yes")  # type: ignore[arg-type]


def _eval_calls(monkeypatch: pytest.MonkeyPatch, progress: bool | None, length: int) -> int:
    """Python calls into rlmesh/eval/ on this thread during one episode of ``length`` steps."""
    monkeypatch.setattr(sys, "stderr", Stream(tty=True))  # the default is on...
    monkeypatch.setattr(_progress, "SHOW_AFTER_SECONDS", 3600.0)  # ...and never draws here
    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call" and frame.f_code.co_filename.startswith(EVAL_DIR):
            calls += 1

    with rlmesh.session(policy, CountEnv(length)) as sess:
        sess.run(max_episodes=1)  # connect and warm up outside the count
        sys.setprofile(count)
        try:
            sess.run(max_episodes=1, progress=progress)
        finally:
            sys.setprofile(None)
    return calls


def test_the_line_costs_the_drive_loop_no_call_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    extra_short = _eval_calls(monkeypatch, None, 20) - _eval_calls(monkeypatch, False, 20)
    extra_long = _eval_calls(monkeypatch, None, 200) - _eval_calls(monkeypatch, False, 200)
    assert 0 < extra_short < 30  # a few calls per run (start, one per episode, close) ...
    assert extra_long == extra_short  # ... and none per step


def test_hooks_without_on_step_are_not_called_per_step() -> None:
    class EpisodesOnly(rlmesh.RunHooks):
        def on_episode_end(self, result: Any) -> None:
            pass

    class Steps(rlmesh.RunHooks):
        def on_step(self, event: Any) -> None:
            pass

    assert not ObserverList([HooksObserver(EpisodesOnly())]).wants_steps
    assert ObserverList([HooksObserver(Steps())]).wants_steps
    assert ObserverList([HooksObserver(Steps())]).wants_events
