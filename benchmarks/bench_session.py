"""Benchmark: per-step overhead of ``Session.run`` over a hand-written loop, CartPole.

Both loops drive the same env object with the same policy, so the difference is
what the eval loop adds per step: the route (bridge, corner call), timings,
accounting, and -- with ``--hooks`` -- one ``StepEvent`` per step.

Scenarios:

- ``local``: a Gymnasium ``CartPole-v1`` in-process (DESIGN: no loopback server);
- ``tcp``: the same env behind ``rlmesh.EnvServer`` on ``127.0.0.1:0``, bare
  ``rlmesh.numpy.RemoteEnv`` loop versus ``rlmesh.run(model, address)``.

Run: ``python benchmarks/bench_session.py [--steps N] [--reps R] [--scenario local|tcp|all]``.
Prints the median microseconds per step of each loop and the overhead.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

import rlmesh
import rlmesh.eval as ev
import rlmesh.numpy
from rlmesh.models import NumpyModel


@dataclass
class Args:
    steps: int = 20_000
    """Env steps per timed repetition."""
    reps: int = 5
    """Timed repetitions (the median is reported)."""
    scenario: str = "all"
    """``local``, ``tcp`` or ``all``."""


def policy(obs: Any) -> int:
    """Push toward the pole's lean (a cheap, deterministic CartPole policy)."""
    return int(obs[2] > 0)


class NoOpHooks(ev.RunHooks):
    """Hooks that do nothing: measures the cost of building one StepEvent per step."""

    def on_step(self, event: ev.StepEvent) -> None:
        pass


def bare_loop(env: Any, steps: int) -> float:
    """Seconds for ``steps`` env steps in a hand-written loop (reset on episode end)."""
    obs, _ = env.reset(seed=0)
    seed = 0
    t0 = time.perf_counter()
    for _ in range(steps):
        obs, _r, terminated, truncated, _info = env.step(policy(obs))
        if terminated or truncated:
            seed += 1
            obs, _ = env.reset(seed=seed)
    return time.perf_counter() - t0


def session_loop(env: Any, steps: int, *, hooks: ev.RunHooks | None = None) -> tuple[float, int]:
    """Seconds and steps for ``Session.run`` episodes totalling at least ``steps`` steps."""
    model = NumpyModel(policy)
    total = 0
    elapsed = 0.0
    seed = 0
    with ev.session(model, env) as sess:
        while total < steps:
            t0 = time.perf_counter()
            result = sess.run(seeds=list(range(seed, seed + 50)), hooks=hooks)
            elapsed += time.perf_counter() - t0
            total += result.total_steps
            seed += 50
    return elapsed, total


def report(name: str, bare: list[float], loop: list[float]) -> None:
    b, s = statistics.median(bare), statistics.median(loop)
    print(
        f"{name:<28} bare {b:8.2f} us/step | Session.run {s:8.2f} us/step | overhead {s - b:+7.2f} us/step ({s / b:.2f}x)"
    )


def _measure(
    make_env: Callable[[], Any], args: Args, *, hooks: ev.RunHooks | None
) -> tuple[list[float], list[float]]:
    env = make_env()
    bare_loop(env, 1000)  # warm-up
    session_loop(env, 1000, hooks=hooks)
    bare, loop = [], []
    for _ in range(args.reps):
        bare.append(bare_loop(env, args.steps) / args.steps * 1e6)
        secs, total = session_loop(env, args.steps, hooks=hooks)
        loop.append(secs / total * 1e6)
    close = getattr(env, "close", None)
    if callable(close):
        close()
    return bare, loop


def bench_local(args: Args) -> None:
    """CartPole in-process: the eval loop's own per-step cost."""
    make = lambda: gym.make("CartPole-v1")  # noqa: E731
    report("local CartPole", *_measure(make, args, hooks=None))
    report("local CartPole + hooks", *_measure(make, args, hooks=NoOpHooks()))


def bench_tcp(args: Args) -> None:
    """TCP variant: CartPole behind EnvServer on 127.0.0.1, driven through its client."""
    server = rlmesh.EnvServer(gym.make("CartPole-v1"), "127.0.0.1:0").start()
    try:
        make = lambda: rlmesh.numpy.RemoteEnv(server.address)  # noqa: E731
        report("tcp CartPole (RemoteEnv)", *_measure(make, args, hooks=None))
    finally:
        server.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--steps", type=int, default=Args.steps)
    p.add_argument("--reps", type=int, default=Args.reps)
    p.add_argument("--scenario", choices=("local", "tcp", "all"), default=Args.scenario)
    ns = p.parse_args()
    args = Args(steps=ns.steps, reps=ns.reps, scenario=ns.scenario)
    np.random.seed(0)
    if args.scenario in ("local", "all"):
        bench_local(args)
    if args.scenario in ("tcp", "all"):
        bench_tcp(args)


if __name__ == "__main__":
    main()
