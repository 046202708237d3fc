"""``rlmesh view-test`` (CLI-1): the synthetic scene through the real viewer."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import require
from rlmesh.view._synthetic import demo_frame

pytestmark = pytest.mark.slow  # child processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_frame_moves() -> None:
    a, b = demo_frame(0), demo_frame(10)
    assert a.shape == (180, 240, 3) and a.dtype.name == "uint8"
    assert (a != b).any()
    assert (a == 255).all(axis=2).sum() > 30 * 30  # the white box


def test_view_test_serves_the_scene_and_ends_cleanly(tmp_path: Path) -> None:
    require("aiohttp")
    import urllib.request

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
            "--fps",
            "30",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "SSH_CONNECTION": "10.1.1.1 5000 10.1.1.2 22", "USER": "tester"},
    )
    try:
        deadline = time.monotonic() + 60
        frame = b""
        while not frame and time.monotonic() < deadline:
            try:
                frame = urllib.request.urlopen(f"http://127.0.0.1:{port}/frame", timeout=5).read()
            except OSError:
                time.sleep(0.1)
        assert frame[:2] == b"\xff\xd8"
        for _ in range(
            100
        ):  # bounded: the HUD's chunk length is set by the first forward, not at reset
            hud = json.loads(
                urllib.request.urlopen(f"http://127.0.0.1:{port}/hud.json", timeout=5).read()
            )
            if hud["chunk_len"]:
                break
            time.sleep(0.05)
        assert (
            hud["episode"] == 1
            and hud["episodes"] == 1
            and hud["seed"] == 0
            and hud["chunk_len"] == 8
        )
        assert hud["outcome"] == "running" and hud["width"] == 240 and hud["height"] == 180
        sources = json.loads(
            urllib.request.urlopen(f"http://127.0.0.1:{port}/sources.json", timeout=5).read()
        )
        assert sources["sources"] == ["demo"]
        urllib.request.urlopen(f"http://127.0.0.1:{port}/control?op=quit", timeout=5).read()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert out.strip().endswith("[viewtest] done.")
    assert f"http://127.0.0.1:{port}/" in err
    assert f"ssh -L {port}:127.0.0.1:{port} tester@10.1.1.2" in err


def test_view_test_without_a_tty_warns(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rlmesh.cli", "viewtest", "--frames", "3"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert (
        "[viewtest] WARNING: rlmesh view: terminal backend unavailable (stdout not a TTY?)"
        in proc.stderr
    )
    assert (
        (tmp_path / "viewtest.warnings")
        .read_text()
        .startswith("rlmesh view: terminal backend unavailable")
    )
    assert proc.returncode == 1


def test_rlmesh_eval_takes_view(tmp_path: Path) -> None:
    """``rlmesh eval ... --view http:PORT`` runs with the page up and reports as usual."""
    require("aiohttp")
    (tmp_path / "cams.py").write_text(
        "from rlmesh.view._synthetic import CounterEnv\n\ndef make():\n    return CounterEnv(32, 24, episode_steps=20)\n"
    )
    port = free_port()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlmesh.cli",
            "eval",
            "random",
            "cams:make",
            "--episodes",
            "2",
            "--view",
            f"http:{port}",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert f"rlmesh view: open http://127.0.0.1:{port}/" in proc.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "rlmesh.cli", "eval", "random", "cams:make", "--view", "tv"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert bad.returncode == 1 and "unknown view 'tv'" in bad.stderr
