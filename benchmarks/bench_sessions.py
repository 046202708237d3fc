"""Multi-session endpoints (issue 25): throughput of many clients, the cost of idle sessions,
session worker start-up, and a model server fusing predicts across sessions.

Scenarios, each measured as interleaved pairs (A, B, A, B ...) in one run; medians and
ranges are printed:

- ``aggregate``: 4 client processes stepping CartPole on one ``--sessions 4`` endpoint,
  aggregate steps/s, versus 1 client alone on the same endpoint (goal >= 1.6x on 2 cores).
- ``idle``: one client's step cost on a ``--sessions 4`` endpoint with 3 other sessions
  open and idle, versus a single-session endpoint (goal: within 10 %).
- ``start``: connect time when the session worker is started on demand (``--prewarm 0``:
  fork from the fork server + build the env) versus waiting ready (``--prewarm 1``), and
  on demand with ``RLMESH_WORKER_START=fresh`` (a fresh interpreter per worker).
- ``model``: 8 client processes driving one ``serve-model --sessions 8`` whose batched
  forward takes 2 ms whatever the batch size: predicts/s with fusion versus in turn
  (``--no-fuse``).

Run: ``python benchmarks/bench_sessions.py [--scenario all|aggregate|idle|start|model]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import threading
import time
from typing import Any

import numpy as np
from _common import report, served

import rlmesh.numpy as rn
from rlmesh.numpy import Model


class SlowBatched(Model):
    """``bench_sessions:SlowBatched``: a batched forward that costs 2 ms per call, any batch size."""

    def predict_batch(self, observations: Any) -> Any:
        threading.Event().wait(0.002)
        return np.array([int(o[2] + 0.5 * o[3] > 0) for o in observations])


# -- client processes --------------------------------------------------------------------------


def _env_client(address: str, begin: float, end: float) -> int:
    """Step until ``begin`` (wall clock), then count the steps done until ``end``."""
    env = rn.RemoteEnv(address)
    try:
        env.reset(seed=0)
        counted = 0
        i = 0
        while True:
            now = time.time()
            if now >= end:
                break
            _obs, _r, term, trunc, _info = env.step(i % 2)
            if term or trunc:
                env.reset()
            i += 1
            if now >= begin:
                counted += 1
    finally:
        env.close()
    return counted


def _model_client(address: str, begin: float, end: float) -> int:
    """Predict + step until ``begin`` (wall clock), then count the predicts done until ``end``."""
    import gymnasium as gym

    import rlmesh

    sess = rlmesh.RemoteModel(address).session(gym.make("CartPole-v1"))
    try:
        obs, _ = sess.reset(seed=0)
        counted = 0
        while True:
            now = time.time()
            if now >= end:
                break
            obs, _r, term, trunc, _ = sess.step(sess.predict(obs))
            if term or trunc:
                obs, _ = sess.reset()
            if now >= begin:
                counted += 1
    finally:
        sess.close()
    return counted


def _aggregate(pool: Any, fn: Any, address: str, clients: int, seconds: float) -> float:
    """Calls per second of ``clients`` processes, counted over one common wall-clock window."""
    begin = time.time() + 0.5  # connect and warm up first
    end = begin + seconds
    counts = pool.starmap(fn, [(address, begin, end)] * clients)
    return sum(counts) / seconds


# -- scenarios ---------------------------------------------------------------------------------


def aggregate(pool: Any, seconds: float, pairs: int) -> dict[str, float]:
    alone: list[float] = []
    four: list[float] = []
    with served("CartPole-v1", "tcp", "--sessions", "4", "--prewarm", "4") as address:
        for _ in range(pairs):
            alone.append(_aggregate(pool, _env_client, address, 1, seconds))
            four.append(_aggregate(pool, _env_client, address, 4, seconds))
    a = report("1 client alone, steps/s", alone, unit="/s")
    b = report("4 clients on --sessions 4, aggregate steps/s", four, unit="/s")
    ratios = [y / x for x, y in zip(alone, four)]
    r = report("  ratio (4 clients / 1 client)", ratios, unit="x")
    return {"alone_steps_per_s": a, "four_steps_per_s": b, "ratio": r}


def idle(steps: int, pairs: int) -> dict[str, float]:
    def loop(env: Any) -> float:
        env.reset(seed=0)
        for i in range(50):
            if any(env.step(i % 2)[2:4]):
                env.reset()
        t0 = time.perf_counter()
        for i in range(steps):
            _o, _r, term, trunc, _ = env.step(i % 2)
            if term or trunc:
                env.reset()
        return (time.perf_counter() - t0) / steps * 1e6

    single: list[float] = []
    multi: list[float] = []
    with (
        served("CartPole-v1", "tcp") as one,
        served("CartPole-v1", "tcp", "--sessions", "4", "--prewarm", "4") as many,
    ):
        idlers = [rn.RemoteEnv(many) for _ in range(3)]
        for e in idlers:
            e.reset(seed=1)
        try:
            for _ in range(pairs):
                with rn.RemoteEnv(one) as env:
                    single.append(loop(env))
                with rn.RemoteEnv(many) as env:
                    multi.append(loop(env))
        finally:
            for e in idlers:
                e.close()
    a = report("single-session endpoint, us/step", single)
    b = report("--sessions 4 with 3 idle sessions, us/step", multi)
    r = report("  ratio (sessions / single)", [y / x for x, y in zip(single, multi)], unit="x")
    return {"single_us": a, "sessions_us": b, "ratio": r}


def start(pairs: int) -> dict[str, float]:
    def connect_ms(address: str) -> float:
        t0 = time.perf_counter()
        env = rn.RemoteEnv(address)
        ms = (time.perf_counter() - t0) * 1e3
        env.close()
        time.sleep(0.3)  # let the ended session's worker go and a prewarmed one get ready
        return ms

    cold: list[float] = []
    warm: list[float] = []
    spawned: list[float] = []
    os.environ["RLMESH_WORKER_START"] = (
        "fresh"  # the third endpoint: a fresh interpreter per worker
    )
    try:
        spawning_cm = served("CartPole-v1", "tcp", "--sessions", "2")
        spawning = spawning_cm.__enter__()
    finally:
        del os.environ["RLMESH_WORKER_START"]
    try:
        with (
            served("CartPole-v1", "tcp", "--sessions", "2") as on_demand,
            served("CartPole-v1", "tcp", "--sessions", "2", "--prewarm", "1") as pooled,
        ):
            connect_ms(
                on_demand
            )  # the fork server's own start (once per endpoint) is not a session's cost
            connect_ms(pooled)
            for _ in range(pairs):
                cold.append(connect_ms(on_demand))
                warm.append(connect_ms(pooled))
                spawned.append(connect_ms(spawning))
    finally:
        spawning_cm.__exit__(None, None, None)
    a = report("connect, worker on demand (fork server), ms", cold, unit="ms")
    b = report("connect, worker ready (--prewarm 1), ms", warm, unit="ms")
    c = report("connect, worker on demand (spawn), ms", spawned, unit="ms")
    return {"on_demand_ms": a, "prewarmed_ms": b, "spawn_ms": c}


def model(pool: Any, seconds: float, pairs: int) -> dict[str, float]:
    fused: list[float] = []
    in_turn: list[float] = []
    with (
        served("bench_sessions:SlowBatched", "tcp", "--sessions", "8") as fusing,
        served("bench_sessions:SlowBatched", "tcp", "--sessions", "8", "--no-fuse") as turning,
    ):
        for _ in range(pairs):
            fused.append(_aggregate(pool, _model_client, fusing, 8, seconds))
            in_turn.append(_aggregate(pool, _model_client, turning, 8, seconds))
    a = report("model, 8 sessions, fused forwards, predicts/s", fused, unit="/s")
    b = report("model, 8 sessions, in turn, predicts/s", in_turn, unit="/s")
    r = report("  ratio (fused / in turn)", [x / y for x, y in zip(fused, in_turn)], unit="x")
    return {"fused_per_s": a, "in_turn_per_s": b, "ratio": r}


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--scenario", default="all", choices=("all", "aggregate", "idle", "start", "model")
    )
    p.add_argument(
        "--steps", type=int, default=3000, help="steps per measurement of the idle-sessions loop"
    )
    p.add_argument(
        "--seconds", type=float, default=1.5, help="measurement window of the throughput scenarios"
    )
    p.add_argument("--pairs", type=int, default=5, help="interleaved pairs (>= 5)")
    args = p.parse_args(argv)
    out: dict[str, dict[str, float]] = {}
    ctx = multiprocessing.get_context("forkserver")
    with ctx.Pool(8) as pool:
        if args.scenario in ("all", "aggregate"):
            out["aggregate"] = aggregate(pool, args.seconds, args.pairs)
        if args.scenario in ("all", "idle"):
            out["idle"] = idle(args.steps, args.pairs)
        if args.scenario in ("all", "start"):
            out["start"] = start(args.pairs)
        if args.scenario in ("all", "model"):
            out["model"] = model(pool, args.seconds, args.pairs)
    print(f"(medians of {args.pairs} interleaved pairs)")
    return out


if __name__ == "__main__":
    main()
