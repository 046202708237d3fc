"""Distributed evaluation (``workers=``) against the single loop, in the same run.

Scenarios (each reported as the median and range of interleaved pairs, single first):

1. **sleep env**: 200 episodes of an env whose step sleeps 5 ms (a stand-in for a heavy
   simulator), ``workers=8`` on this machine's cores vs ``workers=None``. Goal: >= 6x.
2. **dispatch overhead**: per-episode cost of handing an episode to a worker and getting
   its result back, from the slope of two run lengths of one-step episodes with one
   worker (start-up cancels out) minus the in-process cost of such an episode. Goal: <= 5 ms.
3. **CPU-bound CartPole**: 2 workers vs ``workers=None`` on CartPole with a policy that
   balances for 500 steps. Goal: >= 1.6x on 2 cores.
4. ``--ray``: scenario 1 on Ray actors (run it in a loopback-only network namespace,
   e.g. ``unshare -n sh -c 'ip link set lo up; python benchmarks/bench_distributed.py --ray'``);
   the start-up of a local Ray is timed and reported on its own, outside the pairs. Twice:
   actors started by every run (``workers=Workers(...)``, actor start-up included), then
   on a warm pool (``workers=Workers(...).start()``) whose start-up is reported on its own.

Timings include starting the workers (processes backend) every run; on a shared 2-core
machine only same-run ratios mean anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import rlmesh


class SleepEnv:
    """Fixed-length episodes whose step sleeps ``sleep_s`` (no CPU)."""

    metadata: dict[str, Any] = {}

    def __init__(self, sleep_s: float = 0.005, length: int = 20) -> None:
        import gymnasium as gym

        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.sleep_s, self.length, self.t = sleep_s, length, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        self.t += 1
        return np.zeros(4, np.float32), 1.0, self.t >= self.length, False, {"is_success": True}


def sleep_env() -> SleepEnv:
    return SleepEnv(0.005, 20)


def one_step_env() -> SleepEnv:
    return SleepEnv(0.0, 1)


def zero_policy(obs: Any) -> int:
    return 0


def balance(obs: Any) -> int:
    """Keeps CartPole up for the whole 500 steps (angle + angular velocity + a little position)."""
    return int(obs[2] + 0.5 * obs[3] + 0.01 * obs[0] + 0.1 * obs[1] > 0)


@dataclass
class Args:
    pairs: int = 5
    """Interleaved (single, workers) pairs per scenario (>= 5)."""
    episodes: int = 200
    """Episodes of the sleep-env scenario."""
    workers: int = 8
    """Workers of the sleep-env scenario."""
    ray: bool = False
    """Also run the sleep-env scenario on a local Ray (inside `unshare -n`)."""


def _pairs(
    a: Callable[[], Any], b: Callable[[], Any], pairs: int
) -> tuple[list[float], list[float]]:
    ta, tb = [], []
    for _ in range(pairs):
        for fn, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return ta, tb


def _ratio(ta: list[float], tb: list[float]) -> str:
    ratios = [x / y for x, y in zip(ta, tb, strict=True)]
    return (
        f"single {statistics.median(ta):.2f}s, workers {statistics.median(tb):.2f}s -> "
        f"speed-up median {statistics.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f})"
    )


def sleep_scenario(args: Args, workers: Any, label: str) -> None:
    seeds = list(range(args.episodes))
    single = lambda: rlmesh.run(zero_policy, sleep_env(), seeds=seeds)  # noqa: E731
    many = lambda: rlmesh.run(zero_policy, sleep_env, seeds=seeds, workers=workers)  # noqa: E731
    ta, tb = _pairs(single, many, args.pairs)
    print(
        f"[sleep env, {args.episodes} episodes x 20 steps x 5 ms, {label}] {_ratio(ta, tb)} (goal >= 6x)"
    )


def dispatch_scenario(args: Args) -> None:
    short, long = 50, 450
    seeds_s, seeds_l = list(range(short)), list(range(long))
    per_local = []
    slopes = []
    for _ in range(args.pairs):
        t0 = time.perf_counter()
        rlmesh.run(zero_policy, one_step_env(), seeds=seeds_l)
        per_local.append((time.perf_counter() - t0) / long)
        times = []
        for seeds in (seeds_s, seeds_l):
            t0 = time.perf_counter()
            rlmesh.run(zero_policy, one_step_env, seeds=seeds, workers=1)
            times.append(time.perf_counter() - t0)
        slopes.append((times[1] - times[0]) / (long - short))
    over = [(s - p) * 1e3 for s, p in zip(slopes, per_local, strict=True)]
    print(
        f"[dispatch overhead, one-step episodes, 1 worker] {statistics.median(over):.2f} ms per episode "
        f"(range {min(over):.2f}-{max(over):.2f}; in-process episode {statistics.median(per_local) * 1e3:.3f} ms) (goal <= 5 ms)"
    )


def cartpole_scenario(args: Args) -> None:
    import gymnasium as gym

    seeds = list(range(2000))
    single = lambda: rlmesh.run(balance, gym.make("CartPole-v1"), seeds=seeds)  # noqa: E731
    many = lambda: rlmesh.run(balance, "CartPole-v1", seeds=seeds, workers=2)  # noqa: E731
    steps = single().total_steps
    ta, tb = _pairs(single, many, args.pairs)
    print(
        f"[CPU-bound CartPole, {len(seeds)} episodes, {steps} steps, 2 workers] {_ratio(ta, tb)} (goal >= 1.6x)"
    )


def ray_scenario(args: Args) -> None:
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    t0 = time.perf_counter()
    ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    startup = time.perf_counter() - t0
    try:
        print(f"[ray] local Ray start-up {startup:.2f}s (ray.init; outside the pairs below)")
        workers = rlmesh.Workers(n=args.workers, backend="ray")
        actors = []
        for _ in range(
            3
        ):  # a run of one one-step episode per actor: creating the actors is all it does
            t0 = time.perf_counter()
            rlmesh.run(zero_policy, one_step_env, seeds=list(range(args.workers)), workers=workers)
            actors.append(time.perf_counter() - t0)
        print(
            f"[ray] starting {args.workers} actors per run: median {statistics.median(actors):.2f}s "
            f"(range {min(actors):.2f}-{max(actors):.2f}; each is a new process that imports ray, then rlmesh)"
        )
        sleep_scenario(args, workers, f"{args.workers} Ray actors, actor start-up included")
        t0 = time.perf_counter()
        pool = rlmesh.Workers(n=args.workers, backend="ray", progress=False).start()
        print(
            f"[ray] warm pool of {args.workers} actors: start-up {pool.startup_seconds:.2f}s "
            f"(rlmesh.Workers(...).start(), {time.perf_counter() - t0:.2f}s wall; once, outside the pairs below)"
        )
        try:
            sleep_scenario(args, pool, f"warm pool of {args.workers} Ray actors, start-up excluded")
        finally:
            pool.close()
    finally:
        ray.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=Args.pairs)
    p.add_argument("--episodes", type=int, default=Args.episodes)
    p.add_argument("--workers", type=int, default=Args.workers)
    p.add_argument("--ray", action="store_true")
    p.add_argument("--only", choices=["sleep", "dispatch", "cartpole", "ray"], default=None)
    ns = p.parse_args()
    args = Args(pairs=max(5, ns.pairs), episodes=ns.episodes, workers=ns.workers, ray=ns.ray)
    print(f"cores: {len(os.sched_getaffinity(0))}, pairs: {args.pairs}")
    if ns.only in (None, "sleep"):
        sleep_scenario(
            args,
            rlmesh.Workers(n=args.workers, backend="processes", progress=False),
            f"{args.workers} processes",
        )
    if ns.only in (None, "dispatch"):
        dispatch_scenario(args)
    if ns.only in (None, "cartpole"):
        cartpole_scenario(args)
    if args.ray or ns.only == "ray":
        ray_scenario(args)


if __name__ == "__main__":
    main()
