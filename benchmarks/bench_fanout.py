"""One vector env over many endpoints, stepped by sending to all then gathering (issue 26).

    python benchmarks/bench_fanout.py [--steps 2000] [--slow-steps 300] [--reps 7]

1. A round over 4 scalar CartPole endpoints (servers in child processes) through
   ``rlmesh.numpy.RemoteVectorEnv([a0, a1, a2, a3])`` vs one step of one endpoint
   (``rlmesh.numpy.RemoteEnv`` on a fifth, identical server); goal: round <= 3x step.
   Beside it, the raw-socket floor of the same fan-out (``_floor.fan_out``: no rlmesh
   code, the least any served CartPole can pay on this machine), and the same four
   endpoints stepped one after another (each reply read before the next request).
2. A round over 8 endpoints whose step sleeps 2 ms (a heavy simulator stand-in) vs one
   step of one such endpoint; goal: round <= 1.3x step (the sleeps overlap).

Every figure is the median of ``--reps`` (>= 5) interleaved pairs (single, round; the
order alternates), measured in the same run; only same-run ratios mean anything on a
shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from typing import Any

import _floor
import gymnasium as gym
import numpy as np
from _common import served

import rlmesh.numpy as rnp

SLEEP_SECONDS = 0.002


class SleepyCartPole(gym.Wrapper):  # type: ignore[type-arg]
    """CartPole whose every step sleeps 2 ms first (a heavy simulator stand-in)."""

    def step(self, action: Any) -> Any:
        time.sleep(SLEEP_SECONDS)
        return self.env.step(action)


def make_sleepy() -> gym.Env:  # type: ignore[type-arg]
    """``bench_fanout:make_sleepy``: the target the 2 ms endpoints serve."""
    return SleepyCartPole(gym.make("CartPole-v1"))


def _summary(label: str, values: list[float]) -> float:
    med = statistics.median(values)
    print(
        f"  {label:40s} {med:9.1f} us  (min {min(values):.1f}, max {max(values):.1f}, {len(values)} pairs)"
    )
    return med


def _ratios(rounds: list[float], singles: list[float]) -> tuple[float, float, float]:
    r = [a / b for a, b in zip(rounds, singles)]
    return statistics.median(r), min(r), max(r)


def fan_out_vs_step(
    target: str, endpoints: int, steps: int, reps: int, sequential: bool = False
) -> tuple[list[float], list[float], list[float]]:
    """Per-pair µs of one step on a lone endpoint and of one fanned-out round over ``endpoints``.

    With ``sequential``, also the per-pair µs of a round stepping the same endpoints one
    after another (each reply read before the next request is sent), timed against the
    lone step in pairs of its own (the third list; empty otherwise).
    """
    with contextlib.ExitStack() as stack:
        addresses = [stack.enter_context(served(target, "tcp")) for _ in range(endpoints + 1)]
        lone = stack.enter_context(rnp.RemoteEnv(addresses[-1]))
        many = rnp.RemoteVectorEnv(addresses[:-1])
        stack.callback(many.close)
        lone.reset(seed=0)
        many.reset(seed=0)
        batches = [np.zeros(endpoints, dtype=np.int64), np.ones(endpoints, dtype=np.int64)]

        def one(i: int) -> None:
            if lone.step(i & 1)[2]:
                lone.reset()

        def round_(i: int) -> None:
            many.step(batches[i & 1])

        def in_turn(i: int) -> None:  # the same clients, each request waiting for its reply
            for part in many._fan.parts:
                if part.client.step(i & 1)[2]:
                    part.client._reset([], None, [])

        singles, rounds = _floor.time_pairs(one, round_, steps, reps)
        turns: list[float] = []
        if sequential:
            _, turns = _floor.time_pairs(one, in_turn, steps, reps)
        return singles, rounds, turns


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--steps", type=int, default=2_000, help="calls per timing, CartPole (default: 2000)"
    )
    p.add_argument(
        "--slow-steps",
        type=int,
        default=300,
        help="calls per timing, 2 ms endpoints (default: 300)",
    )
    p.add_argument("--reps", type=int, default=7, help="interleaved pairs, >= 5 (default: 7)")
    args = p.parse_args()
    reps = max(5, args.reps)
    print(f"cores: {os.cpu_count()}; medians of {reps} interleaved pairs")

    print("1. 4 CartPole endpoints, fanned out (rlmesh.numpy.RemoteVectorEnv([...]))")
    singles, rounds, turns = fan_out_vs_step("CartPole-v1", 4, args.steps, reps, sequential=True)
    _summary("one endpoint: step", singles)
    _summary("4 endpoints fanned out: one round", rounds)
    med, lo, hi = _ratios(rounds, singles)
    print(f"  round / step = {med:.2f}x (range {lo:.2f}-{hi:.2f}; goal <= 3x)")
    _summary("4 endpoints one after another: one round", turns)
    print(
        f"  sequential round / fanned-out round = {statistics.median(turns) / statistics.median(rounds):.2f}x"
    )
    fsingles, frounds = _floor.fan_out(args.steps, reps)
    _summary("raw-socket floor: step", fsingles)
    _summary("raw-socket floor: round fanned out", frounds)
    fmed, flo, fhi = _ratios(frounds, fsingles)
    print(f"  raw-socket floor round / step = {fmed:.2f}x (range {flo:.2f}-{fhi:.2f})")

    print("2. 8 endpoints whose step sleeps 2 ms, fanned out")
    singles, rounds, _ = fan_out_vs_step("bench_fanout:make_sleepy", 8, args.slow_steps, reps)
    _summary("one endpoint: step", singles)
    _summary("8 endpoints fanned out: one round", rounds)
    med, lo, hi = _ratios(rounds, singles)
    print(f"  round / step = {med:.2f}x (range {lo:.2f}-{hi:.2f}; goal <= 1.3x)")


if __name__ == "__main__":
    main()
