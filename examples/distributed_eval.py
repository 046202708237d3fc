"""Evaluate a policy on many seeded episodes with several workers, resumably.

A "slow simulator" (each step sleeps a few milliseconds) is evaluated on 64 seeds twice:
in this process (``workers=None``) and with 4 workers. The second run journals every
finished episode to ``OUT_DIR/run.journal``: interrupt it (Ctrl-C) and run the script
again, and only the missing seeds run. Both runs produce the same episodes.

Run: ``python examples/distributed_eval.py [OUT_DIR]`` (local processes, standard library)
or ``python examples/distributed_eval.py --ray [OUT_DIR]`` (Ray actors: the ``ray`` extra,
``pip install ".[ray]"`` from a clone; a local Ray is started and stopped, or pass ``--ray-address auto`` to use
a running cluster).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

import rlmesh


class SlowReach(gym.Env[Any, Any]):
    """A point that must reach 1.0 within 30 steps; each step "simulates" for ``step_ms``."""

    def __init__(self, step_ms: float = 4.0) -> None:
        self.observation_space = gym.spaces.Box(-5.0, 5.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-0.2, 0.2, (1,), np.float32)
        self.step_ms = step_ms
        self.pos = 0.0
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos, self.t = float(self.np_random.uniform(-1.0, 0.5)), 0
        return np.array([self.pos, 1.0], np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        time.sleep(self.step_ms / 1e3)  # the heavy simulator
        self.t += 1
        self.pos += float(np.clip(action[0], -0.2, 0.2)) + float(self.np_random.normal(0, 0.05))
        reached = abs(self.pos - 1.0) < 0.1
        obs = np.array([self.pos, 1.0], np.float32)
        return obs, -abs(self.pos - 1.0), reached, self.t >= 30, {"is_success": reached}


def policy(obs: Any) -> Any:
    """Step towards the goal, a bit timidly."""
    return np.array([np.clip(0.15 * np.sign(obs[1] - obs[0]), -0.2, 0.2)], np.float32)


@dataclass
class Args:
    out_dir: str
    """Where the journal goes (default: a temporary directory)."""
    ray: bool = False
    """Run the workers as Ray actors instead of local processes."""
    ray_address: str | None = None
    """With --ray: 'auto' or a cluster address (default: start a local Ray)."""
    workers: int = 4
    """Number of workers."""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out_dir", nargs="?", default=None)
    p.add_argument("--ray", action="store_true")
    p.add_argument("--ray-address", default=None)
    p.add_argument("--workers", type=int, default=4)
    ns = p.parse_args()
    args = Args(
        ns.out_dir or tempfile.mkdtemp(prefix="rlmesh-dist-"), ns.ray, ns.ray_address, ns.workers
    )
    seeds = list(range(64))

    t0 = time.perf_counter()
    single = rlmesh.run(policy, SlowReach(), seeds=seeds)
    t_single = time.perf_counter() - t0
    print(
        f"workers=None: {single.num_episodes} episodes, success {single.success_rate:.0%}, {t_single:.1f}s"
    )

    workers = rlmesh.Workers(
        n=args.workers,
        backend="ray" if args.ray else "processes",
        address=args.ray_address if args.ray else None,
    )
    journal = f"{args.out_dir}/run.journal"
    t0 = time.perf_counter()
    # SlowReach (the class) is shipped: each worker builds its own env; the policy is pickled.
    many = rlmesh.run(policy, SlowReach, seeds=seeds, workers=workers, journal=journal)
    t_many = time.perf_counter() - t0
    print(
        f"workers={args.workers} ({workers.resolved_backend()}): {many.num_episodes} episodes, "
        f"success {many.success_rate:.0%}, {t_many:.1f}s"
    )
    for w in many.workers:
        print(
            f"  {w.worker}: {w.episodes} episodes on {w.host} (pid {w.pid}), env {w.env_ms:.0f} ms, model {w.model_ms:.0f} ms"
        )
    same = [(e.seed, e.steps, e.reward, e.success) for e in single.episodes] == [
        (e.seed, e.steps, e.reward, e.success) for e in many.episodes
    ]
    print(
        f"same episodes as one process: {same}; journal: {journal} (run again: nothing left to run)"
    )


if __name__ == "__main__":
    main()
