"""The torch and jax flavours against the numpy flavour, in the same run (issue 13).

- torch ``RemoteEnv`` step on scalar CartPole (actions as Python ints, and as 0-d
  tensors) vs ``rlmesh.numpy.RemoteEnv``;
- jax ``RemoteVectorEnv`` step on an 8-lane CartPole vector env (actions as one
  ``jax.Array``) vs ``rlmesh.numpy.RemoteVectorEnv`` (actions as one ndarray).

Each server runs in a child process; the flavours take turns on it (one session at a
time), repetition by repetition, so machine noise hits them alike. Goal: each
framework step costs at most 1.2x the numpy step. Only the ratios mean anything on
a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from _common import served, time_loop

import rlmesh.numpy as rn

LANES = 8


def cartpole8() -> Any:
    """The served vector env: 8 CartPole lanes in a gymnasium SyncVectorEnv."""
    return gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(LANES)])


def _scalar_stepper(env: Any, actions: list[Any]) -> Callable[[int], None]:
    def step(i: int) -> None:
        _, _, terminated, truncated, _ = env.step(actions[i & 1])
        if terminated or truncated:
            env.reset()

    return step


def _vector_stepper(env: Any, actions: list[Any]) -> Callable[[int], None]:
    def step(i: int) -> None:
        env.step(actions[i & 1])

    return step


def _alternate(
    address: str, clients: dict[str, tuple[Any, Callable[[Any], Callable[[int], None]]]], n: int, reps: int
) -> dict[str, list[float]]:
    """Mean µs per step of every client, one repetition each in turn."""
    out: dict[str, list[float]] = {name: [] for name in clients}
    for _ in range(reps):
        for name, (cls, make_step) in clients.items():
            with cls(address) as env:
                env.reset(seed=0)
                out[name] += time_loop(make_step(env), n, reps=1, warmup=100)
    return out


def _summary(times: dict[str, list[float]], base: str) -> dict[str, float]:
    base_med = statistics.median(times[base])
    result: dict[str, float] = {}
    for name, values in times.items():
        med = statistics.median(values)
        paired = [v / b for v, b in zip(values, times[base])]
        ratio = statistics.median(paired)
        result[f"{name}_us"] = med
        if name != base:
            result[f"{name}_ratio"] = ratio
        note = "" if name == base else f"   {ratio:5.2f}x numpy (paired median)"
        print(f"  {name:34s} {med:8.1f} us  (min {min(values):.1f}, max {max(values):.1f}){note}")
    assert base_med > 0
    return result


def bench_torch(transport: str, n: int, reps: int) -> dict[str, float]:
    import torch

    import rlmesh.torch as rt

    ints = [0, 1]
    tensors = [torch.tensor(0), torch.tensor(1)]
    print(f"scalar CartPole step ({transport})")
    with served("CartPole-v1", transport) as address:
        times = _alternate(
            address,
            {
                "numpy RemoteEnv (int actions)": (rn.RemoteEnv, lambda e: _scalar_stepper(e, ints)),
                "torch RemoteEnv (int actions)": (rt.RemoteEnv, lambda e: _scalar_stepper(e, ints)),
                "torch RemoteEnv (tensor actions)": (rt.RemoteEnv, lambda e: _scalar_stepper(e, tensors)),
            },
            n,
            reps,
        )
    return _summary(times, "numpy RemoteEnv (int actions)")


def bench_jax(transport: str, n: int, reps: int) -> dict[str, float]:
    import jax.numpy as jnp

    import rlmesh.jax as rj

    np_actions = [((np.arange(LANES) + k) % 2).astype(np.int64) for k in range(2)]
    jax_actions = [jnp.asarray(a) for a in np_actions]
    print(f"{LANES}-lane vector CartPole step ({transport})")
    with served("bench_flavours:cartpole8", transport) as address:
        times = _alternate(
            address,
            {
                "numpy RemoteVectorEnv": (rn.RemoteVectorEnv, lambda e: _vector_stepper(e, np_actions)),
                "jax RemoteVectorEnv": (rj.RemoteVectorEnv, lambda e: _vector_stepper(e, jax_actions)),
            },
            n,
            reps,
        )
    return _summary(times, "numpy RemoteVectorEnv")


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--transports", default="tcp,unix")
    args = p.parse_args(argv)
    out: dict[str, dict[str, float]] = {}
    for t in args.transports.split(","):
        out[f"torch-{t}"] = bench_torch(t, args.steps, args.reps)
        out[f"jax-{t}"] = bench_jax(t, args.steps, args.reps)
    return out


if __name__ == "__main__":
    main()
