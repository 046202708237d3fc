"""CleanRL-style PPO on a Ray fleet of CartPole actors (needs ray and torch).

    pip install ".[ray,gymnasium]" torch==2.13.0   # from a clone (distribution rlmesh-py)
    python examples/train/ppo_fleet.py                          # 4 actors on a local Ray
    python examples/train/ppo_fleet.py --actors 1 --lanes 4     # one actor serving 4 lanes
    python examples/train/ppo_fleet.py --ray-address auto       # join a running cluster

``rlmesh.ray.EnvFleet`` starts one Ray actor per endpoint, each serving CartPole on its
node; ``fleet.vector_env()`` is a real ``gymnasium.vector.VectorEnv`` over all of them
(lanes in actor order, NEXT_STEP autoreset like ``gymnasium.make_vec``), so the training
loop is the one of ``ppo_cartpole.py`` unchanged. ``--local`` trains on
``gymnasium.make_vec`` with as many lanes instead: from the same seed both see the same
trajectory.

A local Ray is started on 127.0.0.1 only (``_node_ip_address``), so the fleet's
endpoints, which have no authentication, are not reachable from other hosts. On a real
cluster (``--ray-address``) they bind each node's address: keep the cluster on a
private network.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ppo_cartpole import train

import rlmesh.ray


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--actors", type=int, default=4, help="Ray actors, one endpoint each (default: 4)"
    )
    p.add_argument("--lanes", type=int, default=1, help="CartPole lanes per actor (default: 1)")
    p.add_argument(
        "--total-timesteps", type=int, default=20_000, help="environment steps (default: 20000)"
    )
    p.add_argument("--seed", type=int, default=1, help="seed for the envs and torch (default: 1)")
    p.add_argument(
        "--ray-address", help="join this Ray cluster (default: start a local Ray on 127.0.0.1)"
    )
    p.add_argument(
        "--local", action="store_true", help="train on gymnasium.make_vec instead (comparison)"
    )
    args = p.parse_args()
    num_envs = args.actors * args.lanes
    if args.local:
        envs = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="sync")
        t0 = time.perf_counter()
        try:
            returns = train(envs, args.total_timesteps, args.seed)
        finally:
            envs.close()
        report(returns, time.perf_counter() - t0)
        return

    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    t0 = time.perf_counter()
    if args.ray_address:
        ray.init(address=args.ray_address, log_to_driver=False)
    else:
        ray.init(
            address="local",
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            log_to_driver=False,
        )
    t_ray = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        with rlmesh.ray.EnvFleet("CartPole-v1", args.actors, lanes=args.lanes) as fleet:
            print(
                f"Ray up in {t_ray:.1f}s; {args.actors} actors serving in {time.perf_counter() - t0:.1f}s at "
                f"{', '.join(fleet.addresses)}"
            )
            envs = fleet.vector_env("gymnasium")
            t0 = time.perf_counter()
            try:
                returns = train(envs, args.total_timesteps, args.seed)
            finally:
                envs.close()
            report(returns, time.perf_counter() - t0)
    finally:
        ray.shutdown()


def report(returns: list[float], seconds: float) -> None:
    last = returns[-20:] or [0.0]
    print(
        f"{len(returns)} episodes, mean return of the last {len(last)}: {np.mean(last):.1f} ({seconds:.1f}s)"
    )


if __name__ == "__main__":
    main()
