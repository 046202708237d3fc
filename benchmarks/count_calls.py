"""Python function calls per remote step, client and server apart (issue 24).

Counts instead of timing, so trees can be compared on a noisy machine: scalar CartPole and a
16-lane SyncVectorEnv CartPole (NEXT_STEP autoreset), numpy flavour, busy polling off, the
server in a thread of this process (``tests/callcount.py`` says how). ``--trace`` lists the
calls of one step on each side.

    python benchmarks/count_calls.py [--trace]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import callcount


def _trace(side: str, names: list[str]) -> None:
    print(f"  {side} calls in one step ({len(names)}):")
    for name, k in Counter(names).most_common():
        print(f"    {k:4d}  {name}")


def main(argv: list[str] | None = None) -> dict[str, dict[str, int]]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--trace", action="store_true", help="list the calls of one step")
    args = p.parse_args(argv)
    out = {}
    for name, measure in (
        ("scalar CartPole", callcount.measure_scalar),
        ("16-lane vector CartPole", callcount.measure_vector),
    ):
        c = measure(args.steps)
        print(
            f"{name:26s} client {c.client:4d}  server {c.server:4d}  total {c.total:4d}  (+ env {c.env})"
        )
        if args.trace:
            _trace("client", c.client_trace)
            _trace("server", c.server_trace)
        out[name] = {"client": c.client, "server": c.server, "env": c.env, "total": c.total}
    return out


if __name__ == "__main__":
    main()
