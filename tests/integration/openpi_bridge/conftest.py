"""Fixtures of the openpi bridge's tests: the real ``openpi-client`` peer in its own venv."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import REQUIRE_ALL, require

from .peer_venv import peer_python

require("websockets", "the rlmesh[openpi] extra")
require("msgpack", "the rlmesh[openpi] extra")

PEER_SCRIPT = Path(__file__).with_name("peer.py")
PEER_CALL_SECONDS = 60.0


@pytest.fixture(scope="session")
def peer() -> Path:
    """The peer venv's python (openpi-client 0.1.2); skips when it cannot be built."""
    try:
        return peer_python()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        why = f"the openpi-client peer venv cannot be made here: {exc}"
        if REQUIRE_ALL:
            pytest.fail(f"RLMESH_REQUIRE_ALL=1 but {why}", pytrace=False)
        pytest.skip(why)


@pytest.fixture
def run_peer(peer: Path) -> Callable[..., Any]:
    """``run_peer(command, *args, stdin=None) -> the JSON the peer script printed``."""

    def _run(command: str, *args: str, stdin: str | None = None) -> Any:
        done = subprocess.run(
            [str(peer), str(PEER_SCRIPT), command, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=PEER_CALL_SECONDS,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"peer {command} failed ({done.returncode}):\n{done.stderr[-3000:]}"
            )
        return json.loads(done.stdout)

    return _run
