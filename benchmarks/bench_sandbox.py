"""Sandbox start-up (cold and warm, per backend) and the step cost through a sandbox.

- venv cold: a fresh cache directory (create the venv, install rlmesh + gymnasium, make()).
- venv warm: the cached venv (spawn the child server, make(), dial).
- docker cold: the image tag removed first (docker build + run); docker warm: the image exists.
- step: scalar CartPole step through a plain served env on a unix socket (``rlmesh.serve``
  in a child process), through a venv sandbox (unix socket + shared-memory rings) and
  through a Docker sandbox (TCP via the published loopback port).

Run: ``python benchmarks/bench_sandbox.py [--steps N] [--backends venv,docker] [--no-cold]``.
Docker needs a daemon and ``$RLMESH_SANDBOX_BASE_IMAGE`` (``.ci/run`` builds one offline).
Only same-run ratios mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import report, served, time_loop

import rlmesh.numpy as rn
from rlmesh.sandbox import SandboxBuild
from rlmesh.sandbox._docker import DockerCLI
from rlmesh.sandbox._plan import make_plan
from rlmesh.sandbox._source import Source

SOURCE = "gym://CartPole-v1"


def _start_seconds(backend: str) -> float:
    t0 = time.perf_counter()
    env = rn.SandboxEnv(SOURCE, backend=backend, connect_timeout_seconds=120)
    elapsed = time.perf_counter() - t0
    env.close()
    return elapsed


def starts(backend: str, cold: bool, warm_reps: int) -> dict[str, float]:
    out: dict[str, float] = {}
    if cold:
        if backend == "venv":
            cache = Path(tempfile.mkdtemp(prefix="rlmesh-bench-sbx-"))
            os.environ["RLMESH_SANDBOX_CACHE"] = str(cache)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                tag = make_plan(
                    Source(SOURCE, "gym", "CartPole-v1"), SandboxBuild(), Path(tmp)
                ).image_tag
            subprocess.run(
                ["docker", "rmi", "-f", tag], capture_output=True, check=False, timeout=120
            )
        out["cold_s"] = _start_seconds(backend)
        print(f"{backend + ' cold start':44s} {out['cold_s']:10.2f} s")
    warm = [_start_seconds(backend) for _ in range(warm_reps)]
    out["warm_s"] = statistics.median(warm)
    report(f"{backend} warm start", warm, "s")
    return out


def steps(backends: list[str], n: int) -> dict[str, float]:
    def loop(env: rn.RemoteEnv) -> list[float]:
        env.reset(seed=0)

        def step(i: int) -> None:
            _, _, terminated, truncated, _ = env.step(i & 1)
            if terminated or truncated:
                env.reset()

        return time_loop(step, n)

    out: dict[str, float] = {}
    with served("CartPole-v1", "unix") as address, rn.RemoteEnv(address) as env:
        out["plain_unix_us"] = report("CartPole step, plain served env (unix)", loop(env))
    for backend in backends:
        with rn.SandboxEnv(SOURCE, backend=backend, connect_timeout_seconds=120) as env:
            us = report(f"CartPole step, {backend} sandbox", loop(env))
        out[f"{backend}_us"] = us
        print(f"{'ratio to the plain served env':44s} {us / out['plain_unix_us']:10.2f} x")
    return out


def main(argv: list[str] | None = None) -> dict[str, object]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--backends", default="venv,docker")
    p.add_argument("--warm-reps", type=int, default=3)
    p.add_argument("--no-cold", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("RLMESH_SANDBOX_PROGRESS", "0")
    backends = [b for b in args.backends.split(",") if b]
    if "docker" in backends and not DockerCLI().daemon_running():
        print("docker: no daemon answers; skipping the Docker backend")
        backends.remove("docker")
    saved_cache = os.environ.get("RLMESH_SANDBOX_CACHE")
    results: dict[str, object] = {}
    try:
        for backend in backends:
            results[backend] = starts(backend, not args.no_cold, args.warm_reps)
        results["steps"] = steps(backends, args.steps)
    finally:
        cache = os.environ.get("RLMESH_SANDBOX_CACHE")
        if cache and cache != saved_cache and "rlmesh-bench-sbx-" in cache:
            shutil.rmtree(cache, ignore_errors=True)
        if saved_cache is None:
            os.environ.pop("RLMESH_SANDBOX_CACHE", None)
        else:
            os.environ["RLMESH_SANDBOX_CACHE"] = saved_cache
    return results


if __name__ == "__main__":
    main()
