"""The start-up status line: silent for quick starts, one readable line per phase otherwise."""

from __future__ import annotations

import io

import pytest

from rlmesh.sandbox._progress import Progress


def test_a_quick_start_prints_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLMESH_SANDBOX_PROGRESS", raising=False)
    out = io.StringIO()
    p = Progress("gym://X-v0", stream=out, delay_seconds=3600)
    p.phase("creating venv")
    p.done()
    assert out.getvalue() == "" and p.history == ["creating venv", "ready"]


def test_a_slow_start_shows_each_phase_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLMESH_SANDBOX_PROGRESS", raising=False)
    out = io.StringIO()
    p = Progress("gym://X-v0", stream=out, delay_seconds=0)
    for phase in ("creating venv", "installing 3 packages", "make() running"):
        p.phase(phase)
    p.done()
    lines = out.getvalue().splitlines()
    assert [line.split(": ", 1)[1].rsplit(" (", 1)[0] for line in lines] == [
        "creating venv",
        "installing 3 packages",
        "make() running",
        "ready",
    ]
    assert all(
        line.startswith("rlmesh sandbox gym://X-v0: ") and line.endswith("s)") for line in lines
    )


def test_RLMESH_SANDBOX_PROGRESS_0_silences_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMESH_SANDBOX_PROGRESS", "0")
    out = io.StringIO()
    p = Progress("x", stream=out, delay_seconds=0)
    p.phase("creating venv")
    p.done("failed")
    assert out.getvalue() == ""
