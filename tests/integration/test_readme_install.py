"""The README's install line, run as a new user runs it, installs what the README's next commands need.

A fresh virtual environment, the README's ``pip install ".[...]"`` line run in a copy of
this clone, then ``rlmesh serve CartPole-v1 --help`` and a real ``rlmesh serve CartPole-v1``
answering ``rlmesh health``. pip reads the package index this machine is configured with,
as ``make test`` does when it creates ``.venv``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_env, stop_process, wait_for_ready_file

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def readme_install_line() -> str:
    text = (ROOT / "README.md").read_text()
    return next(line for line in text.splitlines() if line.startswith("pip install "))


def test_the_readme_install_line_gives_a_working_rlmesh_serve(
    tmp_path: Path, short_tmp: Path
) -> None:
    clone = tmp_path / "clone"  # what a clone has, so the build writes nothing into this tree
    clone.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, clone / name)
    shutil.copytree(ROOT / "src", clone / "src", ignore=shutil.ignore_patterns("__pycache__"))

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    args = shlex.split(re.sub(r"\s+#.*$", "", readme_install_line()))
    assert args[:2] == ["pip", "install"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", *args[2:]],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert install.returncode == 0, install.stderr[-3000:]

    rlmesh = venv / "bin" / "rlmesh"
    helped = subprocess.run(
        [str(rlmesh), "serve", "CartPole-v1", "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert helped.returncode == 0, helped.stderr
    assert "--address" in helped.stdout

    address, ready = f"unix://{short_tmp}/readme.sock", short_tmp / "readme.ready"
    with open(short_tmp / "serve.err", "wb") as err:  # a file, never a pipe nobody reads
        served = subprocess.Popen(
            [str(rlmesh), "serve", "CartPole-v1", "--address", address, "--ready-file", str(ready)],
            env=child_env(**{"PATH": env.get("PATH", "")}),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        try:
            wait_for_ready_file(served, ready, 60.0)
        except RuntimeError as exc:
            raise AssertionError(
                f"{exc}: {(short_tmp / 'serve.err').read_text()[-2000:]}"
            ) from None
        health = subprocess.run(
            [str(rlmesh), "health", address], env=env, capture_output=True, text=True, timeout=60
        )
        assert health.returncode == 0, health.stdout + health.stderr
    finally:
        stop_process(served)
