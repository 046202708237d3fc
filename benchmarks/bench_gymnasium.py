"""rlmesh.gymnasium: training remote vs local, and one client stepping 4 endpoints (issue 12).

    python benchmarks/bench_gymnasium.py [--steps 20000] [--rr-steps 2000] [--peer /tmp/peer/bin/python]

1. Training, remote vs local in the same run, ``--reps`` interleaved pairs with the
   order alternating; goal: remote/local wall time <= 1.15x. Same seed, so both runs
   of a pair see the same trajectory and the ratio is pure overhead.
   a. Stable-Baselines3 PPO (``MlpPolicy``, needs torch and stable-baselines3) on
      ``rlmesh.gymnasium.RemoteEnv`` (a served CartPole in a child process) and on
      ``gymnasium.make("CartPole-v1")``.
   b. The CleanRL-style PPO example (``examples/train/ppo_cartpole.py``, needs torch)
      on a served 4-lane CartPole and on ``gymnasium.make_vec``.
2. The Gymnasium layer's own cost: one 4-lane endpoint stepped through
   ``rlmesh.numpy`` and ``rlmesh.gymnasium`` clients, interleaved.
3. One client steps 4 scalar CartPole endpoints round-robin (4 child servers); goal:
   one round (4 steps) <= 4.5x one step on a single endpoint, i.e. waiting on one
   endpoint never starves the others' servers on a 2-core machine. The same is
   measured on a raw-socket CartPole with no rlmesh code (``_floor.py``): the least any
   served env can pay on this machine. ``--peer PYTHON`` times the same round through
   the public API (``_rr_any.py``) on that interpreter's ``rlmesh`` and on ours.

Only same-run ratios mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _floor
import gymnasium as gym
import numpy as np
from _common import report, served, time_loop

import rlmesh.gymnasium as rg
import rlmesh.numpy as rnp

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _pairs(label: str, train: Any, remote: Any, local: Any, steps: int, reps: int) -> None:
    """``reps`` interleaved timings of ``train(env, steps)`` on ``remote()`` and ``local()``,
    the order alternating so that drift in the machine's load hits both sides; ``train``
    returns what both runs of a pair must agree on."""

    def timed(make: Any, n: int) -> tuple[float, Any]:
        env = make()
        try:
            t0 = time.perf_counter()
            out = train(env, n)
            return time.perf_counter() - t0, out
        finally:
            env.close()

    # Warm both up: torch imports parts of itself (and sympy) on the first backward pass,
    # which would otherwise be charged to whichever run came first.
    timed(remote, 1024)
    timed(local, 1024)
    ratios = []
    for rep in range(reps):
        if rep % 2:
            (b, b_out), (a, a_out) = timed(local, steps), timed(remote, steps)
        else:
            (a, a_out), (b, b_out) = timed(remote, steps), timed(local, steps)
        ratios.append(a / b)
        print(
            f"{label}: remote {a:.1f}s, local {b:.1f}s, ratio {a / b:.2f}x; same result: {a_out == b_out}"
        )
    print(
        f"{label}: remote/local median ratio {statistics.median(ratios):.2f}x over {reps} pairs "
        f"(range {min(ratios):.2f}-{max(ratios):.2f}x; goal <= 1.15x)"
    )


def bench_sb3(steps: int, reps: int) -> None:
    try:
        import torch
        from stable_baselines3 import PPO
    except ImportError:
        print("SB3 training: skipped (torch or stable-baselines3 is not installed)")
        return
    torch.set_num_threads(1)

    def train(env: Any, n: int) -> list[float]:  # the final weights, rounded
        model = PPO("MlpPolicy", env, seed=1, device="cpu", verbose=0).learn(total_timesteps=n)
        return [round(float(p.detach().sum()), 3) for p in model.policy.parameters()]

    with served("CartPole-v1", "tcp") as address:
        _pairs(
            f"SB3 PPO {steps} steps",
            train,
            lambda: rg.RemoteEnv(address),
            lambda: gym.make("CartPole-v1"),
            steps,
            reps,
        )


def bench_training(steps: int, reps: int) -> None:
    try:
        import torch
    except ImportError:
        print("training: skipped (torch is not installed)")
        return
    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "examples" / "train"))
    from ppo_cartpole import train

    def local_envs() -> gym.vector.VectorEnv:
        return gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")

    with served("CartPole-v1", "tcp", "--num-envs", "4") as address:
        _pairs(
            f"CleanRL PPO {steps} steps, 4 lanes",
            lambda envs, n: train(envs, n, seed=1),
            lambda: rg.RemoteVectorEnv(address),
            local_envs,
            steps,
            reps,
        )


def bench_flavour(steps: int) -> None:
    """What the Gymnasium layer adds over the NumPy client, on one 4-lane endpoint."""
    with served("CartPole-v1", "tcp", "--num-envs", "4") as address:
        actions = np.zeros(4, dtype=np.int64)
        medians = {}
        for _ in range(2):  # interleaved
            for cls in (rnp.RemoteVectorEnv, rg.RemoteVectorEnv):
                envs = cls(address)
                envs.reset(seed=0)
                medians.setdefault(cls.__module__, []).extend(
                    time_loop(lambda i, e=envs: e.step(actions), steps, reps=2)
                )
                envs.close()
        a = report("4 lanes: rlmesh.numpy step", medians["rlmesh.numpy"])
        b = report("4 lanes: rlmesh.gymnasium step", medians["rlmesh.gymnasium"])
        print(f"gymnasium / numpy flavour = {b / a:.2f}x")


def bench_round_robin(steps: int, peer: str | None) -> None:
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
        rr = report(
            "4 endpoints round-robin: one round", time_loop(round_robin, steps // 4, reps=3)
        )
    floor_step, floor_rr = _floor.round_robin(steps)
    print(f"raw-socket floor (no rlmesh): step {floor_step:.1f} us, round {floor_rr:.1f} us")
    print(
        f"round / step = {rr / single:.2f}x (goal <= 4.5x; the raw-socket floor: {floor_rr / floor_step:.2f}x); "
        f"cores: {os.cpu_count()}"
    )
    if peer:  # the same round on the peer's public API, its servers and ours in child processes
        for label, python in (("peer", peer), ("ours", sys.executable)):
            out = subprocess.run(
                [python, str(HERE / "_rr_any.py"), str(steps // 2)],
                capture_output=True,
                text=True,
                timeout=900,
                check=True,
            )
            got = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"{label} (EnvServer + numpy.RemoteEnv): step {got['step_us']:.1f} us, round {got['round_us']:.1f} us, "
                f"round / step = {got['round_us'] / got['step_us']:.2f}x"
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20_000, help="PPO training steps (default: 20000)")
    p.add_argument(
        "--rr-steps", type=int, default=2_000, help="steps per round-robin timing (default: 2000)"
    )
    p.add_argument(
        "--reps", type=int, default=4, help="interleaved remote/local training pairs (default: 4)"
    )
    p.add_argument("--skip-training", action="store_true", help="only the round-robin part")
    p.add_argument(
        "--peer",
        metavar="PYTHON",
        help="also time the round on this interpreter's rlmesh (e.g. /tmp/peer/bin/python)",
    )
    args = p.parse_args()
    np.seterr(all="ignore")
    bench_flavour(args.rr_steps)
    bench_round_robin(args.rr_steps, args.peer)
    if not args.skip_training:
        bench_sb3(args.steps, args.reps)
        bench_training(args.steps, args.reps)


if __name__ == "__main__":
    main()
