"""100,000 image steps over a Unix socket: client and server RSS must stay flat after warm-up."""

from __future__ import annotations

import argparse
import os
import re

from _common import served
from envs import image_action

import rlmesh.numpy as rn


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))  # type: ignore[union-attr]


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=100_000)
    args = p.parse_args(argv)
    actions = [image_action(i) for i in range(8)]
    with served("envs:ImageEnv", "unix") as address, rn.RemoteEnv(address) as env:
        spid = address.pid
        env.reset(seed=0)
        for i in range(2_000):  # warm-up: allocator pools, caches
            env.step(actions[i & 7])
        c0, s0 = rss_kib(os.getpid()), rss_kib(spid) if spid else 0
        for i in range(args.steps):
            env.step(actions[i & 7])
        c1, s1 = rss_kib(os.getpid()), rss_kib(spid) if spid else 0
    print(
        f"client RSS {c0 / 1024:.1f} -> {c1 / 1024:.1f} MiB ({(c1 - c0) / 1024:+.2f} MiB over {args.steps:,} steps)"
    )
    if spid:
        print(f"server RSS {s0 / 1024:.1f} -> {s1 / 1024:.1f} MiB ({(s1 - s0) / 1024:+.2f} MiB)")
    return {"client_growth_mib": (c1 - c0) / 1024, "server_growth_mib": (s1 - s0) / 1024}


if __name__ == "__main__":
    main()
