"""Quickstart: serve CartPole in one process, drive it from another (what `make demo` runs).

1. Start `rlmesh serve CartPole-v1` as a background process on a free loopback port.
2. Connect with `rlmesh.numpy.RemoteEnv`, run a few seeded episodes, print the time a step
   took (the whole loop's wall time over its steps, on this machine as it is right now).
3. Evaluate a small heuristic policy against the same served env with `rlmesh eval`.
4. Stop the server by its PID.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rlmesh.numpy as rn
from rlmesh.serve import wait_ready

HERE = Path(__file__).resolve().parent


@dataclasses.dataclass
class Args:
    env_id: str = "CartPole-v1"
    """Gymnasium id to serve."""
    episodes: int = 5
    """Episodes driven by hand through RemoteEnv."""
    eval_episodes: int = 10
    """Episodes for the `rlmesh eval` run at the end."""


def start_server(env_id: str, ready_file: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Serve ``env_id`` on a free loopback port in a child process.

    The server writes its bound address (real port) to ``ready_file``; we then
    wait until it answers a ping. Returns the process and the address.
    """
    env = {**os.environ, "RLMESH_WORKFLOW_EDITION": os.environ.get("RLMESH_WORKFLOW_EDITION", "")}
    cmd = [
        sys.executable,
        "-m",
        "rlmesh.cli",
        "serve",
        env_id,
        "--address",
        "127.0.0.1:0",
        "--ready-file",
        str(ready_file),
    ]
    proc = subprocess.Popen(cmd, env=env)
    try:
        deadline = time.monotonic() + 60
        while not ready_file.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start (exit code {proc.poll()})")
            time.sleep(0.05)
        address = ready_file.read_text().strip()
        wait_ready(address, timeout_seconds=30)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, address


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server we started, by its PID (graceful SIGINT, then kill)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def drive(address: str, episodes: int) -> None:
    """Run seeded episodes by hand through the numpy client; print the time per step."""
    with rn.RemoteEnv(address) as env:
        print(f"connected: {env.env_contract} observation_space={env.observation_space}")
        steps, started = 0, time.perf_counter()
        for episode in range(episodes):
            obs, info = env.reset(seed=episode)
            total, done = 0.0, False
            while not done:
                action = int(obs[2] + 0.5 * obs[3] > 0)  # lean into the pole
                obs, reward, terminated, truncated, info = env.step(action)
                total += reward
                steps += 1
                done = terminated or truncated
            print(f"episode {episode}: reward {total:.0f} (episode id {info['episode_ids'][0]})")
        elapsed = time.perf_counter() - started
        print(
            f"{steps} steps in {elapsed:.2f}s over {address}: {elapsed / steps * 1e6:,.0f} µs a "
            f"step ({steps / elapsed:,.0f} steps/s), resets, the policy and the prints above "
            "included"
        )


def evaluate(address: str, episodes: int) -> None:
    """`rlmesh eval` of the heuristic policy in examples/policies.py against the served env."""
    cmd = [
        sys.executable,
        "-m",
        "rlmesh.cli",
        "eval",
        "policies:lean_policy",
        address,
        "--episodes",
        str(episodes),
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run(cmd, check=True, env=env)
    print(
        "(CartPole reports no task outcome, so `rlmesh eval` shows no success rate; an episode that "
        "survives to the 500-step cap is truncated, not terminated)"
    )


def main(args: Args) -> None:
    with tempfile.TemporaryDirectory(prefix="rlmesh-demo-") as tmp:
        proc, address = start_server(args.env_id, Path(tmp) / "address")
        try:
            drive(address, args.episodes)
            if (HERE / "policies.py").exists():
                evaluate(address, args.eval_episodes)
        finally:
            stop_server(proc)
    print("server stopped")


if __name__ == "__main__":
    main(Args())
