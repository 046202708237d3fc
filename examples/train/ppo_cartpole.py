"""CleanRL-style PPO on a remote vector CartPole, in one readable file (needs torch).

    rlmesh serve CartPole-v1 --num-envs 4 --address 127.0.0.1:50051   # lanes autoreset NEXT_STEP
    python examples/train/ppo_cartpole.py --address 127.0.0.1:50051

Without ``--address`` it serves the lanes itself (in this process); ``--local``
trains on ``gymnasium.make_vec`` instead, for comparison: from the same seed both
runs see the same trajectory. The env is a real ``gymnasium.vector.VectorEnv``,
so the loop below is CleanRL's, with one change for NEXT_STEP autoreset: the step
after an episode ends only resets that lane (its action is ignored, reward 0), so
it is masked out of the loss.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical

import rlmesh.gymnasium


def layer(i: int, o: int, std: float = float(np.sqrt(2))) -> nn.Linear:
    lin = nn.Linear(i, o)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.constant_(lin.bias, 0.0)
    return lin


class Agent(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0)
        )
        self.actor = nn.Sequential(
            layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, n_actions, 0.01)
        )

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def act(self, x: torch.Tensor, action: torch.Tensor | None = None):  # type: ignore[no-untyped-def]
        dist = Categorical(logits=self.actor(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(x)


def train(
    envs: gym.vector.VectorEnv, total_timesteps: int, seed: int = 1, num_steps: int = 128
) -> list[float]:
    """PPO (CleanRL's defaults for CartPole); returns the finished episodes' returns."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    assert isinstance(envs.single_action_space, gym.spaces.Discrete)  # CleanRL's check passes as is
    n = envs.num_envs
    obs_dim = int(np.prod(envs.single_observation_space.shape))
    agent = Agent(obs_dim, int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    gamma, lam, clip, epochs, minibatches = 0.99, 0.95, 0.2, 4, 4
    obs_b = torch.zeros((num_steps, n, obs_dim))
    act_b = torch.zeros((num_steps, n), dtype=torch.long)
    logp_b, rew_b, done_b, val_b = (torch.zeros((num_steps, n)) for _ in range(4))
    returns_seen: list[float] = []
    ep_return = np.zeros(n)
    next_obs = torch.tensor(envs.reset(seed=seed)[0], dtype=torch.float32)
    next_done = torch.zeros(n)
    iterations = max(1, total_timesteps // (num_steps * n))
    for it in range(iterations):
        for g in optimizer.param_groups:
            g["lr"] = 2.5e-4 * (1.0 - it / iterations)
        for step in range(num_steps):
            obs_b[step], done_b[step] = next_obs, next_done
            with torch.no_grad():
                action, logp, _, value = agent.act(next_obs)
            act_b[step], logp_b[step], val_b[step] = action, logp, value.flatten()
            obs, reward, term, trunc, _ = envs.step(action.numpy())
            done = np.logical_or(term, trunc)
            ep_return += reward
            returns_seen += ep_return[done].tolist()
            ep_return[done] = 0.0
            rew_b[step] = torch.tensor(reward, dtype=torch.float32)
            next_obs, next_done = (
                torch.tensor(obs, dtype=torch.float32),
                torch.tensor(done, dtype=torch.float32),
            )
        with torch.no_grad():  # GAE
            adv = torch.zeros_like(rew_b)
            last = torch.zeros(n)
            next_value = agent.value(next_obs).flatten()
            for t in reversed(range(num_steps)):
                nonterminal = 1.0 - (next_done if t == num_steps - 1 else done_b[t + 1])
                nv = next_value if t == num_steps - 1 else val_b[t + 1]
                delta = rew_b[t] + gamma * nv * nonterminal - val_b[t]
                last = delta + gamma * lam * nonterminal * last
                adv[t] = last
            ret = adv + val_b
        valid = (1.0 - done_b).reshape(-1)  # NEXT_STEP: a step after `done` only resets its lane
        b_obs, b_act, b_logp = obs_b.reshape(-1, obs_dim), act_b.reshape(-1), logp_b.reshape(-1)
        b_adv, b_ret = adv.reshape(-1), ret.reshape(-1)
        size = num_steps * n
        for _ in range(epochs):
            order = rng.permutation(size)
            for start in range(0, size, size // minibatches):
                mb = order[start : start + size // minibatches]
                _, logp, entropy, value = agent.act(b_obs[mb], b_act[mb])
                ratio = (logp - b_logp[mb]).exp()
                a = b_adv[mb]
                a = (a - a.mean()) / (a.std() + 1e-8)
                w = valid[mb]
                pg = (
                    torch.max(-a * ratio, -a * ratio.clamp(1 - clip, 1 + clip)) * w
                ).sum() / w.sum()
                v_loss = 0.5 * (((value.flatten() - b_ret[mb]) ** 2) * w).sum() / w.sum()
                loss = pg - 0.01 * (entropy * w).sum() / w.sum() + 0.5 * v_loss
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optimizer.step()
    return returns_seen


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--address", help="a served vector CartPole (default: serve 4 lanes in this process)"
    )
    p.add_argument(
        "--local", action="store_true", help="train on gymnasium.make_vec instead (comparison)"
    )
    p.add_argument(
        "--num-envs",
        type=int,
        default=4,
        help="lanes when serving in-process or --local (default: 4)",
    )
    p.add_argument(
        "--total-timesteps", type=int, default=50_000, help="environment steps (default: 50000)"
    )
    p.add_argument("--seed", type=int, default=1, help="seed for the env and torch (default: 1)")
    args = p.parse_args()
    server = None
    if args.local:
        envs: gym.vector.VectorEnv = gym.make_vec(
            "CartPole-v1", num_envs=args.num_envs, vectorization_mode="sync"
        )
    else:
        address = args.address
        if address is None:
            lanes = rlmesh.serve.Lanes([gym.make("CartPole-v1") for _ in range(args.num_envs)])
            server = rlmesh.EnvServer(lanes, "127.0.0.1:0").start()
            address = server.address
        envs = rlmesh.gymnasium.RemoteVectorEnv(address)
    t0 = time.perf_counter()
    try:
        returns = train(envs, args.total_timesteps, args.seed)
    finally:
        envs.close()
        if server is not None:
            server.shutdown()
    last = returns[-20:] or [0.0]
    print(
        f"{len(returns)} episodes, mean return of the last {len(last)}: {np.mean(last):.1f} "
        f"({time.perf_counter() - t0:.1f}s)"
    )


if __name__ == "__main__":
    main()
