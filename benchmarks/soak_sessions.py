"""A multi-session endpoint under a long load, and probes while sessions end slowly.

Scenarios:

- ``soak``: one ``rlmesh serve CartPole-v1 --sessions 4 --prewarm 1`` endpoint, 4 client
  processes stepping it for ``--seconds`` (600 by default: the 10-minute soak), each
  reconnecting every ``--churn`` steps (so session workers keep exiting and starting), and a
  probe pinging every 100 ms. Every 10 s it samples the resident memory and the open file
  descriptors of the supervisor and of every process below it (workers, the fork server).
  Prints the steps, reconnects, the probes' latency, and the samples: "flat" means the last
  minute's medians are within a few percent of the first minute's (after a 30 s warm-up).
- ``slow-close``: an endpoint of 2 sessions whose env's ``close()`` takes 3 s; a client
  opens a session, steps 20 times and closes it, over and over, while a probe pings every
  50 ms. Prints the worst and the 99th-percentile probe latency per window. With
  ``--compare-src DIR`` (another checkout's ``src``), the same endpoint served from that
  tree alternates with this one, window by window (interleaved pairs), so the two trees'
  figures come from the same run.

Run: ``python benchmarks/soak_sessions.py [--scenario soak|slow-close] [--seconds S]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from _common import HERE, report, served

import rlmesh.numpy as rn
from rlmesh.serve import ping


class SlowCloseCartPole(gym.Wrapper):  # type: ignore[type-arg]
    """``soak_sessions:slow_close_cartpole``: CartPole whose ``close()`` takes 3 s."""

    def close(self) -> None:
        time.sleep(3.0)
        super().close()


def slow_close_cartpole() -> Any:
    return SlowCloseCartPole(gym.make("CartPole-v1"))


# -- process books -------------------------------------------------------------------------------


def _tree(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    out, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def sample(pid: int) -> dict[str, int]:
    tree = _tree(pid)
    return {
        "supervisor_rss_kib": _rss_kib(pid),
        "supervisor_fds": _fds(pid),
        "tree_rss_kib": sum(_rss_kib(p) for p in tree),
        "tree_fds": sum(_fds(p) for p in tree),
        "processes": len(tree),
    }


class Probe(threading.Thread):
    """Pings ``address`` every ``every`` seconds until stopped; keeps each latency (ms)."""

    def __init__(self, address: str, every: float) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.every = every
        self.latencies: list[float] = []
        self.failures = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.every):
            t0 = time.perf_counter()
            try:
                ping(self.address, timeout_seconds=30.0)
            except Exception:
                self.failures += 1
                continue
            self.latencies.append((time.perf_counter() - t0) * 1e3)

    def take(self) -> list[float]:
        out, self.latencies = self.latencies, []
        return out


# -- soak ----------------------------------------------------------------------------------------


def _soak_client(address: str, end: float, churn: int) -> tuple[int, int]:
    """Step until ``end`` (wall clock), reconnecting every ``churn`` steps: (steps, reconnects)."""
    steps = reconnects = 0
    while time.time() < end:
        env = rn.RemoteEnv(address, wait_for_slot=True, connect_timeout_seconds=60)
        try:
            env.reset(seed=reconnects)
            for i in range(churn):
                _o, _r, term, trunc, _ = env.step(i % 2)
                steps += 1
                if term or trunc:
                    env.reset()
                if steps % 1024 == 0 and time.time() >= end:
                    break
        finally:
            env.close()
        reconnects += 1
    return steps, reconnects


def soak(seconds: float, churn: int, clients: int) -> dict[str, Any]:
    with served("CartPole-v1", "tcp", "--sessions", str(clients), "--prewarm", "1") as address:
        probe = Probe(address, 0.1)
        probe.start()
        samples: list[tuple[float, dict[str, int]]] = []
        end = time.time() + seconds
        ctx = multiprocessing.get_context("forkserver")
        with ctx.Pool(clients) as pool:
            result = pool.starmap_async(_soak_client, [(address, end, churn)] * clients)
            started = time.monotonic()
            while not result.ready():
                samples.append((time.monotonic() - started, sample(address.pid)))
                result.wait(10.0)
            counts = result.get()
        probe.halt.set()
        probe.join(5.0)
        latencies = probe.take()
    steps = sum(c[0] for c in counts)
    reconnects = sum(c[1] for c in counts)
    print(f"{steps:,} steps by {clients} clients in {seconds:.0f}s, {reconnects:,} reconnects")
    print(
        f"probes: {len(latencies)} answered, {probe.failures} failed; latency median "
        f"{statistics.median(latencies):.2f} ms, p99 {np.percentile(latencies, 99):.2f} ms, "
        f"max {max(latencies):.2f} ms"
    )
    warm = [s for t, s in samples if t >= 30.0]
    first = [s for t, s in samples if 30.0 <= t < 90.0] or warm[:6]
    last = [s for t, s in samples if t >= samples[-1][0] - 60.0]
    out: dict[str, Any] = {"steps": steps, "reconnects": reconnects, "samples": len(samples)}
    for key in ("supervisor_rss_kib", "supervisor_fds", "tree_rss_kib", "tree_fds", "processes"):
        a = statistics.median(s[key] for s in first)
        b = statistics.median(s[key] for s in last)
        top = max(s[key] for s in warm)
        print(f"{key:20s} first minute {a:10.0f}  last minute {b:10.0f}  max {top:10.0f}")
        out[key] = {"first": a, "last": b, "max": top}
    out["ping_ms"] = {
        "median": statistics.median(latencies),
        "p99": float(np.percentile(latencies, 99)),
        "max": max(latencies),
    }
    return out


# -- slow close ----------------------------------------------------------------------------------


@contextmanager
def _served_from(src: str | None) -> Iterator[Any]:
    """The slow-close endpoint, served from this tree or from ``src``."""
    saved = os.environ.get("PYTHONPATH", "")
    if src is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join([src, saved])
    try:
        cm = served("soak_sessions:slow_close_cartpole", "tcp", "--sessions", "2")
        address = cm.__enter__()
    finally:
        os.environ["PYTHONPATH"] = saved
    try:
        yield address
    finally:
        cm.__exit__(None, None, None)


def _churn(address: str, end: float) -> int:
    sessions = 0
    while time.monotonic() < end:
        with rn.RemoteEnv(address, wait_for_slot=True, connect_timeout_seconds=60) as env:
            env.reset(seed=sessions)
            for i in range(20):
                if any(env.step(i % 2)[2:4]):
                    env.reset()
        sessions += 1
    return sessions


def _window(address: str, seconds: float) -> tuple[float, float, int]:
    probe = Probe(address, 0.05)
    probe.start()
    sessions = _churn(address, time.monotonic() + seconds)
    probe.halt.set()
    probe.join(35.0)
    lat = probe.take()
    return max(lat), float(np.percentile(lat, 99)), sessions


def slow_close(seconds: float, pairs: int, compare_src: str | None) -> dict[str, float]:
    worst: list[float] = []
    p99: list[float] = []
    other_worst: list[float] = []
    other_p99: list[float] = []
    with _served_from(None) as here, _served_from(compare_src) as there:
        for _ in range(pairs):
            w, p, n = _window(here, seconds)
            worst.append(w)
            p99.append(p)
            if compare_src is not None:
                w, p, m = _window(there, seconds)
                other_worst.append(w)
                other_p99.append(p)
                print(f"  window: {n} sessions here, {m} there")
    out = {
        "worst_ms": report("this tree: worst probe while sessions end, ms", worst, unit="ms"),
        "p99_ms": report("this tree: p99 probe while sessions end, ms", p99, unit="ms"),
    }
    if compare_src is not None:
        out["compare_worst_ms"] = report(f"{compare_src}: worst probe, ms", other_worst, unit="ms")
        out["compare_p99_ms"] = report(f"{compare_src}: p99 probe, ms", other_p99, unit="ms")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--scenario", default="soak", choices=("soak", "slow-close"))
    p.add_argument("--seconds", type=float, default=600.0, help="soak length / slow-close window")
    p.add_argument("--churn", type=int, default=20_000, help="soak: steps between reconnects")
    p.add_argument("--clients", type=int, default=4, help="soak: client processes = sessions")
    p.add_argument("--pairs", type=int, default=5, help="slow-close: interleaved windows")
    p.add_argument("--compare-src", default=None, help="slow-close: another tree's src/")
    p.add_argument("--json", default=None, help="write the figures to this file")
    args = p.parse_args(argv)
    sys.path.insert(0, str(HERE))
    if args.scenario == "soak":
        out = soak(args.seconds, args.churn, args.clients)
    else:
        out = slow_close(args.seconds, args.pairs, args.compare_src)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
