"""The torch and jax flavours against the numpy flavour, in the same run (issue 13).

- torch ``RemoteEnv`` step on scalar CartPole (actions as Python ints, and as 0-d
  tensors) vs ``rlmesh.numpy.RemoteEnv``;
- jax ``RemoteVectorEnv`` step on an 8-lane CartPole vector env (actions as one
  ``jax.Array``) vs ``rlmesh.numpy.RemoteVectorEnv`` (actions as one ndarray).

The server runs in a child process; the clients take turns on it in bursts of 100
steps, each step timed on its own, so machine noise hits every flavour alike; the
ratio of the median step times is reported. Goal: each framework step costs at most
1.2x the numpy step. Only the ratios mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from _common import served

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


def _interleaved(
    address: str,
    clients: dict[str, tuple[Any, Callable[[Any], Callable[[int], None]]]],
    n: int,
    burst: int = 100,
) -> dict[str, list[float]]:
    """µs of every single step; the clients take turns on one server in bursts of ``burst`` steps.

    Connecting (untimed) and a short warm-up open every burst; each step is timed on
    its own, so a spell of machine noise lands on every flavour alike and the medians
    of the per-step times are robust to it.
    """
    out: dict[str, list[float]] = {name: [] for name in clients}
    clock = time.perf_counter_ns
    for _ in range(max(1, n // burst)):
        for name, (cls, make_step) in clients.items():
            with cls(address) as env:
                env.reset(seed=0)
                fn = make_step(env)
                for i in range(20):
                    fn(i)
                times = out[name]
                for i in range(burst):
                    t0 = clock()
                    fn(i)
                    times.append((clock() - t0) / 1e3)
    return out


def _summary(times: dict[str, list[float]], base: str) -> dict[str, float]:
    base_med = statistics.median(times[base])
    base_mean = statistics.fmean(times[base])
    result: dict[str, float] = {}
    for name, values in times.items():
        med, mean = statistics.median(values), statistics.fmean(values)
        result[f"{name}_median_us"] = med
        note = ""
        if name != base:
            result[f"{name}_ratio"] = med / base_med
            note = f"   {med / base_med:5.2f}x numpy (median), {mean / base_mean:5.2f}x (mean)"
        print(f"  {name:34s} median {med:8.1f} us  mean {mean:8.1f} us{note}")
    return result


def bench_torch(transport: str, n: int) -> dict[str, float]:
    import torch

    import rlmesh.torch as rt

    ints = [0, 1]
    tensors = [torch.tensor(0), torch.tensor(1)]
    print(f"scalar CartPole step ({transport}), {n} interleaved steps")
    clients = {
        "numpy RemoteEnv (int actions)": (rn.RemoteEnv, lambda e: _scalar_stepper(e, ints)),
        "torch RemoteEnv (int actions)": (rt.RemoteEnv, lambda e: _scalar_stepper(e, ints)),
        "torch RemoteEnv (tensor actions)": (rt.RemoteEnv, lambda e: _scalar_stepper(e, tensors)),
    }
    with served("CartPole-v1", transport) as address:
        times = _interleaved(address, clients, n)
    return _summary(times, "numpy RemoteEnv (int actions)")


def bench_jax(transport: str, n: int) -> dict[str, float]:
    import jax.numpy as jnp

    import rlmesh.jax as rj

    np_actions = [((np.arange(LANES) + k) % 2).astype(np.int64) for k in range(2)]
    jax_actions = [jnp.asarray(a) for a in np_actions]
    print(f"{LANES}-lane vector CartPole step ({transport}), {n} interleaved steps")
    clients = {
        "numpy RemoteVectorEnv": (rn.RemoteVectorEnv, lambda e: _vector_stepper(e, np_actions)),
        "jax RemoteVectorEnv": (rj.RemoteVectorEnv, lambda e: _vector_stepper(e, jax_actions)),
    }
    with served("bench_flavours:cartpole8", transport) as address:
        times = _interleaved(address, clients, n)
    return _summary(times, "numpy RemoteVectorEnv")


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--transports", default="tcp,unix")
    args = p.parse_args(argv)
    out: dict[str, dict[str, float]] = {}
    for t in args.transports.split(","):
        out[f"torch-{t}"] = bench_torch(t, args.steps)
        out[f"jax-{t}"] = bench_jax(t, args.steps)
    return out


if __name__ == "__main__":
    main()
