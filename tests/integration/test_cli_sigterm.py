"""Every command honours SIGTERM the same way: stop, keep what is done, exit 143.

``kill``, ``docker stop``, SLURM and systemd send SIGTERM. A watched eval of an env that
renders through pygame used to ignore it: SDL takes SIGTERM over on first use when
nobody handles it. The commands now handle it themselves (``rlmesh._cli._signals``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import journaled, require, wait_gone

pytestmark = pytest.mark.slow  # child processes

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rlmesh(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rlmesh.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": str(HERE), **(env or {})},
    )


class Lines:
    """Collects a child's stdout lines on a thread, so the test can wait for some."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    def wait_for(self, predicate: object, proc: subprocess.Popen[str], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if predicate(self.lines):  # type: ignore[operator]
                return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"the command did not get going: {self.lines[-5:]}")


def wait_file(path: Path, proc: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            _, err = proc.communicate(timeout=10) if proc.poll() is not None else ("", "")
            raise AssertionError(f"the run did not start: {err[-2000:]}")
        time.sleep(0.05)


def terminate(proc: subprocess.Popen[str], seconds: float = 30) -> int | None:
    """SIGTERM once; the exit status, or ``None`` (killed) when it ignored the signal."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        return None


def test_watched_eval_stops_on_one_sigterm_when_render_takes_the_signal(tmp_path: Path) -> None:
    require("aiohttp", "the http viewer")
    mark, out = tmp_path / "rendering", tmp_path / "result.json"
    proc = rlmesh(
        "eval", "random", "signal_envs:signal_taking_env", "--episodes", "1000000",
        "--view", f"http:{free_port()}", "--no-progress", "--json", str(out),
        env={"RLMESH_TEST_MARK": str(mark)},
    )  # fmt: skip
    try:
        wait_file(mark, proc)
        code = terminate(proc)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 143, f"SIGTERM ignored or mishandled (status {code}): {err[-1500:]}"
    assert "terminated (SIGTERM)" in err
    episodes = json.loads(out.read_text())["result"]["episodes"]
    assert len(episodes) >= 2  # 20 renders happened: the finished episodes are written
    assert all(e["steps"] == 10 for e in episodes)  # only finished ones, none cut short


def test_watched_cartpole_eval_with_pygame_stops_on_one_sigterm(tmp_path: Path) -> None:
    """The case users hit: CartPole rendered by pygame, watched in the browser."""
    require("aiohttp", "the http viewer")
    require("pygame", 'CartPole renders with pygame (the "render" extra)')
    out = tmp_path / "result.json"
    proc = rlmesh(
        "eval", "random", "CartPole-v1", "--episodes", "1000000",
        "--view", f"http:{free_port()}", "--json", str(out),
    )  # fmt: skip
    lines = Lines(proc)
    try:
        # per-episode lines (stdout is not a terminal): the viewer has rendered by then
        lines.wait_for(lambda ls: sum(x.startswith("episode #") for x in ls) >= 6, proc, 90)
        code = terminate(proc)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 143, f"SIGTERM ignored or mishandled (status {code}): {err[-1500:]}"
    assert json.loads(out.read_text())["result"]["episodes"]


def test_distributed_eval_stops_its_workers_and_keeps_the_journal(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    proc = rlmesh(
        "eval", "random", "CartPole-v1", "--seeds", "0..99999", "--workers", "2",
        "--journal", str(journal), "--no-progress",
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            if journaled(journal) >= 3:
                break
            time.sleep(0.1)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert children, "no worker processes"
        code = terminate(proc, 60)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 143, f"status {code}: {err[-1500:]}"
    assert f"kept in {journal}" in err
    assert journaled(journal) >= 3
    # every worker stopped with the run
    assert wait_gone([int(pid) for pid in children], within=10) == []


def test_view_test_exits_143_on_sigterm(tmp_path: Path) -> None:
    require("aiohttp", "the http viewer")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmesh.cli",
            "view-test",
            "--http",
            str(port),
            "--frames",
            "100000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        deadline, frame = time.monotonic() + 60, b""
        while not frame and time.monotonic() < deadline and proc.poll() is None:
            try:
                frame = urllib.request.urlopen(f"http://127.0.0.1:{port}/frame", timeout=5).read()
            except OSError:
                time.sleep(0.1)
        assert frame, "the viewer never served a frame"
        code = terminate(proc)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 143, f"status {code}: {err[-1500:]}"
    assert "rlmesh view-test: terminated (SIGTERM)" in err
