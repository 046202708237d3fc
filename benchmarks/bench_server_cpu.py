"""Server CPU time per step (issue 24): what the serving process itself spends, not the wall.

The wall time of a remote step on a loaded machine is mostly the scheduler; the server's
own CPU time per step (Linux ``/proc/<pid>/task/*/schedstat``, nanoseconds) moves far less.
Busy polling is off (``RLMESH_BUSY_POLL_US=0``) so spinning is not counted. Scalar
CartPole and a 16-lane SyncVectorEnv CartPole, over TCP; compare trees with
``benchmarks/ab_trees.py``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
from _common import report, served

import rlmesh.numpy as rn

LANES = 16
ACTIONS = [((np.arange(LANES) + k) % 2).astype(np.int64) for k in range(2)]


def _cpu_ns(pid: int) -> int:
    """CPU nanoseconds of every thread of ``pid`` so far."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass  # a thread that just ended
    return total


def _scalar(address: str, pid: int, n: int) -> float:
    with rn.RemoteEnv(address) as env:
        env.reset(seed=0)
        for i in range(100):
            _, _, term, trunc, _ = env.step(i & 1)
            if term or trunc:
                env.reset()
        before = _cpu_ns(pid)
        resets = 0
        for i in range(n):
            _, _, term, trunc, _ = env.step(i & 1)
            if term or trunc:
                env.reset()
                resets += 1
        return (_cpu_ns(pid) - before) / (n + resets) / 1e3


def _vector(address: str, pid: int, n: int) -> float:
    with rn.RemoteVectorEnv(address) as env:
        env.reset(seed=0)
        for i in range(50):
            env.step(ACTIONS[i & 1])
        before = _cpu_ns(pid)
        for i in range(n):
            env.step(ACTIONS[i & 1])
        return (_cpu_ns(pid) - before) / n / 1e3


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    os.environ["RLMESH_BUSY_POLL_US"] = "0"
    with served("CartPole-v1", "tcp") as address:
        report(
            "server CPU per scalar CartPole step",
            [_scalar(address, address.pid, args.steps) for _ in range(args.reps)],
        )
    with served("envs:cartpole_lanes", "tcp") as address:
        report(
            "server CPU per 16-lane vector step",
            [_vector(address, address.pid, args.steps // 3) for _ in range(args.reps)],
        )


if __name__ == "__main__":
    main()
