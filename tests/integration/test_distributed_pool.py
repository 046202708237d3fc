"""A warm worker pool on the ``processes`` backend (issue 27): ``workers=rlmesh.Workers(...).start()``.

The envs come from ``test_distributed`` (workers import them by name); side channels are
files in the test's temp dir.
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

import pytest
from test_distributed import (
    Walk,
    cart_policy,
    children,
    driver_env,
    key,
    procs_alive,
    read_ints,
    sign_policy,
)

import rlmesh
from conftest import require, wait_gone

gym = require("gymnasium")


class BarrierWalk(Walk):
    """A :class:`Walk` whose envs wait for each other (bounded): every worker of the run takes part.

    Each env writes its pid to ``pids`` when built and waits until ``n`` envs were built;
    its worker's first reset then writes the pid to ``pids + ".reset"`` and waits until ``n``
    workers have reset once. However late a worker's ready report reaches the driver on a
    loaded machine, no other worker can run every episode meanwhile.
    """

    def __init__(self, *, n: int = 1, pids: str = "", **kw: Any) -> None:
        super().__init__(pids=pids, **kw)
        self.barrier = (pids + ".reset", n) if pids else None
        deadline = time.monotonic() + 60
        while len(read_ints(Path(pids))) < n and time.monotonic() < deadline:
            time.sleep(0.01)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        if self.barrier is not None:
            path, n = self.barrier
            self.barrier = None
            with open(path, "a") as fh:
                fh.write(f"{os.getpid()}\n")
            deadline = time.monotonic() + 60
            while len(set(read_ints(Path(path)))) < n and time.monotonic() < deadline:
                time.sleep(0.01)
        return super().reset(seed=seed, options=options)


def broken_env() -> Walk:
    raise ValueError("this env cannot be built (on purpose)")


class ClosingWalk(BarrierWalk):
    """A :class:`BarrierWalk` that appends its pid to ``closed`` when it is closed."""

    def __init__(self, *, closed: str = "", **kw: Any) -> None:
        super().__init__(**kw)
        self.closed = closed

    def close(self) -> None:
        if self.closed:
            with open(self.closed, "a") as fh:
                fh.write(f"{os.getpid()}\n")


def suicide_env() -> Walk:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def pool_of(n: int, **kw: Any) -> rlmesh.WorkerPool:
    return rlmesh.Workers(n=n, backend="processes", progress=False, **kw).start()


def pids_of(result: rlmesh.RunResult) -> set[int]:
    return {w.pid for w in result.workers}


def descendants(pid: int | None = None) -> set[int]:
    """Live descendants of this process (workers are children of the fork server, our child)."""
    out: set[int] = set()
    for task in Path(f"/proc/{pid or os.getpid()}/task").glob("*"):
        try:
            kids = [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
        for kid in procs_alive(kids):
            out |= {kid} | descendants(kid)
    return out


def test_two_runs_on_one_pool_equal_one_process_and_reuse_the_same_workers(tmp_path: Path) -> None:
    seeds = list(range(16))
    one = rlmesh.run(cart_policy, gym.make("CartPole-v1"), seeds=seeds)
    with pool_of(2) as pool:
        assert isinstance(pool, rlmesh.WorkerPool) and pool.n == 2 and pool.backend == "processes"
        assert pool.startup_seconds > 0
        started = descendants()
        assert len(started) >= 3  # the workers and the fork server run before any run
        first = rlmesh.run(cart_policy, "CartPole-v1", seeds=seeds, workers=pool)
        second = rlmesh.run(cart_policy, gym.make("CartPole-v1"), seeds=seeds, workers=pool)
        assert key(first) == key(one) and key(second) == key(one)
        both = rlmesh.run(
            sign_policy,
            functools.partial(BarrierWalk, n=2, pids=str(tmp_path / "both")),
            seeds=seeds[:4],
            workers=pool,
        )
        # the same processes, started with the pool, ran every run (the barrier run on both)
        assert len(pids_of(both)) == 2 and pids_of(first) | pids_of(second) <= pids_of(both)
        assert pids_of(both) <= started
        assert os.getpid() not in pids_of(second)
        # per-worker timing is per run, not cumulative
        for result in (first, second):
            assert sum(w.episodes for w in result.workers) == 16
            assert {w.worker for w in result.workers} <= {"w0", "w1"}
            assert all(w.env_ms > 0 and w.busy_s > 0 for w in result.workers if w.episodes)
        # Model.run takes the pool too
        third = rlmesh.numpy.Model(cart_policy).run("CartPole-v1", seeds=seeds[:4], workers=pool)
        assert key(third) == key(one)[:4] and pids_of(third) <= pids_of(second)
    assert pool.closed
    assert (
        wait_gone(started) == [] and children() == []
    )  # close() stopped every worker and the fork server


def test_between_runs_the_workers_hold_no_env(tmp_path: Path) -> None:
    built, closed = tmp_path / "built", tmp_path / "closed"
    env = functools.partial(ClosingWalk, n=2, pids=str(built), closed=str(closed))
    with pool_of(2) as pool:
        rlmesh.run(sign_policy, env, seeds=list(range(6)), workers=pool)
        assert sorted(read_ints(closed)) == sorted(read_ints(built))  # every env built was closed
        assert len(read_ints(built)) == 2
        env = functools.partial(ClosingWalk, n=4, pids=str(built), closed=str(closed))
        rlmesh.run(sign_policy, env, seeds=list(range(6)), workers=pool)
        assert len(read_ints(built)) == 4 and sorted(read_ints(closed)) == sorted(read_ints(built))


def test_a_worker_killed_between_runs_is_replaced(tmp_path: Path) -> None:
    seeds = list(range(24))
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    with pool_of(3) as pool:
        first = rlmesh.run(
            sign_policy,
            functools.partial(BarrierWalk, n=3, pids=str(tmp_path / "1")),
            seeds=seeds,
            workers=pool,
        )
        assert len(pids_of(first)) == 3
        victim = sorted(pids_of(first))[1]
        os.kill(victim, signal.SIGKILL)
        assert wait_gone([victim]) == []
        second = rlmesh.run(
            sign_policy,
            functools.partial(BarrierWalk, n=3, pids=str(tmp_path / "2")),
            seeds=seeds,
            workers=pool,
        )
        assert key(second) == key(one)
        assert second.retries == ()  # a replacement before the run is not a retry
        assert len(pids_of(second)) == 3 and victim not in pids_of(second)
        assert len(pids_of(first) & pids_of(second)) == 2  # the other two were reused
        assert sorted(w.worker for w in second.workers) == ["w0", "w1", "w2"]


def test_a_worker_lost_during_a_run_is_retried_and_replaced_in_the_pool(tmp_path: Path) -> None:
    seeds = list(range(10))
    marker = tmp_path / "killed"
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    with pool_of(2, max_retries=1) as pool:
        env = functools.partial(Walk, kill_seed=4, kill_marker=str(marker))
        first = rlmesh.run(sign_policy, env, seeds=seeds, workers=pool)
        assert marker.exists() and key(first) == key(one)
        assert [(r.index, r.seed) for r in first.retries] == [(4, 4)]
        killed = int(marker.read_text())
        second = rlmesh.run(
            sign_policy,
            functools.partial(BarrierWalk, n=2, pids=str(tmp_path / "2"), sleep_s=0.01),
            seeds=seeds,
            workers=pool,
        )
        assert (
            key(second) == key(one) and len(pids_of(second)) == 2 and killed not in pids_of(second)
        )


def test_an_env_error_in_one_run_does_not_poison_the_next(tmp_path: Path) -> None:
    seeds = list(range(10))
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    with pool_of(2) as pool:
        with pytest.raises(RuntimeError, match="simulator exploded on seed 3"):
            rlmesh.run(
                sign_policy,
                functools.partial(Walk, raise_seed=3, sleep_s=0.01),
                seeds=seeds,
                workers=pool,
            )
        second = rlmesh.run(
            sign_policy,
            functools.partial(BarrierWalk, n=2, pids=str(tmp_path / "2"), sleep_s=0.01),
            seeds=seeds,
            workers=pool,
        )
        assert key(second) == key(one) and len(pids_of(second)) == 2
        with pytest.raises(
            ValueError, match="cannot be built"
        ):  # a run whose workers cannot set up
            rlmesh.run(sign_policy, broken_env, seeds=seeds, workers=pool)
        third = rlmesh.run(
            sign_policy,
            functools.partial(BarrierWalk, n=2, pids=str(tmp_path / "3"), sleep_s=0.01),
            seeds=seeds,
            workers=pool,
        )
        assert key(third) == key(one)
        # the pool is reused: a worker stopped mid-set-up by the failed run (its state is
        # unknown) is replaced, and on a loaded machine the other may run every episode
        # before the replacement is ready
        assert pids_of(third) & pids_of(second)


class Interrupt(rlmesh.RunHooks):
    def on_episode_end(self, result: Any) -> None:
        raise KeyboardInterrupt  # what SIGINT does to the driver's thread


def test_ctrl_c_in_a_run_leaves_the_pool_usable(tmp_path: Path) -> None:
    seeds = list(range(8))
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    with pool_of(2) as pool:
        with pytest.raises(KeyboardInterrupt):
            rlmesh.run(
                sign_policy,
                functools.partial(Walk, sleep_s=0.02),
                seeds=seeds,
                hooks=Interrupt(),
                workers=pool,
            )
        again = rlmesh.run(
            sign_policy,
            functools.partial(BarrierWalk, n=2, pids=str(tmp_path / "2"), sleep_s=0.01),
            seeds=seeds,
            workers=pool,
        )
        assert key(again) == key(one) and len(pids_of(again)) == 2


def test_journal_works_with_a_pool(tmp_path: Path) -> None:
    journal, side = tmp_path / "run.journal", tmp_path / "episodes"
    seeds = list(range(12))
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    env = functools.partial(Walk, side=str(side))
    with pool_of(2) as pool:
        first = rlmesh.run(sign_policy, env, seeds=seeds, workers=pool, journal=journal)
        again = rlmesh.run(
            sign_policy, env, seeds=seeds, workers=pool, journal=journal
        )  # the lock is free again
        other = rlmesh.run(
            sign_policy, env, seeds=seeds, workers=pool, journal=tmp_path / "other.journal"
        )
    assert key(first) == key(one) and key(again) == key(one) and key(other) == key(one)
    assert {s: read_ints(side).count(s) for s in seeds} == {
        s: 2 for s in seeds
    }  # `again` ran nothing


def test_a_closed_pool_is_refused_and_close_is_idempotent() -> None:
    pool = pool_of(1)
    workers = descendants()
    assert workers
    pool.close()
    pool.close()
    assert wait_gone(workers) == []
    with pytest.raises(ValueError, match="this pool is closed"):
        rlmesh.run(sign_policy, Walk, seeds=[1], workers=pool)
    with pytest.raises(TypeError, match=r"workers= takes None, an int or rlmesh\.Workers"):
        rlmesh.run(sign_policy, Walk, seeds=[1], workers=object())


def test_a_pool_left_open_is_closed_when_the_interpreter_exits(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = textwrap.dedent(
        f"""
        import functools, os, rlmesh, test_distributed as t
        if __name__ == "__main__":
            pool = rlmesh.Workers(n=2, backend="processes", progress=False).start()
            rlmesh.run(t.sign_policy, functools.partial(t.Walk, pids={str(pids)!r}), seeds=list(range(4)), workers=pool)
            print("done", flush=True)  # no close(): the exit hook must stop the workers
        """
    )
    script_path = tmp_path / "driver.py"
    script_path.write_text(script)
    proc = subprocess.run(
        [sys.executable, str(script_path)], env=driver_env(), capture_output=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert b"done" in proc.stdout
    workers = read_ints(pids)
    assert len(workers) == 2
    assert wait_gone(workers) == []


def test_a_run_smaller_than_the_pool_uses_part_of_it_and_fails_cleanly_when_its_workers_are_lost(
    tmp_path: Path,
) -> None:
    with pool_of(3, max_retries=1) as pool:
        small = rlmesh.run(sign_policy, Walk, seeds=[7], workers=pool)
        assert [w.worker for w in small.workers] == ["w0"] and small.num_episodes == 1
        with pytest.raises(rlmesh.eval.WorkerLost, match="every worker was lost"):
            rlmesh.run(
                sign_policy, suicide_env, seeds=[7], workers=pool
            )  # the two idle workers do not keep it waiting
        after = rlmesh.run(sign_policy, Walk, seeds=[7, 8, 9], workers=pool)
        assert key(after) == key(rlmesh.run(sign_policy, Walk(), seeds=[7, 8, 9]))


def test_a_pool_runs_one_run_at_a_time(tmp_path: Path) -> None:
    import threading

    built = tmp_path / "built"
    errors: list[BaseException] = []
    with pool_of(1) as pool:

        def slow() -> None:
            try:
                rlmesh.run(
                    sign_policy,
                    functools.partial(Walk, pids=str(built), sleep_s=0.05),
                    seeds=list(range(4)),
                    workers=pool,
                )
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        thread = threading.Thread(target=slow)
        thread.start()
        deadline = time.monotonic() + 60
        while not built.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(RuntimeError, match="is running another run"):
            rlmesh.run(sign_policy, Walk, seeds=[1], workers=pool)
        thread.join(60)
        assert not thread.is_alive() and errors == []
        assert rlmesh.run(sign_policy, Walk, seeds=[1], workers=pool).num_episodes == 1
