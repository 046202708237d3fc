"""Every module of the package is small enough to hold in one's head: at most 600 lines.

A module that grows past it is split by idea (see docs/architecture.md), not trimmed of
its docstrings.
"""

from __future__ import annotations

from srctree import PKG, modules

MAX_LINES = 600


def test_no_module_is_longer_than_600_lines() -> None:
    sizes = {
        str(path.relative_to(PKG.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path, _ in modules().values()
    }
    assert len(sizes) > 100  # the scan saw the package
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines (split them by idea): {over}"
