"""Run a benchmark script against two source trees, interleaved: A, B, A, B ... (issue 24).

Each run is a fresh process with ``PYTHONPATH`` set to that tree's ``src`` (its servers
inherit it), so both trees are measured in the same minutes on the same machine. Every
reported line (``name  value unit  (...)``) is collected per tree; the table gives the
median and range over the pairs, and B/A of the medians.

    python benchmarks/ab_trees.py --a ../main/src --b src --pairs 5 -- bench_scalar.py --steps 2000
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
_LINE = re.compile(r"^(?P<name>.+?)\s{2,}(?P<value>[\d,]+(?:\.\d+)?)\s+(?P<unit>us|x|µs)\b")


def run(tree: str, script: list[str]) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    out = subprocess.run(
        [sys.executable, str(HERE / script[0]), *script[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    ).stdout
    values: dict[str, float] = {}
    for line in out.splitlines():
        match = _LINE.match(line.strip())
        if match:
            values[match["name"].strip()] = float(match["value"].replace(",", ""))
    return values


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--a", required=True, help="tree A's src directory")
    p.add_argument("--b", required=True, help="tree B's src directory")
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- script.py [its arguments]")
    args = p.parse_args(argv)
    for flag, tree in (("--a", args.a), ("--b", args.b)):
        if not (Path(tree) / "rlmesh" / "__init__.py").is_file():  # else the installed rlmesh runs
            p.error(f"{flag} {tree}: not a src directory holding rlmesh/ (try {tree}/src)")
    script = [s for s in args.script if s != "--"]
    results: dict[str, dict[str, list[float]]] = {"A": {}, "B": {}}
    for i in range(args.pairs):
        for label, tree in (("A", args.a), ("B", args.b)):
            for name, value in run(tree, script).items():
                results[label].setdefault(name, []).append(value)
        print(f"pair {i + 1}/{args.pairs} done", file=sys.stderr)
    print(f"{'measure':44s} {'A median (range)':>24s} {'B median (range)':>24s} {'B/A':>6s}")
    for name, a_values in results["A"].items():
        b_values = results["B"].get(name)
        if not b_values:
            continue
        a, b = statistics.median(a_values), statistics.median(b_values)
        a_txt = f"{a:.1f} ({min(a_values):.1f}-{max(a_values):.1f})"
        b_txt = f"{b:.1f} ({min(b_values):.1f}-{max(b_values):.1f})"
        print(f"{name:44s} {a_txt:>24s} {b_txt:>24s} {b / a:6.2f}")


if __name__ == "__main__":
    main()
