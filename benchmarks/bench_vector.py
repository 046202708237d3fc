"""16-lane vector CartPole (gymnasium SyncVectorEnv, NEXT_STEP autoreset) served over TCP/unix.

Budget (DESIGN.md): >= 60 % of the same vector env stepped in-process (lane-steps/s).
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import report, served, time_loop
from envs import cartpole_lanes

import rlmesh.numpy as rn

LANES = 16
ACTIONS = [((np.arange(LANES) + k) % 2).astype(np.int64) for k in range(2)]


def bench(transport: str, n: int, inproc_lsps: float) -> dict[str, float]:
    with served("envs:cartpole_lanes", transport) as address, rn.RemoteVectorEnv(address) as env:
        env.reset(seed=0)
        us = report(
            f"16-lane vector step ({transport})", time_loop(lambda i: env.step(ACTIONS[i & 1]), n)
        )
    lsps = LANES / us * 1e6
    print(f"{'lane-steps/s':44s} {lsps:10,.0f}   ({lsps / inproc_lsps:.0%} of in-process)")
    return {"lane_steps_per_s": lsps, "fraction_of_inproc": lsps / inproc_lsps}


def inproc(n: int) -> float:
    env = cartpole_lanes(LANES)
    env.reset(seed=0)
    us = report(
        "16-lane vector step (in-process)", time_loop(lambda i: env.step(ACTIONS[i & 1]), n)
    )
    env.close()
    return LANES / us * 1e6


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--transports", default="tcp,unix")
    args = p.parse_args(argv)
    base = inproc(args.steps)
    return {t: bench(t, args.steps, base) for t in args.transports.split(",")}


if __name__ == "__main__":
    main()
