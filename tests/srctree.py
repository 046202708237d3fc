"""One parse of ``src/rlmesh`` for every structure test of the run.

The layering, seam and import-direction tests all read the package's source with
:mod:`ast` (nothing is imported). Each module is read and parsed once per pytest process
and each tree walked once; the tests share these caches. A test may plant a tree of its
own in :func:`trees` (and a path in :func:`modules`) to check that a scan is not vacuous,
as long as it removes the plant afterwards.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "rlmesh"


def module_name(path: Path) -> tuple[str, bool]:
    """``src/rlmesh/eval/_api.py`` -> ``("rlmesh.eval._api", False)``; a package's ``__init__`` -> True."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


@cache
def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: its file and whether it is a package's ``__init__``."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        name, is_package = module_name(path)
        out[name] = (path, is_package)
    return out


@cache
def parse(path: Path) -> ast.Module:
    """The tree of one source file (any file under ``src/``), parsed once."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@cache
def trees() -> dict[str, ast.Module]:
    """module name -> its tree, for every module of :func:`modules`."""
    return {name: parse(path) for name, (path, _) in modules().items()}


_WALKED: dict[int, tuple[ast.Module, tuple[ast.AST, ...]]] = {}


def walk(tree: ast.Module) -> tuple[ast.AST, ...]:
    """``tuple(ast.walk(tree))``, computed once per tree (keyed by the tree object itself)."""
    hit = _WALKED.get(id(tree))
    if hit is None or hit[0] is not tree:
        hit = _WALKED[id(tree)] = (tree, tuple(ast.walk(tree)))
    return hit[1]
