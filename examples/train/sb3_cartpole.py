"""Stable-Baselines3 PPO on a remote CartPole (needs torch and stable-baselines3).

    rlmesh serve CartPole-v1 --address 127.0.0.1:50051
    python examples/train/sb3_cartpole.py --address 127.0.0.1:50051

``rlmesh.gymnasium.RemoteEnv`` is a real ``gymnasium.Env``, so SB3 takes it as it
is. Without ``--address`` the script serves CartPole itself, in this process.
For ``SubprocVecEnv`` pass factories, never live envs (a connection cannot be
pickled): ``SubprocVecEnv([lambda a=a: RemoteEnv(a) for a in addresses])``.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.evaluation import evaluate_policy

import rlmesh
import rlmesh.gymnasium


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", help="a served CartPole (default: serve one in this process)")
    p.add_argument(
        "--local", action="store_true", help="train on gymnasium.make instead (comparison)"
    )
    p.add_argument(
        "--total-timesteps", type=int, default=20_000, help="environment steps (default: 20000)"
    )
    p.add_argument("--seed", type=int, default=1, help="seed (default: 1)")
    args = p.parse_args()
    server = None
    if args.local:
        env: gym.Env = gym.make("CartPole-v1")  # type: ignore[type-arg]
    else:
        address = args.address
        if address is None:
            server = rlmesh.EnvServer(gym.make("CartPole-v1"), "127.0.0.1:0").start()
            address = server.address
        env = rlmesh.gymnasium.RemoteEnv(address)
    t0 = time.perf_counter()
    try:
        model = PPO("MlpPolicy", env, seed=args.seed, device="cpu", verbose=0)
        model.learn(total_timesteps=args.total_timesteps)
        mean, std = evaluate_policy(model, env, n_eval_episodes=5)
    finally:
        env.close()
        if server is not None:
            server.shutdown()
    print(
        f"trained {args.total_timesteps} steps in {time.perf_counter() - t0:.1f}s; "
        f"mean return {mean:.1f} +/- {std:.1f}"
    )


if __name__ == "__main__":
    main()
