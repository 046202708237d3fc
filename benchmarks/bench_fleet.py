"""CleanRL PPO on a Ray env fleet vs on ``gymnasium.make_vec``, same run (issue 26).

RUN IT INSIDE A LOOPBACK-ONLY NETWORK NAMESPACE (as root):

    unshare -n sh -c 'ip link set lo up && RAY_USAGE_STATS_ENABLED=0 \\
        python benchmarks/bench_fleet.py [--steps 8192] [--reps 5] [--actors 4 --lanes 1]'

Ray advertises and dials the host's interface address unless it sees nothing but
loopback, so this script refuses to start Ray when ``socket.if_nameindex()`` lists any
interface other than ``lo`` (``--allow-network`` overrides; Ray is still pinned to
127.0.0.1 then).

1. Ray start-up: ``ray.init()`` of a local Ray, and the fleet's start (its actors
   building and serving CartPole), each reported on its own: they are paid once.
2. Training: the CleanRL-style PPO of ``examples/train/ppo_cartpole.py`` for ``--steps``
   env steps on ``fleet.vector_env("gymnasium")`` (``--actors`` actors of ``--lanes``
   lanes, 4 lanes in all by default) and on ``gymnasium.make_vec`` with as many lanes,
   ``--reps`` interleaved pairs with the order alternating; the median ratio
   fleet/make_vec is reported with its range. Same seed, so both runs of a pair see the
   same trajectory ("same result") and the ratio is the fleet's overhead.
   For attribution, each rep also trains on the same lanes served by a plain child
   process (``rlmesh serve --num-envs``, no Ray; 1 endpoint): fleet/served isolates what
   hosting the endpoints in Ray actors costs beyond serving them at all.

The default 4 actors of 1 lane each need ``RemoteVectorEnv`` over many endpoints; where
it is missing, ``--actors 1 --lanes 4`` measures one actor serving 4 lanes.
Only same-run ratios mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym

ROOT = Path(__file__).resolve().parent.parent


def loopback_only() -> bool:
    return [name for _, name in socket.if_nameindex()] == ["lo"]


sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common


def timed(make: Any, train: Any, steps: int) -> tuple[float, Any]:
    envs = make()
    try:
        t0 = time.perf_counter()
        out = train(envs, steps, seed=1)
        return time.perf_counter() - t0, out
    finally:
        envs.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--steps", type=int, default=8192, help="env steps per training run (default: 8192)"
    )
    p.add_argument("--reps", type=int, default=5, help="interleaved pairs (default: 5)")
    p.add_argument("--actors", type=int, default=4, help="fleet actors (default: 4)")
    p.add_argument("--lanes", type=int, default=1, help="lanes per actor (default: 1)")
    p.add_argument(
        "--allow-network", action="store_true", help="start Ray even with interfaces besides lo"
    )
    args = p.parse_args()
    if not loopback_only() and not args.allow_network:
        names = [name for _, name in socket.if_nameindex()]
        sys.exit(
            f"refusing to start Ray: this network namespace has interfaces {names}, not just lo. Run it as "
            "`unshare -n sh -c 'ip link set lo up && python benchmarks/bench_fleet.py'` (root), "
            "or pass --allow-network"
        )
    try:
        import torch
    except ImportError:
        sys.exit("bench_fleet needs torch (the PPO learner)")
    import ray
    from _common import served

    import rlmesh.gymnasium
    import rlmesh.ray

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT / "examples" / "train"))
    from ppo_cartpole import train

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    num_envs = args.actors * args.lanes
    t0 = time.perf_counter()
    ray.init(
        address="local",
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    print(f"Ray start-up: ray.init() {time.perf_counter() - t0:.2f}s")
    try:
        t0 = time.perf_counter()
        with rlmesh.ray.EnvFleet("CartPole-v1", args.actors, lanes=args.lanes) as fleet:
            print(
                f"Ray start-up: EnvFleet of {args.actors} actors x {args.lanes} lanes serving in "
                f"{time.perf_counter() - t0:.2f}s"
            )

            def fleet_envs() -> Any:
                return fleet.vector_env("gymnasium")

            try:
                fleet_envs().close()
            except NotImplementedError as exc:
                sys.exit(f"{exc} (e.g. --actors 1 --lanes {num_envs})")

            def local_envs() -> Any:
                return gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode="sync")

            with served("CartPole-v1", "tcp", "--num-envs", str(num_envs)) as address:

                def served_envs() -> Any:
                    return rlmesh.gymnasium.RemoteVectorEnv(address)

                arms = {"fleet": fleet_envs, "served": served_envs, "make_vec": local_envs}
                for make in (
                    arms.values()
                ):  # warm up: torch imports parts of itself on the first backward pass
                    timed(make, train, 1024)
                label = f"CleanRL PPO {args.steps} steps, {num_envs} lanes"
                times: dict[str, list[float]] = {name: [] for name in arms}
                names = list(arms)
                for rep in range(args.reps):
                    order = names[rep % 3 :] + names[: rep % 3]  # rotate who goes first
                    outs = {}
                    for name in order:
                        seconds, outs[name] = timed(arms[name], train, args.steps)
                        times[name].append(seconds)
                    same = outs["fleet"] == outs["make_vec"] == outs["served"]
                    f, s_, m = (times[k][-1] for k in names)
                    print(
                        f"{label}: fleet {f:.2f}s, served {s_:.2f}s, make_vec {m:.2f}s; "
                        f"fleet/make_vec {f / m:.2f}x; same result: {same}"
                    )
                for a, b in (("fleet", "make_vec"), ("served", "make_vec"), ("fleet", "served")):
                    ratios = [x / y for x, y in zip(times[a], times[b])]
                    print(
                        f"{label}: {a}/{b} median ratio {statistics.median(ratios):.2f}x over {args.reps} reps "
                        f"(range {min(ratios):.2f}-{max(ratios):.2f}x)"
                        + (
                            f" [fleet: {args.actors} actors x {args.lanes} lanes]"
                            if a == "fleet"
                            else ""
                        )
                    )
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
