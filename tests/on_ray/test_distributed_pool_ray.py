"""A warm worker pool on a local Ray (2 CPUs, loopback only): ``rlmesh.Workers(backend="ray").start()``.

The envs and policies of this module are pickled by value (``cloudpickle``), so the Ray
workers need not import it. Side channels are files in the test's temp dir.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import require

pytestmark = pytest.mark.ray

gym = require("gymnasium")
cloudpickle = require("cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Walk:
    """A seeded random walk; optionally raises on one seed.

    With ``pids`` and ``n``: each env writes its pid to ``pids`` when built and waits (bounded)
    until ``n`` envs were built; then its worker's first reset writes the pid to
    ``pids + ".reset"`` and waits until ``n`` workers have reset once. So every worker of the
    run takes part, however late its ready report reaches the driver on a loaded machine: no
    worker can run every episode while another is still on its way.
    """

    metadata: dict[str, Any] = {}
    observation_space = gym.spaces.Box(-100.0, 100.0, (2,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(
        self,
        *,
        raise_seed: int | None = None,
        side: str = "",
        pids: str = "",
        n: int = 0,
        sleep_s: float = 0.0,
    ) -> None:
        self.raise_seed, self.side, self.sleep_s = raise_seed, side, sleep_s
        self.barrier = (pids + ".reset", n) if pids and n else None
        self.rng = np.random.default_rng(0)
        self.pos, self.t, self.seed = 0.0, 0, None
        if pids:
            with open(pids, "a") as fh:
                fh.write(f"{os.getpid()}\n")
            deadline = time.monotonic() + 60
            while len(read_ints(Path(pids))) < n and time.monotonic() < deadline:
                time.sleep(0.01)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.rng, self.seed, self.pos, self.t = np.random.default_rng(seed), seed, 0.0, 0
        if self.barrier is not None:
            path, n = self.barrier
            self.barrier = None
            with open(path, "a") as fh:
                fh.write(f"{os.getpid()}\n")
            deadline = time.monotonic() + 60
            while len(set(read_ints(Path(path)))) < n and time.monotonic() < deadline:
                time.sleep(0.01)
        return np.array([0.0, 0.0]), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        self.t += 1
        if self.seed == self.raise_seed and self.t == 3:
            raise RuntimeError(f"simulator exploded on seed {self.seed}")
        self.pos += float(self.rng.normal()) + (0.1 if int(action) else -0.1)
        terminated, truncated = abs(self.pos) > 3.0, self.t >= 20
        if (terminated or truncated) and self.side:
            with open(self.side, "a") as fh:
                fh.write(f"{self.seed}\n")
        return (
            np.array([self.pos, float(self.t)]),
            self.pos,
            terminated,
            truncated,
            {"is_success": self.pos > 0},
        )

    def close(self) -> None:
        pass


def sign_policy(obs: Any) -> int:
    return int(obs[0] < 0)


def cart_policy(obs: Any) -> int:
    return int(obs[2] + 0.5 * obs[3] > 0)


def key(result: rlmesh.RunResult) -> list[tuple[Any, ...]]:
    return [
        (e.index, e.seed, e.steps, e.reward, e.terminated, e.truncated, e.success, e.trial)
        for e in result.episodes
    ]


def read_ints(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def pids_of(result: rlmesh.RunResult) -> set[int]:
    return {w.pid for w in result.workers}


def cpus_back(ray: Any) -> float:
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    return float(ray.available_resources().get("CPU", 0))


def alive(pids: set[int]) -> set[int]:
    """Which of ``pids`` still run (the actors' processes, on this machine), after up to 30 s."""
    deadline = time.monotonic() + 30
    while True:
        left = set()
        for pid in pids:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    left.add(pid)
            except OSError:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def test_two_runs_on_a_ray_pool_equal_one_process_on_the_same_actors(
    ray_local: Any, tmp_path: Path
) -> None:
    seeds = list(range(12))
    one = rlmesh.run(cart_policy, gym.make("CartPole-v1"), seeds=seeds)
    pool = rlmesh.Workers(n=2, backend="ray", progress=False).start()
    try:
        assert pool.backend == "ray" and pool.n == 2 and pool.startup_seconds > 0
        deadline = time.monotonic() + 30
        while ray_local.available_resources().get("CPU", 0) > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (
            ray_local.available_resources().get("CPU", 0) == 0
        )  # both actors hold their CPU share
        first = rlmesh.run(cart_policy, "CartPole-v1", seeds=seeds, workers=pool)
        second = rlmesh.run(cart_policy, "CartPole-v1", seeds=seeds, workers=pool)
        assert key(first) == key(one) and key(second) == key(one)
        third = rlmesh.run(
            sign_policy,
            functools.partial(Walk, pids=str(tmp_path / "3"), n=2),
            seeds=seeds,
            workers=pool,
        )
        # every run ran on the pool's two actors (the third on both: its envs wait for each other)
        assert len(pids_of(third)) == 2 and pids_of(first) | pids_of(second) <= pids_of(third)
        assert all(w.node for w in third.workers) and sum(w.episodes for w in third.workers) == 12
    finally:
        pool.close()
    pool.close()  # idempotent
    assert ray_local.is_initialized()  # a Ray the caller started is left running
    assert cpus_back(ray_local) == 2 and alive(pids_of(third)) == set()  # every actor is gone


def test_a_ray_pool_replaces_a_killed_actor_and_survives_an_env_error(
    ray_local: Any, tmp_path: Path
) -> None:
    seeds = list(range(8))
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    with rlmesh.Workers(n=2, backend="ray", progress=False).start() as pool:
        with pytest.raises(RuntimeError, match="simulator exploded on seed 2"):
            rlmesh.run(
                sign_policy, functools.partial(Walk, raise_seed=2), seeds=seeds, workers=pool
            )
        first = rlmesh.run(
            sign_policy,
            functools.partial(Walk, pids=str(tmp_path / "1"), n=2),
            seeds=seeds,
            workers=pool,
        )
        assert key(first) == key(one) and len(pids_of(first)) == 2
        victim = min(pids_of(first))
        os.kill(victim, signal.SIGKILL)
        second = rlmesh.run(
            sign_policy,
            functools.partial(Walk, pids=str(tmp_path / "2"), n=2),
            seeds=seeds,
            workers=pool,
        )
        assert key(second) == key(one) and second.retries == ()
        assert (
            len(pids_of(second)) == 2
            and victim not in pids_of(second)
            and len(pids_of(first) & pids_of(second)) == 1
        )
    assert cpus_back(ray_local) == 2 and alive(pids_of(second)) == set()


def test_journal_with_a_ray_pool(ray_local: Any, tmp_path: Path) -> None:
    journal, side = tmp_path / "run.journal", tmp_path / "episodes"
    seeds = list(range(8))
    env = functools.partial(Walk, side=str(side))
    with rlmesh.Workers(n=2, backend="ray", progress=False).start() as pool:
        first = rlmesh.run(sign_policy, env, seeds=seeds, workers=pool, journal=journal)
        again = rlmesh.run(sign_policy, env, seeds=seeds, workers=pool, journal=journal)
    assert key(first) == key(again) == key(rlmesh.run(sign_policy, Walk(), seeds=seeds))
    assert {s: read_ints(side).count(s) for s in seeds} == {
        s: 1 for s in seeds
    }  # the re-run ran nothing


def test_a_ray_pool_owns_the_local_ray_it_started_and_survives_ctrl_c(tmp_path: Path) -> None:
    from conftest import child_env, require_ray

    require_ray()  # the driver below imports ray and starts a local Ray of its own

    script = tmp_path / "driver.py"
    script.write_text(
        textwrap.dedent(
            """
            import ray, rlmesh

            def policy(obs):
                return int(obs[2] + 0.5 * obs[3] > 0)

            class CtrlC(rlmesh.RunHooks):
                def on_episode_end(self, result):
                    raise KeyboardInterrupt

            assert not ray.is_initialized()
            with rlmesh.Workers(n=2, backend="ray", progress=False).start() as pool:
                assert ray.is_initialized()
                try:
                    rlmesh.run(policy, "CartPole-v1", seeds=range(6), hooks=CtrlC(), workers=pool)
                except KeyboardInterrupt:
                    pass
                result = rlmesh.run(policy, "CartPole-v1", seeds=range(6), workers=pool)
                print("episodes", result.num_episodes, "workers", len(result.workers), flush=True)
            print("ray after close", ray.is_initialized(), flush=True)
            """
        )
    )
    env = child_env()
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, timeout=300)
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    assert "episodes 6 workers" in out  # the pool works after Ctrl-C in a run
    assert "ray after close False" in out  # the local Ray the pool started is shut down with it
