"""Line coverage per rlmesh subpackage (``make coverage``).

Usage::

    python tools/coverage_report.py --run [PYTEST ARGS...]   # measure, then report
    python tools/coverage_report.py                          # report the last measurement
    python tools/coverage_report.py --modules serve          # one package, module by module

``--run`` runs pytest under ``coverage run`` with ``src/rlmesh`` as the source (by path:
naming the package would import it before measuring starts), then prints one line per
subpackage: statements, missed, percent. Modules at the package root (``rlmesh/_bridge.py``
...) are grouped as ``rlmesh (root)``. Only this process is measured: servers the tests
start in child processes (``rlmesh serve ...``, sandboxes, session workers) count nothing,
so the figure is what the in-process tests exercise. Needs ``coverage`` (``pip install
coverage``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "src" / "rlmesh"
DATA = ROOT / ".coverage"
DEFAULT_PYTEST_ARGS = [
    "tests/unit",
    "tests/integration",
    "-m",
    "not ray and not e2e",
    "-q",
    "-p",
    "no:cacheprovider",
]


def _coverage() -> object:
    try:
        import coverage
    except ImportError:
        sys.exit("coverage is not installed: pip install coverage (or add it to the dev extra)")
    return coverage


def run(pytest_args: list[str]) -> int:
    """``coverage run -m pytest ARGS`` from the repository root; returns pytest's status."""
    _coverage()
    env = dict(os.environ, COVERAGE_FILE=str(DATA))
    cmd = [
        sys.executable,
        "-m",
        "coverage",
        "run",
        f"--source={SOURCE}",
        "-m",
        "pytest",
        *pytest_args,
    ]
    print("+", " ".join(cmd), flush=True)
    return subprocess.call(cmd, cwd=ROOT, env=env)


def package_of(path: Path) -> str:
    """``serve`` for ``src/rlmesh/serve/_loop.py``; ``rlmesh (root)`` for ``src/rlmesh/_bridge.py``."""
    rel = path.relative_to(SOURCE)
    return rel.parts[0] if len(rel.parts) > 1 else "rlmesh (root)"


def report(modules: str | None = None) -> list[tuple[str, int, int]]:
    """Print and return ``(name, statements, missed)`` per package (or per module of ``modules``)."""
    coverage = _coverage()
    cov = coverage.Coverage(data_file=str(DATA))  # type: ignore[attr-defined]
    cov.load()
    data = cov.get_data()
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name in sorted(data.measured_files()):
        path = Path(name)
        if SOURCE not in path.parents:
            continue
        key = package_of(path)
        if modules is not None:
            if key != modules:
                continue
            key = str(path.relative_to(SOURCE))
        _fname, statements, _excluded, missing, _text = cov.analysis2(name)
        totals[key][0] += len(statements)
        totals[key][1] += len(missing)
    rows = [(k, s, m) for k, (s, m) in sorted(totals.items())]
    width = max([len(k) for k, _, _ in rows] + [7])
    print(
        f"{'package' if modules is None else 'module':<{width}}  {'stmts':>6}  {'miss':>6}  {'cover':>6}"
    )
    for key, stmts, miss in rows:
        print(f"{key:<{width}}  {stmts:>6}  {miss:>6}  {_pct(stmts, miss):>6}")
    all_stmts = sum(s for _, s, _ in rows)
    all_miss = sum(m for _, _, m in rows)
    print(f"{'TOTAL':<{width}}  {all_stmts:>6}  {all_miss:>6}  {_pct(all_stmts, all_miss):>6}")
    return rows


def _pct(stmts: int, miss: int) -> str:
    return f"{100.0 * (stmts - miss) / stmts:.0f}%" if stmts else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="store_true", help="measure first (pytest under coverage)")
    parser.add_argument(
        "--modules", metavar="PACKAGE", help="one row per module of this subpackage"
    )
    args, pytest_args = parser.parse_known_args(argv)
    if pytest_args[:1] == ["--"]:
        pytest_args = pytest_args[1:]
    status = 0
    if args.run:
        status = run(pytest_args or DEFAULT_PYTEST_ARGS)
    if not DATA.exists():
        sys.exit(f"no coverage data at {DATA}: run with --run first")
    report(args.modules)
    return status


if __name__ == "__main__":
    sys.exit(main())
