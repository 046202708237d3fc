"""Stable-Baselines3 PPO on CartPole served by several endpoints at once (needs torch and SB3).

    python examples/train/sb3_many_endpoints.py --endpoints 4 --total-timesteps 30000

The script starts ``--endpoints`` CartPole servers on ``127.0.0.1:0``, each in a child
process (``rlmesh serve CartPole-v1``), trains PPO on ``rlmesh.sb3.RemoteVecEnv`` over
all of them (every step is sent to every endpoint first, then gathered, so the servers
work at the same time), evaluates the policy on a local CartPole and stops the servers.
To train on endpoints you already run, pass their addresses with ``--address``.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecMonitor

from rlmesh.sb3 import RemoteVecEnv


def start_endpoint(workdir: Path, i: int) -> tuple[subprocess.Popen[bytes], str]:
    """``rlmesh serve CartPole-v1`` in a child process; returns it and its bound address."""
    ready = workdir / f"ready{i}"
    cmd = [
        sys.executable,
        "-m",
        "rlmesh.cli",
        "serve",
        "CartPole-v1",
        "--address",
        "127.0.0.1:0",
        "--ready-file",
        str(ready),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not ready.exists():  # bounded: the server writes its address once it listens
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"endpoint {i} did not start")
        time.sleep(0.05)
    return proc, ready.read_text().strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--endpoints", type=int, default=4, help="CartPole servers to start (default: 4)"
    )
    p.add_argument(
        "--address", action="append", help="train on these endpoints instead (repeatable)"
    )
    p.add_argument(
        "--total-timesteps", type=int, default=30_000, help="environment steps (default: 30000)"
    )
    p.add_argument("--seed", type=int, default=1, help="seed (default: 1)")
    args = p.parse_args()
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        stack.callback(_stop, procs)
        addresses = args.address or []
        if not addresses:
            for i in range(args.endpoints):
                proc, address = start_endpoint(Path(tmp), i)
                procs.append(proc)
                addresses.append(address)
        env = VecMonitor(RemoteVecEnv(addresses))
        stack.callback(env.close)
        t0 = time.perf_counter()
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=256,
            batch_size=256,
            n_epochs=10,
            learning_rate=1e-3,
            gamma=0.98,
            gae_lambda=0.8,
            seed=args.seed,
            device="cpu",
            verbose=0,
        )
        model.learn(total_timesteps=args.total_timesteps)
        seconds = time.perf_counter() - t0
        mean, std = evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=10)
        print(
            f"trained {args.total_timesteps} steps on {len(addresses)} endpoints in {seconds:.1f}s; "
            f"mean return {mean:.1f} +/- {std:.1f} (a random policy scores ~22)"
        )


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:  # by PID, each one we started
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
