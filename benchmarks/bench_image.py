"""Image step (Dict: uint8 224x224x3 + float32[16], Box(7) action) over TCP and a Unix socket.

Budget (DESIGN.md): <= 3x the raw 150 KB round trip on the same transport.
"""

from __future__ import annotations

import argparse

from _common import report, served, time_loop
from envs import image_action
from raw_pingpong import raw_round_trip_us

import rlmesh.numpy as rn

OBS_BYTES = 224 * 224 * 3 + 16 * 4


def bench(transport: str, n: int) -> dict[str, float]:
    actions = [image_action(i) for i in range(8)]
    with served("envs:ImageEnv", transport) as address, rn.RemoteEnv(address) as env:
        env.reset(seed=0)
        us = report(f"image step ({transport})", time_loop(lambda i: env.step(actions[i & 7]), n))
    raw = report(
        f"raw {OBS_BYTES:,} B round trip ({transport})", raw_round_trip_us(transport, OBS_BYTES, n)
    )
    print(f"{'ratio to raw':44s} {us / raw:10.2f} x   ({OBS_BYTES / us:,.0f} MB/s of observations)")
    return {"us_per_step": us, "raw_us": raw, "ratio": us / raw}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--transports", default="tcp,unix")
    args = p.parse_args(argv)
    return {t: bench(t, args.steps) for t in args.transports.split(",")}


if __name__ == "__main__":
    main()
