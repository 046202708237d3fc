"""Benchmark: the openpi bridge against rlmesh's own served model, and chunks hiding latency.

1. **Round trip**: one step of a 224x224x3 uint8 image + float32[8] state observation through
   a served model that does no work, driven by ``rlmesh.run`` on an in-process env: the
   openpi bridge (``PolicyClient`` -> ``rlmesh serve-model --protocol openpi``) against our
   native served model (``RemoteModel`` -> ``rlmesh serve-model``). Both servers are child
   processes; the two runs alternate, and the figure is the median of the per-pair ratios.
2. **Chunks hide the server's latency**: a served model that takes 50 ms per forward and
   answers a 10-step chunk, driven through the bridge at ``execution_horizon=10`` and at 1:
   steps per second of each, interleaved pairs, median ratio (ideal: 10x).

Run: ``python benchmarks/bench_openpi.py [--pairs N] [--steps S]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

import rlmesh
from rlmesh.numpy import Model
from rlmesh.openpi import PolicyClient
from rlmesh.spaces import Box, Dict

HERE = Path(__file__).resolve().parent
IMAGE = (224, 224, 3)


class ImageEnv:
    """``{"observation/image": uint8[224, 224, 3], "observation/state": float32[8]}``; free steps."""

    metadata: dict[str, Any] = {}
    observation_space = Dict(
        {
            "observation/image": Box(0, 255, shape=IMAGE, dtype=np.uint8),
            "observation/state": Box(-1e9, 1e9, shape=(8,), dtype=np.float32),
        }
    )
    action_space = Box(-1.0, 1.0, shape=(7,), dtype=np.float32)

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.obs = {
            "observation/image": rng.integers(0, 256, IMAGE, dtype=np.uint8),
            "observation/state": np.zeros(8, np.float32),
        }

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        return self.obs, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.obs, 0.0, False, False, {}


class ZeroModel(Model):
    """Answers zeros: the served model's own cost is nothing."""

    workflow_edition = "2026.06"

    def predict(self, obs: Any) -> Any:
        return np.zeros(7, np.float32)


class SlowChunkModel(Model):
    """50 ms per forward, then a 10-step chunk (a remote VLA's shape, minus the GPU)."""

    native_chunk = 10
    workflow_edition = "2026.06"

    def predict_chunk(self, obs: Any, execution_horizon: int) -> Any:
        time.sleep(0.05)
        return np.zeros((execution_horizon, 7), np.float32)


@contextmanager
def serve_model(target: str, *args: str) -> Iterator[str]:
    """``rlmesh serve-model TARGET ARGS`` in a child process; yields its address."""
    with tempfile.TemporaryDirectory(prefix="rlmesh-bench-") as tmp:
        ready = Path(tmp) / "ready"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        }
        cmd = [sys.executable, "-m", "rlmesh.cli", "serve-model", target, "--address", "127.0.0.1:0",
               "--ready-file", str(ready), *args]  # fmt: skip
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"benchmark server did not start: {cmd}")
                time.sleep(0.02)
            yield ready.read_text().strip()
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def us_per_step(model: Any, steps: int, **kwargs: Any) -> float:
    t0 = time.perf_counter()
    result = rlmesh.run(model, ImageEnv(), max_episodes=1, max_episode_steps=steps, **kwargs)
    elapsed = time.perf_counter() - t0
    assert result.episodes[0].steps == steps
    return elapsed / steps * 1e6


def round_trip(pairs: int, steps: int) -> None:
    with (
        serve_model("bench_openpi:ZeroModel") as native,
        serve_model("bench_openpi:ZeroModel", "--protocol", "openpi") as bridge,
    ):
        remote = rlmesh.RemoteModel(native)
        client = PolicyClient(bridge)
        us_per_step(remote, 50), us_per_step(client, 50)  # warm both
        a, b, ratios = [], [], []
        for _ in range(pairs):
            x = us_per_step(remote, steps)
            y = us_per_step(client, steps)
            a.append(x), b.append(y), ratios.append(y / x)
        local = statistics.median(us_per_step(ZeroModel(), steps) for _ in range(3))
    print("1. 224x224x3 + state observation, one served step (rlmesh.run, in-process env)")
    print(f"   in-process model (floor)              {local:9.1f} us/step")
    print(f"   native served model (RemoteModel)     {statistics.median(a):9.1f} us/step")
    print(f"   openpi bridge (PolicyClient)          {statistics.median(b):9.1f} us/step")
    print(f"   bridge / native: median of {pairs} interleaved pairs = {statistics.median(ratios):.2f}x "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")  # fmt: skip


def chunks_hide_latency(pairs: int) -> None:
    with serve_model("bench_openpi:SlowChunkModel", "--protocol", "openpi") as bridge:
        client = PolicyClient(bridge)
        us_per_step(client, 10, execution_horizon=10)
        h1, h10, ratios = [], [], []
        for _ in range(pairs):
            one = 1e6 / us_per_step(client, 20, execution_horizon=1)
            ten = 1e6 / us_per_step(client, 200, execution_horizon=10)
            h1.append(one), h10.append(ten), ratios.append(ten / one)
    print("2. a 50 ms server answering 10-step chunks, through the bridge")
    print(f"   execution_horizon=1                   {statistics.median(h1):9.1f} steps/s")
    print(f"   execution_horizon=10                  {statistics.median(h10):9.1f} steps/s")
    print(f"   h=10 / h=1: median of {pairs} interleaved pairs = {statistics.median(ratios):.2f}x "
          f"(ideal 10x; min {min(ratios):.2f}, max {max(ratios):.2f})")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=7, help="interleaved pairs per figure (default: 7)")
    p.add_argument("--steps", type=int, default=300, help="steps per timed run (default: 300)")
    args = p.parse_args(argv)
    round_trip(args.pairs, args.steps)
    chunks_hide_latency(max(3, args.pairs // 2))


if __name__ == "__main__":
    main()
