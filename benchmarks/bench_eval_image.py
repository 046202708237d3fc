"""The float32 image eval step: ``rlmesh.run`` against a served float32 224x224x3 env (issue 23).

Reports the eval loop's mean per-step wall time and its per-step ``predict`` share
(the route's work: everything between the env's observation and the action, with a
trivial model), median over ``--reps`` runs. A served env's observations arrive
canonical from the numpy client; the local route must not canonicalise them again.

    python benchmarks/ab_trees.py --a ../main/src --b src --pairs 5 -- bench_eval_image.py
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import gymnasium as gym
import numpy as np
from _common import report, served

import rlmesh
import rlmesh.numpy as rn

SHAPE = (224, 224, 3)


class Float32ImageEnv(gym.Env[np.ndarray, int]):
    """A float32 224x224x3 observation, Discrete(2) action; never ends (the run caps it)."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0.0, 1.0, SHAPE, np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._obs = np.full(SHAPE, 0.5, np.float32)

    def reset(
        self, *, seed: int | None = None, options: Any = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return self._obs, {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return self._obs, 1.0, False, False, {}


def bench(transport: str, steps: int, reps: int) -> None:
    model = rn.Model(lambda obs: 0)
    with served("bench_eval_image:Float32ImageEnv", transport) as address:
        rlmesh.run(model, str(address), max_episode_steps=100)  # warm
        step_us: list[float] = []
        predict_us: list[float] = []
        for _ in range(reps):
            t0 = time.perf_counter()
            result = rlmesh.run(model, str(address), max_episode_steps=steps)
            step_us.append((time.perf_counter() - t0) * 1e6 / steps)
            predict_us.append(float(result.episodes[0].predict_ms or 0.0) * 1e3)
    report(f"eval step f32 224x224x3 ({transport})", step_us)
    report(f"eval predict f32 224x224x3 ({transport})", predict_us)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--transports", default="unix")
    args = p.parse_args(argv)
    for transport in args.transports.split(","):
        bench(transport, args.steps, args.reps)


if __name__ == "__main__":
    main()
