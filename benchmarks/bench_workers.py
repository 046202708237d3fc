"""How long the process layer takes: a distributed run, a warm pool's run, a session worker's start.

Each measure is the median of ``--repeat`` runs in this process, printed in the form
``benchmarks/ab_trees.py`` collects, so two source trees compare in the same minutes:

    python benchmarks/ab_trees.py --a /tmp/before/src --b src --pairs 5 -- bench_workers.py

- ``distributed run``: ``rlmesh.run(policy, "CartPole-v1", seeds=range(24),
  workers=Workers(n=3, backend="processes"))``, whole: starting the worker processes (and
  what starts them), building the envs, 24 episodes, stopping everything;
- ``warm pool run``: the same run on a pool started beforehand (``Workers(...).start()``);
- ``session connect, worker on demand``: a client's connect to an
  ``EnvServer("CartPole-v1", sessions=2)`` whose session worker starts for it (a fork and
  the env's build; the endpoint's first connect, which also starts what forks the workers,
  is left out).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import rlmesh
import rlmesh.numpy as rnp


def balance(obs: Any) -> int:
    return int(obs[2] + 0.5 * obs[3] > 0)


def _median_us(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="runs per measure (the median is printed)")
    p.add_argument("--episodes", type=int, default=24)
    args = p.parse_args()
    seeds = list(range(args.episodes))
    workers = rlmesh.Workers(n=3, backend="processes", progress=False)

    def run() -> None:
        rlmesh.run(balance, "CartPole-v1", seeds=seeds, workers=workers)

    us = _median_us(run, args.repeat)
    print(f"{'distributed run, 3 processes':44s} {us:12.0f} us")
    with workers.start() as pool:

        def warm() -> None:
            rlmesh.run(balance, "CartPole-v1", seeds=seeds, workers=pool)

        us = _median_us(warm, args.repeat)
    print(f"{'warm pool run, 3 processes':44s} {us:12.0f} us")
    options = rlmesh.ServeOptions(workflow_edition="2026.06")
    server = rlmesh.EnvServer("CartPole-v1", "127.0.0.1:0", sessions=2, options=options).start()
    try:
        times = []
        for i in range(max(5, args.repeat) + 1):
            t0 = time.perf_counter()
            with rnp.RemoteEnv(server.address) as env:
                env.reset(seed=0)
            if i:  # the endpoint's first worker also starts what forks the workers
                times.append(time.perf_counter() - t0)
            time.sleep(0.2)  # let the ended session's worker go
        us = statistics.median(times) * 1e6
    finally:
        server.shutdown()
    print(f"{'session connect, worker on demand':44s} {us:12.0f} us")


if __name__ == "__main__":
    main()
