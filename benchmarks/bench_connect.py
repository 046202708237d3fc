"""Connect + handshake (construct a RemoteEnv, then close it). Budget: <= 5 ms over TCP."""

from __future__ import annotations

import argparse
import time

from _common import report, served

import rlmesh.numpy as rn


def bench(transport: str, n: int) -> dict[str, float]:
    with served("CartPole-v1", transport) as address:
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                rn.RemoteEnv(address).close()
            samples.append((time.perf_counter() - t0) / n * 1e3)
        ms = report(f"connect + handshake + close ({transport})", samples, unit="ms")
    return {"connect_ms": ms}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--connects", type=int, default=50)
    p.add_argument("--transports", default="tcp,unix")
    args = p.parse_args(argv)
    return {t: bench(t, args.connects) for t in args.transports.split(",")}


if __name__ == "__main__":
    main()
