"""Client CPU time per step (issue 24): what the stepping thread itself spends, not the wall.

The server runs in a child process, so the calling thread's CPU time
(``time.thread_time_ns``) is the client's own work per step: encode the action, write
the frame, read and decode the reply, the episode books, and the kernel's share of the
socket calls (on loopback TCP the kernel also runs the receive side of each send in the
sender's time). The user-mode part alone (``getrusage(RUSAGE_THREAD).ru_utime``, Linux;
sampled, so read it over many steps) is the interpreter's share. Busy polling is off
(``RLMESH_BUSY_POLL_US=0``) so spinning is not counted; the wall time per step is
reported beside it. Scalar CartPole and a 16-lane SyncVectorEnv CartPole over TCP, numpy
flavour; compare trees with ``benchmarks/ab_trees.py``:

    python benchmarks/ab_trees.py --a ../main/src --b src --pairs 5 -- bench_client_cpu.py
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
from _common import report, served

import rlmesh.numpy as rn

LANES = 16
ACTIONS = [((np.arange(LANES) + k) % 2).astype(np.int64) for k in range(2)]


def _user_ns() -> int:
    return int(resource.getrusage(resource.RUSAGE_THREAD).ru_utime * 1e9)


def _scalar(address: str, n: int) -> tuple[float, float, float]:
    cpu = wall = user = 0
    with rn.RemoteEnv(address) as env:
        env.reset(seed=0)
        for i in range(100):  # warm up (and past the session's ring countdown)
            _, _, term, trunc, _ = env.step(i & 1)
            if term or trunc:
                env.reset()
        for i in range(n):
            c0, w0, u0 = time.thread_time_ns(), time.perf_counter_ns(), _user_ns()
            _, _, term, trunc, _ = env.step(i & 1)
            cpu += time.thread_time_ns() - c0
            wall += time.perf_counter_ns() - w0
            user += _user_ns() - u0
            if term or trunc:
                env.reset()  # outside the timed step
    return cpu / n / 1e3, wall / n / 1e3, user / n / 1e3


def _vector(address: str, n: int) -> tuple[float, float, float]:
    with rn.RemoteVectorEnv(address) as env:
        env.reset(seed=0)
        for i in range(50):
            env.step(ACTIONS[i & 1])
        c0, w0, u0 = time.thread_time_ns(), time.perf_counter_ns(), _user_ns()
        for i in range(n):
            env.step(ACTIONS[i & 1])
        return (
            (time.thread_time_ns() - c0) / n / 1e3,
            (time.perf_counter_ns() - w0) / n / 1e3,
            (_user_ns() - u0) / n / 1e3,
        )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    os.environ["RLMESH_BUSY_POLL_US"] = "0"
    for transport in ("tcp", "unix"):
        with served("CartPole-v1", transport) as address:
            runs = [_scalar(address, args.steps) for _ in range(args.reps)]
            report(f"client CPU per scalar CartPole step, {transport}", [c for c, _, _ in runs])
            report(f"client user CPU per scalar step, {transport}", [u for _, _, u in runs])
            report(f"wall per scalar CartPole step, {transport}", [w for _, w, _ in runs])
    with served("envs:cartpole_lanes", "tcp") as address:
        vruns = [_vector(address, args.steps // 3) for _ in range(args.reps)]
        report("client CPU per 16-lane vector step, tcp", [c for c, _, _ in vruns])
        report("client user CPU per 16-lane step, tcp", [u for _, _, u in vruns])
        report("wall per 16-lane vector step, tcp", [w for _, w, _ in vruns])


if __name__ == "__main__":
    main()
