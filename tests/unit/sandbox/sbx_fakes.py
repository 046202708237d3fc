"""The sandbox unit tests' fake ``docker`` fixture (not a conftest: ``from conftest import`` must keep meaning tests/conftest.py)."""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


class FakeDocker:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.exe = root / "docker"
        self.exe.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / "fake_docker.py"} "$@"\n')
        self.exe.chmod(self.exe.stat().st_mode | stat.S_IEXEC)
        self.scenario: dict[str, list[dict[str, Any]]] = {}

    def on(self, key: str, *replies: dict[str, Any]) -> None:
        self.scenario[key] = list(replies)
        (self.root / "scenario.json").write_text(json.dumps(self.scenario))

    def calls(self) -> list[list[str]]:
        path = self.root / "calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def commands(self) -> list[str]:
        return [c[0] for c in self.calls() if c]


@pytest.fixture(name="fake_docker")
def fake_docker_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDocker]:
    fake = FakeDocker(tmp_path)
    monkeypatch.setenv("FAKE_DOCKER_DIR", str(tmp_path))
    monkeypatch.setenv("RLMESH_DOCKER", str(fake.exe))
    monkeypatch.setenv("RLMESH_SANDBOX_PROGRESS", "0")
    yield fake
