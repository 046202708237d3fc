"""Benchmark: ``prefetch_lead`` (DELTA-40) overlaps a chunked model's forward with env steps.

A local model whose chunk forward sleeps ``N`` ms drives an in-process env whose
``step`` sleeps ``M`` ms, at ``execution_horizon=H``. In line (``prefetch_lead=0``)
one chunk costs about ``N + M*H``; with ``prefetch_lead=H-1`` the next chunk is
predicted in the background from the first replay step on, so a chunk costs
about ``M + max(N, M*(H-1))`` -- approaching ``max(N, M*H)``.

Sleeps release the GIL, as a real forward on an accelerator or in native code
does; a pure-Python forward would not overlap.

Run: ``python benchmarks/bench_prefetch.py [--model-ms N] [--step-ms M] [--horizon H]
[--chunks C] [--reps R]``. Prints the median wall milliseconds per chunk for each
lead, and the ideal figures.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

import rlmesh
from rlmesh.models import NumpyModel
from rlmesh.spaces import Box


class SleepyEnv:
    """A 1-D env whose step sleeps ``step_s``; episodes never end on their own."""

    metadata: dict[str, Any] = {}
    observation_space = Box(-1e9, 1e9, shape=(1,))
    action_space = Box(-1.0, 1.0, shape=(1,))

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        time.sleep(self.step_s)
        self.t += 1
        return np.full(1, self.t, np.float32), 0.0, False, False, {}


class SleepyChunkModel(NumpyModel[Any, Any]):
    """A chunk corner that sleeps ``forward_s`` and returns ``horizon`` zero actions."""

    forward_s = 0.0

    def predict_chunk(self, obs: Any, horizon: int) -> Any:
        time.sleep(self.forward_s)
        return np.zeros((horizon, 1), np.float32)


def ms_per_chunk(model_ms: float, step_ms: float, horizon: int, chunks: int, lead: int) -> float:
    SleepyChunkModel.forward_s = model_ms / 1e3
    steps = chunks * horizon
    t0 = time.perf_counter()
    result = rlmesh.run(
        SleepyChunkModel(),
        SleepyEnv(step_ms / 1e3),
        max_episodes=1,
        max_episode_steps=steps,
        execution_horizon=horizon,
        prefetch_lead=lead,
    )
    wall = time.perf_counter() - t0
    assert result.episodes[0].steps == steps
    return wall * 1e3 / chunks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-ms", type=float, default=40.0)
    p.add_argument("--step-ms", type=float, default=5.0)
    p.add_argument("--horizon", type=int, default=8)
    p.add_argument("--chunks", type=int, default=25)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args()
    n, m, h = a.model_ms, a.step_ms, a.horizon
    print(
        f"model forward {n:g} ms, env step {m:g} ms, horizon {h}, {a.chunks} chunks x {a.reps} reps"
    )
    print(f"  ideal in line            : {n + m * h:7.1f} ms/chunk  (N + M*H)")
    print(
        f"  ideal overlapped         : {m + max(n, m * (h - 1)):7.1f} ms/chunk  (M + max(N, M*(H-1)))"
    )
    results = {}
    for lead in sorted({0, 1, h // 2, h - 1}):
        runs = [ms_per_chunk(n, m, h, a.chunks, lead) for _ in range(a.reps)]
        results[lead] = statistics.median(runs)
        print(
            f"  prefetch_lead={lead:<2}         : {results[lead]:7.1f} ms/chunk  (runs: "
            + ", ".join(f"{r:.1f}" for r in runs)
            + ")"
        )
    print(f"  speed-up lead {h - 1} vs 0      : {results[0] / results[h - 1]:.2f}x")


if __name__ == "__main__":
    main()
