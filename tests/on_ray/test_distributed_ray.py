"""Distributed evaluation on a local Ray (2 CPUs, loopback only): ``workers=Workers(backend="ray")``.

The envs and policies of this module are pickled by value (``cloudpickle``), so the Ray
workers need not import it. Side channels are files in the test's temp dir.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sqlite3
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import child_env, journaled, kill_driver_when, require, wait_gone
from rlmesh.eval.distributed.journal import RunLock

pytestmark = pytest.mark.ray

gym = require("gymnasium")
cloudpickle = require("cloudpickle")
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def driver_env() -> dict[str, str]:
    """A child driver's environment: this module (and conftest) importable."""
    env = child_env()
    here = Path(__file__).resolve()
    env["PYTHONPATH"] = os.pathsep.join([str(here.parent), str(here.parents[1]), env["PYTHONPATH"]])
    return env


class Walk:
    """A seeded random walk; optionally kills its own process once, logs finished episodes, renders."""

    metadata: dict[str, Any] = {}
    observation_space = gym.spaces.Box(-100.0, 100.0, (2,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(
        self,
        *,
        side: str = "",
        kill_seed: int | None = None,
        kill_marker: str = "",
        sleep_s: float = 0.0,
        render_mode: str | None = None,
        hang_seed: int | None = None,
        hang_marker: str = "",
        seen: str = "",
    ) -> None:
        self.seen, self.finished = seen, []  # the driver's list of results; this env's episodes
        self.side, self.kill_seed, self.kill_marker, self.sleep_s = (
            side,
            kill_seed,
            kill_marker,
            sleep_s,
        )
        self.render_mode = render_mode
        self.hang_seed, self.hang_marker = hang_seed, hang_marker
        self.rng = np.random.default_rng(0)
        self.pos, self.t, self.seed = 0.0, 0, None

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.rng, self.seed, self.pos, self.t = np.random.default_rng(seed), seed, 0.0, 0
        return np.array([0.0, 0.0]), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        self.t += 1
        if self.seed == self.kill_seed and self.t == 3 and not os.path.exists(self.kill_marker):
            _wait_until_seen(self.seen, self.finished)
            Path(self.kill_marker).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        if self.seed == self.hang_seed and self.t == 3 and not os.path.exists(self.hang_marker):
            Path(self.hang_marker).write_text(str(os.getpid()))
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # stuck as native code is
            for _ in range(600):
                time.sleep(1.0)
        self.pos += float(self.rng.normal()) + (0.1 if int(action) else -0.1)
        terminated, truncated = abs(self.pos) > 3.0, self.t >= 20
        if terminated or truncated:
            self.finished.append(self.seed)
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

    def render(self) -> Any:
        frame = np.zeros((32, 48, 3), np.uint8)
        frame[:, : int(24 + 7 * np.clip(self.pos, -3, 3))] = (40 * self.t) % 256
        return frame

    def close(self) -> None:
        pass


def _wait_until_seen(path: str, seeds: list[Any]) -> None:
    """Wait (at most 60 s) until the driver has every result of ``seeds`` (``Seen`` writes
    them): a reply still on its way when its actor is killed may be lost with the actor."""
    deadline = time.monotonic() + 60
    while path and time.monotonic() < deadline and not set(seeds) <= set(read_ints(Path(path))):
        time.sleep(0.02)


class Seen(rlmesh.RunHooks):
    """Driver side: appends the seed of every episode result the driver has received."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_episode_end(self, result: rlmesh.EpisodeResult) -> None:
        with open(self.path, "a") as fh:
            fh.write(f"{result.seed}\n")


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


def settled(journal: Path, side: Path) -> tuple[set[int], list[int]]:
    """(the seeds the killed run journaled, the seeds its envs finished), read once no actor of
    that run holds the journal any more (the lock a resumed run waits on).

    An actor Ray ends with its driver may have finished an episode (its env wrote ``side``)
    and not yet journaled it: that episode runs again on resume, as the docs say.
    """
    lock = RunLock(str(journal))
    lock.acquire_exclusive(timeout=120)
    try:
        with contextlib.closing(sqlite3.connect(journal, timeout=10)) as db:
            kept = {int(row[0]) for row in db.execute("SELECT seed FROM episodes")}
        return kept, read_ints(side)
    finally:
        lock.release()


RAY = rlmesh.Workers(n=2, backend="ray")


def test_local_ray_equals_one_process_on_CartPole(ray_local: Any) -> None:
    seeds = list(range(16))
    one = rlmesh.run(cart_policy, gym.make("CartPole-v1"), seeds=seeds)
    many = rlmesh.run(cart_policy, "CartPole-v1", seeds=seeds, workers=RAY)
    assert key(many) == key(one)
    assert sum(w.episodes for w in many.workers) == 16
    assert all(w.node and w.pid != os.getpid() for w in many.workers)  # Ray actors, on a Ray node
    assert ray_local.is_initialized()  # a Ray the caller started is left running
    deadline = time.monotonic() + 30
    while ray_local.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray_local.available_resources().get("CPU", 0) == 2  # every actor is gone


def test_a_grouped_run_on_ray_actors_equals_each_group_in_one_process(
    ray_local: Any, tmp_path: Path
) -> None:
    """A suite's one run over its tasks (task affinity) travels to Ray actors as it does to
    processes: each group's episodes as its own run gives them."""
    from rlmesh.eval._api import run_groups
    from rlmesh.eval._options import RunOptions

    side = tmp_path / "side"
    plan = [
        (sign_policy, functools.partial(Walk, side=str(side)), [10 * g + k for k in range(4)])
        for g in range(3)
    ]
    results = run_groups(plan, RunOptions(workers=RAY))
    for (policy, env, seeds), result in zip(plan, results):
        assert key(result) == key(rlmesh.run(policy, env(), seeds=seeds))
    assert sorted(read_ints(side)) == sorted([s for *_, seeds in plan for s in seeds] * 2)


def test_a_killed_ray_worker_is_retried(ray_local: Any, tmp_path: Path) -> None:
    seeds = list(range(8))
    marker = tmp_path / "killed"
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    # the actor dies in episode 5 once the driver has the results of its earlier episodes
    # (one that is still on its way when its actor is killed is lost with it, and run again)
    seen = tmp_path / "seen"
    env = functools.partial(Walk, kill_seed=5, kill_marker=str(marker), seen=str(seen))
    many = rlmesh.run(sign_policy, env, seeds=seeds, workers=RAY, hooks=Seen(str(seen)))
    assert marker.exists()
    assert key(many) == key(one)
    assert [(r.index, r.seed) for r in many.retries] == [(5, 5)]
    assert "lost" in many.retries[0].reason and "ActorDiedError" in many.retries[0].reason


def test_an_actor_killed_right_after_finishing_an_episode_keeps_it(
    ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one actor holds episodes 4 and 5; it returns 4 and dies in 5 before the driver looks:
    # Ray may hand the driver the lost-actor error first, yet 4 is kept (not run again) and
    # the retry is put down to 5, the episode the actor was running
    from rlmesh.eval.distributed.ray_actors import RayBackend

    seeds = list(range(8))
    marker, side, seen = tmp_path / "killed", tmp_path / "episodes", tmp_path / "seen"
    submit, poll = RayBackend.submit, RayBackend.poll
    armed: list[bool] = []
    calls: dict[int, Any] = {}  # episode index -> its call's ref

    def submitting(self: Any, slot: int, task: Any) -> bool:
        before = set(self.refs)
        if task[0] == 5 and not armed:
            armed.append(True)
        done = bool(submit(self, slot, task))
        for ref in set(self.refs) - before:
            calls[task[0]] = ref
        return done

    def polling(self: Any, timeout: float) -> Any:
        if armed and armed[0]:  # look away until the actor that got episode 5 is dead
            armed[0] = False
            deadline = time.monotonic() + 60
            # the actor dies once the replies of episodes 0-4 are in this process (Ray's; 4's
            # unread by the driver): a reply still being sent when its actor is killed is lost
            earlier = [calls[i] for i in range(5)]
            while time.monotonic() < deadline:
                if len(self.ray.wait(earlier, num_returns=5, timeout=0.1)[0]) == 5:
                    break
            seen.write_text("".join(f"{i}\n" for i in range(5)))  # what the env waits for
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (marker.exists() and marker.read_text()):
                time.sleep(0.02)
            # until Ray has noticed the death: episode 5's call then holds its error
            self.ray.wait([calls[5]], timeout=max(0.0, deadline - time.monotonic()))
        return poll(self, timeout)

    monkeypatch.setattr(RayBackend, "submit", submitting)
    monkeypatch.setattr(RayBackend, "poll", polling)
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    env = functools.partial(
        Walk, side=str(side), kill_seed=5, kill_marker=str(marker), seen=str(seen)
    )
    many = rlmesh.run(
        sign_policy, env, seeds=seeds, workers=rlmesh.Workers(n=1, backend="ray", max_retries=1)
    )
    assert marker.exists()
    assert [(r.index, r.seed) for r in many.retries] == [(5, 5)]
    assert sorted(read_ints(side)) == seeds  # episode 4 ran once: its result was kept
    assert key(many) == key(one)


def test_an_episode_past_its_deadline_stops_its_actor_and_runs_again(
    ray_local: Any, tmp_path: Path
) -> None:
    seeds = list(range(6))
    marker = tmp_path / "hung"
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    env = functools.partial(Walk, hang_seed=3, hang_marker=str(marker))
    many = rlmesh.run(sign_policy, env, seeds=seeds, workers=RAY, episode_timeout_seconds=2.0)
    hung = int(marker.read_text())
    assert key(many) == key(one)
    assert [(r.index, r.seed) for r in many.retries] == [(3, 3)] and many.timed_out == ()
    assert (
        "episode 3 (seed 3) ran past episode_timeout_seconds=2 on worker w"
        in many.retries[0].reason
    )
    assert wait_gone([hung], within=30) == []  # the stopped actor ended


def test_ctrl_c_on_a_ray_driver_kills_every_actor(ray_local: Any) -> None:
    class CtrlC(rlmesh.RunHooks):
        def __init__(self) -> None:
            self.final: rlmesh.RunResult | None = None

        def on_episode_end(self, result: Any) -> None:
            raise KeyboardInterrupt  # what SIGINT does to the driver's thread

        def on_run_end(self, result: Any) -> None:
            self.final = result

    hooks = CtrlC()
    with pytest.raises(KeyboardInterrupt):
        rlmesh.run(
            sign_policy,
            functools.partial(Walk, sleep_s=0.05),
            seeds=list(range(20)),
            hooks=hooks,
            workers=RAY,
        )
    assert hooks.final is not None and hooks.final.num_episodes >= 1
    deadline = time.monotonic() + 30
    while ray_local.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray_local.available_resources().get("CPU", 0) == 2  # the actors are gone


def test_a_recorder_bundle_from_three_ray_workers(ray_local: Any, tmp_path: Path) -> None:
    require("av")
    seeds = [4, 8, 15, 16, 23, 42]
    make = functools.partial(Walk, render_mode="rgb_array")

    def record(workers: Any, out: Path) -> dict[str, Any]:
        with rlmesh.Recorder(fps=10, codec="h264") as rec:
            hooks = rec.capture(model="walker", env="Walk")
            rlmesh.run(
                sign_policy, make if workers else make(), seeds=seeds, hooks=hooks, workers=workers
            )
            rec.export(out)
        return json.loads((out / "result.json").read_text())

    one = record(None, tmp_path / "one")
    many = record(rlmesh.Workers(n=3, backend="ray"), tmp_path / "many")

    def shape(doc: dict[str, Any]) -> list[Any]:
        (w,) = doc["workloads"]
        return [
            (
                e["seed"],
                e["steps"],
                [(m["path"], m["frameCount"]) for m in e["media"]],
                e["stepLog"],
            )
            for e in w["episodes"]
        ]

    assert shape(many) == shape(one)
    (w,) = many["workloads"]
    assert all(
        (tmp_path / "many" / e["media"][0]["path"]).stat().st_size > 0 for e in w["episodes"]
    )


def test_a_killed_ray_driver_resumes_from_its_journal(ray_local: Any, tmp_path: Path) -> None:
    journal, side = tmp_path / "run.journal", tmp_path / "episodes"
    seeds = list(range(16))
    gcs = ray_local.get_runtime_context().gcs_address
    script = textwrap.dedent(
        f"""
        import functools, rlmesh, test_distributed_ray as t
        env = functools.partial(t.Walk, side={str(side)!r}, sleep_s=0.03)
        rlmesh.run(t.sign_policy, env, seeds={seeds!r}, workers=rlmesh.Workers(n=2, backend="ray", address={gcs!r}),
                   journal={str(journal)!r})
        """
    )
    kill_driver_when(
        script, driver_env(), lambda: journaled(journal) >= len(seeds) // 2, within=180
    )
    kept, before = settled(journal, side)
    assert len(seeds) // 2 <= len(kept) < len(seeds)
    assert kept <= set(before)
    env_r = functools.partial(Walk, side=str(side), sleep_s=0.03)
    resumed = rlmesh.run(sign_policy, env_r, seeds=seeds, workers=RAY, journal=journal)
    # the resumed run ran exactly what the journal lacked, each once
    assert sorted(read_ints(side)[len(before) :]) == sorted(set(seeds) - kept)
    assert key(resumed) == key(rlmesh.run(sign_policy, Walk(), seeds=seeds))


def test_a_killed_ray_driver_leaves_no_hung_actor_behind_and_its_run_resumes(
    ray_local: Any, tmp_path: Path
) -> None:
    # the driver dies while an actor is stuck in a step that ignores SIGTERM: Ray ends the
    # actors of a dead driver, so the journal is free again and the run resumes
    journal, side, marker = tmp_path / "run.journal", tmp_path / "episodes", tmp_path / "hung"
    seeds = list(range(6))
    gcs = ray_local.get_runtime_context().gcs_address
    script = textwrap.dedent(
        f"""
        import functools, rlmesh, test_distributed_ray as t
        env = functools.partial(t.Walk, side={str(side)!r}, hang_seed=4, hang_marker={str(marker)!r})
        rlmesh.run(t.sign_policy, env, seeds={seeds!r}, workers=rlmesh.Workers(n=2, backend="ray", address={gcs!r}),
                   journal={str(journal)!r})
        """
    )
    kill_driver_when(
        script, driver_env(), lambda: marker.exists() and bool(marker.read_text()), within=180
    )
    assert wait_gone([int(marker.read_text())], within=90) == []  # it did not outlive its driver
    kept, before = settled(journal, side)
    assert 4 not in kept and kept <= set(before)
    env_r = functools.partial(Walk, side=str(side), hang_seed=4, hang_marker=str(marker))
    resumed = rlmesh.run(sign_policy, env_r, seeds=seeds, workers=RAY, journal=journal)
    assert sorted(read_ints(side)[len(before) :]) == sorted(set(seeds) - kept)
    assert key(resumed) == key(rlmesh.run(sign_policy, Walk(), seeds=seeds))
