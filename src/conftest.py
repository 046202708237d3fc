"""Doctest collection of ``src/rlmesh`` (``make test`` runs ``pytest --doctest-modules src/rlmesh``).

This file sits beside the package, not in it, so it never ships. A module that needs an
optional framework to import (``rlmesh.sb3`` needs Stable-Baselines3) raises
:class:`rlmesh.errors.DependencyMissing`; its doctests then skip with that error's message
as the reason, as the test suite's ``require()`` does. Under ``RLMESH_REQUIRE_ALL=1`` (CI,
which installs every optional piece) the import error stands and fails the run.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from rlmesh.errors import DependencyMissing

_SRC = Path(__file__).resolve().parent
_REQUIRE_ALL = os.environ.get("RLMESH_REQUIRE_ALL", "") not in ("", "0")


class _NeedsOptionalDependency(pytest.File):
    """A module whose import needs an optional framework that is not installed: skipped."""

    reason: str = ""

    def collect(self) -> list[Any]:
        pytest.skip(self.reason)


def _module_name(path: Path) -> str | None:
    try:
        rel = path.resolve().relative_to(_SRC)
    except ValueError:
        return None
    if rel.suffix != ".py" or rel.parts[0] != "rlmesh":
        return None
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Generator[None, Any, Any]:
    collected = yield
    name = _module_name(file_path)
    if name is None or _REQUIRE_ALL or not collected:
        return collected
    try:
        importlib.import_module(name)
    except DependencyMissing as exc:
        item = _NeedsOptionalDependency.from_parent(parent, path=file_path)
        item.reason = f"{name}: {exc}"
        return [item]
    except Exception:  # any other import error is the doctest collector's to report
        return collected
    return collected
