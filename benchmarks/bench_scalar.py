"""Scalar CartPole step over TCP and a Unix socket, against the raw socket round trip.

Server: `rlmesh serve CartPole-v1` (`python -m rlmesh.cli serve`) in a child process. Client: rlmesh.numpy.RemoteEnv.
Reports µs per step and the ratio to a minimal Python 64-byte ping-pong on the same transport
(the floor for any Python transport; budget: <= 2x, DESIGN.md).
"""

from __future__ import annotations

import argparse

from _common import report, served, time_loop
from raw_pingpong import raw_round_trip_us

import rlmesh.numpy as rn


def bench(transport: str, n: int) -> dict[str, float]:
    with served("CartPole-v1", transport) as address, rn.RemoteEnv(address) as env:
        env.reset(seed=0)

        def step(i: int) -> None:
            _, _, terminated, truncated, _ = env.step(i & 1)
            if terminated or truncated:
                env.reset()

        us = report(f"scalar CartPole step ({transport})", time_loop(step, n))
    raw = report(f"raw 64 B round trip ({transport})", raw_round_trip_us(transport, 64, n))
    print(f"{'ratio to raw':44s} {us / raw:10.2f} x")
    return {"us_per_step": us, "raw_us": raw, "ratio": us / raw}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--transports", default="tcp,unix")
    args = p.parse_args(argv)
    return {t: bench(t, args.steps) for t in args.transports.split(",")}


if __name__ == "__main__":
    main()
