"""rlmesh.gymnasium: training remote vs local, and one client stepping 4 endpoints (issue 12).

    python benchmarks/bench_gymnasium.py [--steps 20000] [--rr-steps 2000]

1. The CleanRL-style PPO example (``examples/train/ppo_cartpole.py``, needs torch)
   trains ``--steps`` steps on a served 4-lane CartPole (server in a child process)
   and on ``gymnasium.make_vec`` in the same run; goal: remote/local wall time <= 1.15x.
   Both runs see the same trajectory (same seed), so the ratio is pure overhead.
2. The Gymnasium layer's own cost: one 4-lane endpoint stepped through
   ``rlmesh.numpy`` and ``rlmesh.gymnasium`` clients, interleaved.
3. One client steps 4 scalar CartPole endpoints round-robin (4 child servers); goal:
   one round (4 steps) <= 4.5x one step on a single endpoint, i.e. waiting on one
   endpoint never starves the others' servers on a 2-core machine.

Only same-run ratios mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from _common import report, served, time_loop

import rlmesh.gymnasium as rg
import rlmesh.numpy as rnp

ROOT = Path(__file__).resolve().parents[1]


def bench_training(steps: int, reps: int) -> None:
    try:
        import torch
    except ImportError:
        print("training: skipped (torch is not installed)")
        return
    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "examples" / "train"))
    from ppo_cartpole import train

    def timed(make: Any, n: int) -> tuple[float, list[float]]:
        envs = make()
        try:
            t0 = time.perf_counter()
            returns = train(envs, n, seed=1)
            return time.perf_counter() - t0, returns
        finally:
            envs.close()

    def local_envs() -> gym.vector.VectorEnv:
        return gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")

    ratios = []
    with served("CartPole-v1", "tcp", "--num-envs", "4") as address:
        # Warm up both sides first: torch imports parts of itself (and sympy) on the first
        # backward pass, which would otherwise be charged to whichever run came first.
        timed(lambda: rg.RemoteVectorEnv(address), 1024)
        timed(local_envs, 1024)
        for rep in range(reps):  # interleaved, order alternating, so drift in the load hits both sides
            if rep % 2:
                local, local_returns = timed(local_envs, steps)
                remote, remote_returns = timed(lambda: rg.RemoteVectorEnv(address), steps)
            else:
                remote, remote_returns = timed(lambda: rg.RemoteVectorEnv(address), steps)
                local, local_returns = timed(local_envs, steps)
            ratios.append(remote / local)
            print(f"PPO {steps} steps, 4 lanes: remote {remote:.1f}s, local {local:.1f}s, ratio {remote / local:.2f}x; "
                  f"same trajectory: {remote_returns == local_returns}")
    print(f"PPO remote/local median ratio {statistics.median(ratios):.2f}x over {reps} pairs (goal <= 1.15x)")


def bench_flavour(steps: int) -> None:
    """What the Gymnasium layer adds over the NumPy client, on one 4-lane endpoint."""
    with served("CartPole-v1", "tcp", "--num-envs", "4") as address:
        actions = np.zeros(4, dtype=np.int64)
        medians = {}
        for _ in range(2):  # interleaved
            for cls in (rnp.RemoteVectorEnv, rg.RemoteVectorEnv):
                envs = cls(address)
                envs.reset(seed=0)
                medians.setdefault(cls.__module__, []).extend(time_loop(lambda i, e=envs: e.step(actions), steps, reps=2))
                envs.close()
        a = report("4 lanes: rlmesh.numpy step", medians["rlmesh.numpy"])
        b = report("4 lanes: rlmesh.gymnasium step", medians["rlmesh.gymnasium"])
        print(f"gymnasium / numpy flavour = {b / a:.2f}x")


def bench_round_robin(steps: int) -> None:
    with contextlib.ExitStack() as stack:
        addresses = [stack.enter_context(served("CartPole-v1", "tcp")) for _ in range(4)]
        envs = [stack.enter_context(rnp.RemoteEnv(a)) for a in addresses]
        for e in envs:
            e.reset(seed=0)

        def one(i: int, env: rnp.RemoteEnv = envs[0]) -> None:
            if env.step(i & 1)[2]:
                env.reset()

        def round_robin(i: int) -> None:
            a = i & 1
            for env in envs:
                if env.step(a)[2]:
                    env.reset()

        single = report("one endpoint: step", time_loop(one, steps, reps=3))
        rr = report("4 endpoints round-robin: one round", time_loop(round_robin, steps // 4, reps=3))
        print(f"round / step = {rr / single:.2f}x (goal <= 4.5x); cores: {os.cpu_count()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20_000, help="PPO training steps (default: 20000)")
    p.add_argument("--rr-steps", type=int, default=2_000, help="steps per round-robin timing (default: 2000)")
    p.add_argument("--reps", type=int, default=2, help="interleaved remote/local training pairs (default: 2)")
    p.add_argument("--skip-training", action="store_true", help="only the round-robin part")
    args = p.parse_args()
    np.seterr(all="ignore")
    bench_flavour(args.rr_steps)
    bench_round_robin(args.rr_steps)
    if not args.skip_training:
        bench_training(args.steps, args.reps)


if __name__ == "__main__":
    main()
