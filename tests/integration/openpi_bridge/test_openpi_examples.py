"""examples/openpi run as a user runs them."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import stop_process

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_eval_metaworld_evaluates_the_served_scripted_policy_or_says_what_is_missing() -> None:
    out = subprocess.run(
        [sys.executable, "examples/openpi/eval_metaworld.py", "--episodes", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    if importlib.util.find_spec("metaworld") is None:
        assert out.returncode != 0
        assert "pip install metaworld" in out.stderr
        return
    assert out.returncode == 0, out.stderr[-3000:]
    assert "(openpi protocol)" in out.stdout
    assert "reach-v3: 2 episodes, success 1.00" in out.stdout


def test_serve_model_answers_openpi_clients_WebsocketClientPolicy(
    peer: Path, tmp_path: Path
) -> None:
    log = tmp_path / "server.out"
    with open(log, "w") as fh:
        server = subprocess.Popen(
            [sys.executable, "examples/openpi/serve_model.py", "--address", "127.0.0.1:0",
             "--seconds", "120"],
            cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "serving" not in log.read_text():
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the example server did not start"
            time.sleep(0.05)
        url = log.read_text().split(" on ", 1)[1].split()[0]
        host, port = url.removeprefix("ws://").rsplit(":", 1)
        out = subprocess.run(
            [str(peer), "examples/openpi/openpi_client_infer.py", "--host", host, "--port", port],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        stop_process(server)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "metadata: {'model': 'ToyVLA'" in out.stdout
    assert out.stdout.count("actions float32[10, 7]") == 3
