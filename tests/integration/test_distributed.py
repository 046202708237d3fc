"""Distributed evaluation on the ``processes`` backend (issue 27): ``rlmesh.run(..., workers=)``.

Every test starts real worker processes. The envs live in this module so workers import
them by name (``tests/integration`` is on the workers' ``sys.path``, as on the driver's).
Side channels are files in the test's temp dir: an env appends a line per finished
episode, writes its pid when built, or kills its own process once.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import child_env, journaled, kill_driver_when, procs_alive, require, wait_gone
from rlmesh.eval import WorkerLost
from rlmesh.numpy import Model as NpModel

gym = require("gymnasium")
spaces = gym.spaces


# -- envs and models (module level: workers import them by name) --------------------------------


class Walk:
    """A seeded random walk: deterministic per seed; optional side effects for fault tests."""

    metadata: dict[str, Any] = {}
    observation_space = spaces.Box(-100.0, 100.0, (2,), np.float64)
    action_space = spaces.Discrete(2)

    def __init__(
        self,
        *,
        drift: float = 0.0,
        side: str = "",
        pids: str = "",
        kill_seed: int | None = None,
        kill_marker: str = "",
        raise_seed: int | None = None,
        hang_seed: int | None = None,
        hang_marker: str = "",
        sleep_s: float = 0.0,
        horizon: int = 25,
        render_mode: str | None = None,
        barrier: int = 0,
    ) -> None:
        self.render_mode = render_mode
        self.wait_for = barrier  # with pids: the first reset waits until this many envs exist
        self.drift = drift
        self.side = side
        self.pids = pids
        self.kill_seed = kill_seed
        self.kill_marker = kill_marker
        self.raise_seed = raise_seed
        self.hang_seed = hang_seed
        self.hang_marker = hang_marker
        self.sleep_s = sleep_s
        self.horizon = horizon
        self.rng = np.random.default_rng(0)
        self.pos = 0.0
        self.t = 0
        self.seed: int | None = None
        if pids:
            with open(pids, "a") as fh:
                fh.write(f"{os.getpid()}\n")

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        deadline = time.monotonic() + 60
        while self.wait_for and len(read_ints(Path(self.pids))) < self.wait_for:
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {self.wait_for} envs were built within 60 s")
            time.sleep(0.02)
        self.wait_for = 0
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.pos = 0.0
        self.t = 0
        return np.array([self.pos, 0.0]), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.sleep_s:
            time.sleep(self.sleep_s)
        self.t += 1
        if self.seed == self.raise_seed and self.t == 3:
            raise RuntimeError(f"simulator exploded on seed {self.seed}")
        if self.seed == self.hang_seed and self.t == 3 and not os.path.exists(self.hang_marker):
            hang(self.hang_marker)
        if self.seed == self.kill_seed and self.t == 3 and not os.path.exists(self.kill_marker):
            try:
                Path(self.kill_marker).write_text(str(os.getpid()))
            except OSError:
                pass  # an unwritable marker: killed on every attempt
            os.kill(os.getpid(), signal.SIGKILL)
        self.pos += float(self.rng.normal()) + self.drift + (0.1 if int(action) else -0.1)
        terminated = abs(self.pos) > 3.0
        truncated = self.t >= self.horizon
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


def hang(marker: str) -> None:
    """Hang as a simulator stuck in native code does: deaf to SIGTERM, never returning.

    ``marker`` gets this process's pid (so the test can watch it); an unwritable marker
    makes every attempt hang."""
    try:
        with open(marker, "x") as fh:
            fh.write(str(os.getpid()))
    except OSError:
        pass
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    for _ in range(600):
        time.sleep(1.0)
    os._exit(99)


class WalkFactory(rlmesh.EnvFactory):
    """An ``EnvFactory`` with a construction param (the walk's drift)."""

    tags = None

    def __init__(self, drift: float = 0.0) -> None:
        self.drift = drift

    def make(self) -> Walk:
        return Walk(drift=self.drift)


def sign_policy(obs: Any) -> int:
    return int(obs[0] < 0)


def cart_policy(obs: Any) -> int:
    return int(obs[2] + 0.5 * obs[3] > 0)


def key(result: rlmesh.RunResult) -> list[tuple[Any, ...]]:
    """What must match a single-process run: everything but the timings."""
    return [
        (e.index, e.seed, e.steps, e.reward, e.terminated, e.truncated, e.success, e.trial)
        for e in result.episodes
    ]


def driver_env() -> dict[str, str]:
    """A child driver's environment: this module (and conftest) importable."""
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), env["PYTHONPATH"]]
    )
    return env


def children() -> list[int]:
    """Live (non-zombie) child processes of this test process."""
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            pids += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return procs_alive(pids)


def read_ints(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


# -- same results as one process --------------------------------------------------------------------


def test_CartPole_with_workers_equals_one_process() -> None:
    seeds = list(range(20))
    one = rlmesh.run(cart_policy, gym.make("CartPole-v1"), seeds=seeds)
    many = rlmesh.run(cart_policy, "CartPole-v1", seeds=seeds, workers=3)
    assert key(many) == key(one)
    assert [e.index for e in many.episodes] == list(range(20))
    assert many.num_episodes == 20 and many.total_steps == one.total_steps
    # per-worker timing: every episode is accounted to a worker, with its host and pid
    assert sum(w.episodes for w in many.workers) == 20
    assert {w.worker for w in many.workers} <= {"w0", "w1", "w2"}
    assert all(w.host and w.pid != os.getpid() for w in many.workers)
    assert all(w.env_ms > 0 and w.model_ms > 0 for w in many.workers if w.episodes)
    doc = many.to_dict()
    assert (
        doc["num_episodes"] == 20
        and len(doc["workers"]) == len(many.workers)
        and doc["retries"] == []
    )
    assert "workers" not in one.to_dict()  # a single-process result's dict is unchanged
    assert children() == []  # no worker (and no fork server) is left running


def test_factory_env_with_params_equals_one_process_via_Model_run() -> None:
    seeds = [5, 3, 11, 7, 2, 13, 1]
    model = NpModel(sign_policy)
    one = model.run(WalkFactory(drift=0.3), seeds=seeds, trial_index_base=10)
    many = model.run(
        WalkFactory(drift=0.3),
        seeds=seeds,
        trial_index_base=10,
        workers=rlmesh.Workers(n=2, backend="processes"),
    )
    assert key(many) == key(one)
    assert [e.trial for e in many.episodes] == list(range(10, 17))
    other = model.run(WalkFactory(drift=-0.3), seeds=seeds, workers=2)
    assert key(other) != key(one)  # the param reached the workers


def test_env_callable_and_model_factory_are_built_in_each_worker(tmp_path: Path) -> None:
    import functools

    pids = tmp_path / "pids"
    seeds = list(range(6))
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    make_env = functools.partial(
        Walk, pids=str(pids), sleep_s=0.01
    )  # slow enough that both workers start
    make_model = functools.partial(NpModel, sign_policy)  # a zero-argument factory
    many = rlmesh.run(make_model, make_env, seeds=seeds, workers=2)
    assert key(many) == key(one)
    built = read_ints(pids)
    assert len(built) == 2 and os.getpid() not in built  # one env per worker, none on the driver


# -- addresses ----------------------------------------------------------------------------------------


def test_a_list_of_addresses_gives_each_worker_one(serve: Any) -> None:
    # unix: that session uses shared-memory rings; 20 ms steps: both workers get episodes
    servers = [serve(Walk(sleep_s=0.02), transport="unix"), serve(Walk(sleep_s=0.02))]
    seeds = list(range(8))
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    many = rlmesh.run(sign_policy, [s.address for s in servers], seeds=seeds, workers=2)
    assert key(many) == key(one)
    assert {w.episodes > 0 for w in many.workers} == {True} and len(many.workers) == 2
    if shm_before or os.path.isdir("/dev/shm"):
        assert (
            set(os.listdir("/dev/shm")) - shm_before == set()
        )  # no shared-memory file left behind
    auto = rlmesh.run(
        sign_policy, [s.address for s in servers], seeds=seeds, workers=rlmesh.Workers()
    )
    assert key(auto) == key(one) and len(auto.workers) == 2  # n=None: one worker per address
    with pytest.raises(ValueError, match=r"workers=3 but the env list has 2 address\(es\)"):
        rlmesh.run(sign_policy, [s.address for s in servers], seeds=seeds, workers=3)


# -- faults -------------------------------------------------------------------------------------------


def test_a_worker_killed_mid_episode_is_retried_elsewhere(tmp_path: Path) -> None:
    import functools

    seeds = list(range(10))
    marker = tmp_path / "killed"
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    env = functools.partial(Walk, kill_seed=4, kill_marker=str(marker))
    many = rlmesh.run(sign_policy, env, seeds=seeds, workers=rlmesh.Workers(n=3, max_retries=1))
    assert marker.exists()  # the worker holding seed 4 really was killed
    assert key(many) == key(one)
    assert len(many.retries) == 1
    retry = many.retries[0]
    assert (retry.index, retry.seed) == (4, 4)
    assert "killed by signal 9 (SIGKILL)" in retry.reason and marker.read_text() in retry.reason
    assert many.to_dict()["retries"][0]["index"] == 4


def blind_driver(
    backend_class: Any, monkeypatch: pytest.MonkeyPatch, index: int, marker: Path
) -> None:
    """Make the driver look away from the moment it hands out episode ``index`` until the worker
    that runs it is dead (``marker`` holds its pid): the worker's report of the episode before
    and its death then reach the driver together, in one poll, in whatever order."""
    submit, poll = backend_class.submit, backend_class.poll
    armed: list[bool] = []

    def submitting(self: Any, slot: int, task: Any) -> bool:
        if task[0] == index and not armed:
            armed.append(True)
        return bool(submit(self, slot, task))

    def polling(self: Any, timeout: float) -> Any:
        if armed and armed[0]:
            armed[0] = False
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not (
                marker.exists()
                and marker.read_text()
                and not procs_alive([int(marker.read_text())])
            ):
                time.sleep(0.02)
        return poll(self, timeout)

    monkeypatch.setattr(backend_class, "submit", submitting)
    monkeypatch.setattr(backend_class, "poll", polling)


def test_a_worker_killed_right_after_finishing_an_episode_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one worker holds episodes 4 and 5; it reports 4 and dies in 5 before the driver reads
    # anything: 4 is kept (not run again) and the retry is put down to 5, the one it was running
    import functools

    from rlmesh.eval.distributed.processes import ProcessBackend

    seeds = list(range(8))
    marker, side = tmp_path / "killed", tmp_path / "episodes"
    blind_driver(ProcessBackend, monkeypatch, 5, marker)
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    env = functools.partial(Walk, side=str(side), kill_seed=5, kill_marker=str(marker))
    many = rlmesh.run(sign_policy, env, seeds=seeds, workers=rlmesh.Workers(n=1, max_retries=1))
    assert marker.exists()
    assert [(r.index, r.seed) for r in many.retries] == [(5, 5)]
    assert sorted(read_ints(side)) == seeds  # episode 4 ran once: its result was kept
    assert key(many) == key(one)


def test_an_episode_lost_more_than_max_retries_fails_the_run(tmp_path: Path) -> None:
    import functools

    env = functools.partial(
        Walk, kill_seed=2, kill_marker=str(tmp_path / "nope" / "never")
    )  # cannot write: kills every time
    with pytest.raises(
        WorkerLost, match=r"episode 2 \(seed 2\) was lost 2 times, more than max_retries=1"
    ) as info:
        rlmesh.run(sign_policy, env, seeds=[0, 1, 2], workers=rlmesh.Workers(n=2, max_retries=1))
    assert len(info.value.reasons) == 2


def test_an_episode_past_its_deadline_is_stopped_and_run_again(tmp_path: Path) -> None:
    # seed 3's first attempt hangs as native code does (deaf to SIGTERM): the driver stops that
    # worker at the deadline and runs the episode again on a fresh one
    import functools

    seeds = list(range(6))
    marker = tmp_path / "hung"
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    env = functools.partial(Walk, hang_seed=3, hang_marker=str(marker))
    many = rlmesh.run(sign_policy, env, seeds=seeds, workers=2, episode_timeout_seconds=1.0)
    hung = int(marker.read_text())
    assert key(many) == key(one)
    assert [(r.index, r.seed) for r in many.retries] == [(3, 3)] and many.timed_out == ()
    reason = many.retries[0].reason
    assert "episode 3 (seed 3) ran past episode_timeout_seconds=1 on worker w" in reason
    assert f"(pid {hung}): stopped" in reason
    assert procs_alive([hung]) == []


def test_an_episode_past_its_deadline_can_be_recorded_as_timed_out(tmp_path: Path) -> None:
    import functools

    seeds = list(range(6))
    journal = tmp_path / "run.journal"
    env = functools.partial(Walk, hang_seed=3, hang_marker=str(tmp_path / "no" / "marker"))
    cfg = rlmesh.Workers(n=2, episode_timeout_seconds=1.0, on_episode_timeout="record")
    many = rlmesh.run(sign_policy, env, seeds=seeds, workers=cfg, journal=journal)
    one = rlmesh.run(sign_policy, Walk(), seeds=seeds)
    assert many.timed_out == (3,) and many.retries == ()
    ep = many.episodes[3]
    assert (ep.index, ep.seed, ep.steps, ep.reward, ep.trial) == (3, 3, 0, 0.0, 3)
    assert (ep.terminated, ep.truncated, ep.success) == (False, True, False)
    assert ep.duration_s >= 1.0  # the deadline it ran past, as recorded
    assert [k for k in key(many) if k[0] != 3] == [k for k in key(one) if k[0] != 3]
    assert many.to_dict()["timed_out"] == [3]
    # a resumed run keeps it as timed out and runs nothing again
    again = rlmesh.run(sign_policy, env, seeds=seeds, workers=cfg, journal=journal)
    assert again.timed_out == (3,) and key(again) == key(many)


def test_episode_timeout_arguments_are_checked() -> None:
    with pytest.raises(
        ValueError, match="episode_timeout_seconds= is a distributed run's deadline"
    ):
        rlmesh.run(sign_policy, Walk(), seeds=[1], episode_timeout_seconds=5.0)
    with pytest.raises(
        ValueError, match=r"Workers\(episode_timeout_seconds=...\) must be a positive"
    ):
        rlmesh.Workers(n=1, episode_timeout_seconds=0)
    with pytest.raises(ValueError, match=r"expected 'retry' .* or 'record'"):
        rlmesh.Workers(n=1, on_episode_timeout="skip")
    with pytest.raises(ValueError, match="give the deadline once"):
        rlmesh.run(
            sign_policy,
            Walk(),
            seeds=[1],
            episode_timeout_seconds=5.0,
            workers=rlmesh.Workers(n=1, episode_timeout_seconds=3.0),
        )


def test_an_env_error_is_recorded_as_in_one_process() -> None:
    import functools

    class Seen(rlmesh.RunHooks):
        def __init__(self) -> None:
            self.ends: list[int] = []
            self.final: rlmesh.RunResult | None = None

        def on_episode_end(self, result: Any) -> None:
            self.ends.append(result.index)

        def on_run_end(self, result: Any) -> None:
            self.final = result

    seeds = list(range(10))
    one_hooks, many_hooks = Seen(), Seen()
    with pytest.raises(RuntimeError, match="simulator exploded on seed 6") as one_err:
        rlmesh.run(sign_policy, Walk(raise_seed=6), seeds=seeds, hooks=one_hooks)
    env = functools.partial(Walk, raise_seed=6)
    with pytest.raises(RuntimeError, match="simulator exploded on seed 6") as many_err:
        rlmesh.run(sign_policy, env, seeds=seeds, hooks=many_hooks, workers=3)
    assert type(many_err.value) is type(one_err.value) and str(many_err.value) == str(one_err.value)
    assert one_hooks.final is not None and many_hooks.final is not None
    assert key(many_hooks.final) == key(one_hooks.final)  # exactly the episodes before seed 6
    assert one_hooks.ends == list(range(6)) and set(range(6)) <= set(many_hooks.ends)


def test_ctrl_c_on_the_driver_stops_every_worker(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = textwrap.dedent(
        f"""
        import functools, signal, rlmesh, test_distributed as t
        # Ctrl-C as in a terminal: a process started in the background by a shell without
        # job control (a CI runner's) inherits SIGINT ignored, and Python leaves it so
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # every worker's first reset waits for the other two: no run ends before all three run
        env = functools.partial(t.Walk, pids={str(pids)!r}, sleep_s=0.05, horizon=400, barrier=3)
        try:
            rlmesh.run(t.sign_policy, env, seeds=list(range(50)), workers=3)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            raise SystemExit(130)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=driver_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while len(read_ints(pids)) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        workers = read_ints(pids)
        assert len(workers) == 3, (
            proc.stderr.read().decode() if proc.poll() is not None else "workers did not start"
        )
        time.sleep(0.3)
        assert proc.poll() is None, "the run ended before Ctrl-C"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.decode()
    assert b"interrupted" in out
    deadline = time.monotonic() + 10
    while procs_alive(workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs_alive(workers) == []


# -- journal and resume -------------------------------------------------------------------------------


def test_a_killed_driver_resumes_from_its_journal_and_runs_every_seed_once(tmp_path: Path) -> None:
    journal = tmp_path / "run.journal"
    side = tmp_path / "episodes"
    seeds = list(range(24))
    script = textwrap.dedent(
        f"""
        import functools, rlmesh, test_distributed as t
        env = functools.partial(t.Walk, side={str(side)!r}, sleep_s=0.02)
        rlmesh.run(t.sign_policy, env, seeds={seeds!r}, workers=3, journal={str(journal)!r})
        """
    )
    kill_driver_when(
        script, driver_env(), lambda: journaled(journal) >= len(seeds) // 2, within=120
    )
    assert len(seeds) // 2 <= journaled(journal) < len(seeds)
    import functools

    env = functools.partial(Walk, side=str(side), sleep_s=0.02)
    resumed = rlmesh.run(sign_policy, env, seeds=seeds, workers=3, journal=journal)
    counts = {s: read_ints(side).count(s) for s in seeds}
    assert counts == {s: 1 for s in seeds}  # every seed ran exactly once over both runs
    whole = rlmesh.run(sign_policy, Walk(sleep_s=0.0), seeds=seeds)
    assert key(resumed) == key(whole)
    # a journal of another run is refused, naming what differs
    with pytest.raises(ValueError, match=r"different run .*seeds"):
        rlmesh.run(sign_policy, env, seeds=seeds[:5], workers=2, journal=journal)


@pytest.mark.parametrize("deadline", [8.0, None], ids=["episode_timeout", "default_grace"])
def test_a_killed_driver_leaves_no_hung_worker_behind_and_its_run_resumes(
    tmp_path: Path, deadline: float | None
) -> None:
    # the driver is killed while a worker is stuck in a step that ignores SIGTERM: the orphan
    # gives up within the episode's deadline (or ORPHAN_GRACE_SECONDS), releasing the
    # journal's lock, and a re-run takes the journal and runs every seed once
    journal, side, marker = tmp_path / "run.journal", tmp_path / "episodes", tmp_path / "hung"
    seeds = list(range(6))
    timeout = "" if deadline is None else f", episode_timeout_seconds={deadline}"
    script = textwrap.dedent(
        f"""
        import functools, rlmesh, test_distributed as t
        env = functools.partial(t.Walk, side={str(side)!r}, hang_seed=4, hang_marker={str(marker)!r})
        rlmesh.run(t.sign_policy, env, seeds={seeds!r}, workers=2, journal={str(journal)!r}{timeout})
        """
    )
    kill_driver_when(
        script, driver_env(), lambda: marker.exists() and bool(marker.read_text()), within=60
    )
    assert wait_gone([int(marker.read_text())], within=90) == []  # the orphan ended itself
    import functools

    env = functools.partial(Walk, side=str(side), hang_seed=4, hang_marker=str(marker))
    resumed = rlmesh.run(sign_policy, env, seeds=seeds, workers=2, journal=journal)
    assert sorted(read_ints(side)) == seeds  # every seed finished once over both runs
    assert key(resumed) == key(rlmesh.run(sign_policy, Walk(), seeds=seeds))


def test_a_finished_journal_runs_nothing_again(tmp_path: Path) -> None:
    import functools

    side = tmp_path / "episodes"
    env = functools.partial(Walk, side=str(side))
    first = rlmesh.run(sign_policy, env, seeds=[1, 2, 3], workers=2, journal=tmp_path / "j.db")
    again = rlmesh.run(sign_policy, env, seeds=[1, 2, 3], workers=2, journal=tmp_path / "j.db")
    assert key(again) == key(first)
    assert sorted(read_ints(side)) == [1, 2, 3]
    with pytest.raises(
        ValueError, match="journal= records the episodes of a distributed run; pass workers=1"
    ):
        rlmesh.run(sign_policy, Walk(), seeds=[1], journal=tmp_path / "k.db")


def _edit_row(journal: Path, index: int, change: Any) -> None:
    """Rewrite episode ``index``'s row: ``change(idx, seed, result_dict) -> (idx, seed, result_text)``."""
    import json

    with sqlite3.connect(journal) as db:
        idx, seed, text = db.execute(
            "SELECT idx, seed, result FROM episodes WHERE idx = ?", (index,)
        ).fetchone()
        new_idx, new_seed, new_text = change(idx, seed, json.loads(text))
        db.execute(
            "UPDATE episodes SET idx = ?, seed = ?, result = ? WHERE idx = ?",
            (new_idx, new_seed, new_text, index),
        )


def _json(result: dict[str, Any], **changes: Any) -> str:
    import json

    return json.dumps({**result, **changes})


TAMPERED = {
    "not JSON": (lambda i, s, r: (i, s, '{"index": 2, "seed"'), "its result does not decode"),
    "a field of the wrong type": (
        lambda i, s, r: (i, s, _json(r, steps="many")),
        r"its result does not decode \(Expected `int`, got `str` - at `\$.steps`\)",
    ),
    "another episode's result": (
        lambda i, s, r: (i, s, _json(r, index=4)),
        "its result is episode 4's",
    ),
    "an index the run does not have": (lambda i, s, r: (7, s, _json(r, index=7)), "no episode 7"),
    "a seed column that disagrees": (lambda i, s, r: (i, 99, _json(r)), "seed column says 99"),
    "another seed": (
        lambda i, s, r: (i, 99, _json(r, seed=99)),
        "it ran seed 99, but this run's episode 2 has seed 12",
    ),
    "another trial index": (lambda i, s, r: (i, s, _json(r, trial=40)), "trial index 40"),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_journal_row_that_disagrees_with_the_run_is_refused_naming_it(
    tmp_path: Path, case: str
) -> None:
    import functools

    from rlmesh.errors import CorruptJournal

    journal = tmp_path / "run.journal"
    side = tmp_path / "episodes"
    seeds = [10, 11, 12, 13, 14]
    env = functools.partial(Walk, side=str(side))
    first = rlmesh.run(sign_policy, env, seeds=seeds, workers=1, journal=journal)
    change, message = TAMPERED[case]
    _edit_row(journal, 2, change)
    with pytest.raises(CorruptJournal, match=message) as caught:
        rlmesh.run(sign_policy, env, seeds=seeds, workers=1, journal=journal)
    err = caught.value
    row = 7 if case == "an index the run does not have" else 2
    assert isinstance(err, ValueError) and err.path == str(journal) and err.row == row
    assert f"journal {journal}, the row of episode {row}: " in str(err)
    remedy = f"sqlite3 {journal} 'DELETE FROM episodes WHERE idx={row}'"
    assert remedy in str(err)
    assert sorted(read_ints(side)) == seeds  # nothing ran again
    # the remedy the message gives: delete the row; only that episode runs again
    with sqlite3.connect(journal) as db:
        db.execute(f"DELETE FROM episodes WHERE idx={row}")
    again = rlmesh.run(sign_policy, env, seeds=seeds, workers=1, journal=journal)
    assert [e.index for e in again.episodes] == [0, 1, 2, 3, 4]
    assert key(again) == key(first)
    assert sorted(read_ints(side)) == sorted([*seeds, 12])


# -- hooks and shipping ----------------------------------------------------------------------------------


def test_hooks_hear_every_episode_on_the_driver_and_on_step_is_refused() -> None:
    calls: list[tuple[str, Any]] = []
    driver = threading.get_ident()

    class Log(rlmesh.RunHooks):
        def on_run_start(self, context: Any) -> None:
            calls.append(("start", context.num_envs))
            assert context.contract is not None and threading.get_ident() == driver

        def on_episode_start(self, *, episode: int, seed: int | None) -> None:
            calls.append(("ep_start", (episode, seed)))

        def on_episode_end(self, result: Any) -> None:
            calls.append(("ep_end", result.index))

        def on_run_end(self, result: Any) -> None:
            calls.append(("end", result.num_episodes))

    seeds = [9, 8, 7, 6, 5]
    rlmesh.run(sign_policy, Walk, seeds=seeds, hooks=Log(), workers=2)
    assert calls[0] == ("start", 1) and calls[-1] == ("end", 5)
    starts = [c[1] for c in calls if c[0] == "ep_start"]
    assert sorted(starts) == list(enumerate(seeds))
    assert sorted(c[1] for c in calls if c[0] == "ep_end") == list(range(5))

    class Steps(rlmesh.RunHooks):
        def on_step(self, event: Any) -> None:
            pass

    with pytest.raises(ValueError, match="Steps overrides on_step, which workers= does not call"):
        rlmesh.run(sign_policy, Walk, seeds=seeds, hooks=Steps(), workers=2)


def test_an_unpicklable_model_is_refused_naming_it() -> None:
    class Locked:
        def __init__(self) -> None:
            self.lock = threading.Lock()

        def __call__(self, obs: Any) -> int:
            return 0

        def __repr__(self) -> str:
            return "Locked(policy)"

    with pytest.raises(
        TypeError,
        match=r"sends the model to another process, but Locked\(policy\)\.lock \(a _thread\.lock\) cannot be pickled",
    ):
        rlmesh.run(Locked(), Walk, seeds=[1], workers=2)


def test_bad_workers_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="need at least one worker"):
        rlmesh.Workers(n=0)
    with pytest.raises(ValueError, match="backend"):
        rlmesh.Workers(n=2, backend="threads")
    with pytest.raises(ValueError, match="Ray options"):
        rlmesh.Workers(n=2, backend="processes", address="auto")
    with pytest.raises(TypeError, match=r"workers= takes None, an int or rlmesh\.Workers"):
        rlmesh.run(sign_policy, Walk, seeds=[1], workers="4")
    with pytest.raises(ValueError, match="view= watches one env"):
        rlmesh.run(sign_policy, Walk, seeds=[1], workers=2, view="terminal")
    with pytest.raises(ValueError, match=r"neither an address .* nor a registered Gymnasium id"):
        rlmesh.run(sign_policy, "NoSuchEnv-v9", seeds=[1], workers=2)


# -- recording --------------------------------------------------------------------------------------------


def test_a_recorder_capture_bundles_every_episode_of_every_worker(tmp_path: Path) -> None:
    import functools
    import json

    require("av")
    seeds = [3, 1, 4, 1, 5, 9]
    make = functools.partial(Walk, render_mode="rgb_array", horizon=12)

    def record(workers: Any, out: Path) -> dict[str, Any]:
        with rlmesh.Recorder(fps=10, codec="h264") as rec:
            hooks = rec.capture(model="walker", env="Walk", record="all")
            env = make if workers else make()
            rlmesh.run(sign_policy, env, seeds=seeds, hooks=hooks, workers=workers)
            rec.export(out)
        return json.loads((out / "result.json").read_text())

    one = record(None, tmp_path / "one")
    many = record(3, tmp_path / "many")
    (w1,), (w3,) = one["workloads"], many["workloads"]
    assert [e["seed"] for e in w3["episodes"]] == seeds
    assert [e["index"] for e in w3["episodes"]] == list(range(len(seeds)))

    def shape(w: dict[str, Any]) -> list[Any]:
        return [
            (
                e["index"],
                e["seed"],
                e["steps"],
                e["reward"],
                [(m["camera"], m["path"], m["frameCount"]) for m in e["media"]],
                e.get("stepLog"),
            )
            for e in w["episodes"]
        ]

    assert shape(w3) == shape(w1)  # as if recorded in one process
    for e in w3["episodes"]:
        assert e["media"] and (tmp_path / "many" / e["media"][0]["path"]).stat().st_size > 0
        assert (tmp_path / "many" / e["stepLog"]).read_text().count("\n") == e["steps"]


# -- the command line --------------------------------------------------------------------------------------


def test_rlmesh_eval_workers_runs_in_worker_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from rlmesh._cli.eval import main as eval_main

    out = tmp_path / "run.json"
    argv = [
        "test_distributed:sign_policy",
        "test_distributed:Walk",
        "--seeds",
        "0..5",
        "--workers",
        "2",
        "--json",
        str(out),
    ]
    assert eval_main([*argv, "--journal", str(tmp_path / "j.db"), "--no-progress"]) == 0
    doc = json.loads(out.read_text())["result"]
    assert [e["seed"] for e in doc["episodes"]] == list(range(6))
    assert sum(w["episodes"] for w in doc["workers"]) == 6
    one = rlmesh.run(sign_policy, Walk(), seeds=list(range(6)))
    assert [e["reward"] for e in doc["episodes"]] == [e.reward for e in one.episodes]
    assert (
        eval_main(["test_distributed:sign_policy", "test_distributed:Walk", "--ray", "auto"]) == 1
    )
    assert "--ray and --journal need --workers N" in capsys.readouterr().err


# -- progress and the example -----------------------------------------------------------------------------


def test_rlmesh_eval_episode_timeout_records_a_hung_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from rlmesh._cli.eval import main as eval_main

    out = tmp_path / "run.json"
    kwargs = json.dumps({"hang_seed": 2, "hang_marker": str(tmp_path / "no" / "marker")})
    argv = ["test_distributed:sign_policy", "test_distributed:Walk", "--seeds", "0..3"]
    argv += ["--env-kwargs", kwargs, "--no-progress", "--json", str(out)]
    timeout = ["--episode-timeout", "1", "--on-episode-timeout", "record"]
    assert eval_main([*argv, "--workers", "2", *timeout]) == 0
    doc = json.loads(out.read_text())["result"]
    assert doc["timed_out"] == [2] and doc["retries"] == []
    assert [e["seed"] for e in doc["episodes"]] == [0, 1, 2, 3]
    assert doc["episodes"][2]["truncated"] and doc["episodes"][2]["steps"] == 0
    assert eval_main([*argv, *timeout]) == 1
    assert "--episode-timeout needs --workers N" in capsys.readouterr().err


def test_the_progress_line_shows_counts_rate_eta_wilson_interval_and_workers() -> None:
    import io

    from rlmesh.eval._progress import RunProgress, wilson_interval

    out = io.StringIO()
    progress = RunProgress(10, 4, enabled=True, out=out)
    for success in (True, True, False, True):
        progress.update(
            episode=rlmesh.EpisodeResult(0, 0, 5, 1.0, True, False, success=success), alive=3
        )
    line = progress.line()
    assert (
        line.startswith("episodes 4/10 | ")
        and " ep/s | ETA " in line
        and line.endswith("| workers 3/4")
    )
    lo, hi = wilson_interval(3, 4)
    assert f"success 75% (95% CI {lo:.0%}-{hi:.0%})" in line
    assert (round(lo, 3), round(hi, 3)) == (0.301, 0.954)
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0
    progress.close()
    assert "episodes 4/10" in out.getvalue()  # not a terminal: plain lines


def test_the_distributed_example_runs_without_ray(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "RLMESH_WORKFLOW_EDITION": ""}
    out = subprocess.run(
        [
            sys.executable,
            str(root / "examples" / "distributed_eval.py"),
            str(tmp_path),
            "--workers",
            "3",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert out.returncode == 0, out.stderr
    assert "workers=3 (processes): 64 episodes" in out.stdout
    assert "same episodes as one process: True" in out.stdout
    assert (tmp_path / "run.journal").exists()


# -- sandboxes ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_each_worker_starts_its_own_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import functools

    monkeypatch.setenv("RLMESH_SANDBOX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RLMESH_SANDBOX_PROGRESS", "1")
    seeds = list(range(6))
    with rlmesh.SandboxEnv("gym://CartPole-v1", backend="venv") as env:
        one = rlmesh.run(cart_policy, env, seeds=seeds)
    capfd.readouterr()
    make = functools.partial(rlmesh.SandboxEnv, "gym://CartPole-v1", backend="venv")
    many = rlmesh.run(cart_policy, make, seeds=seeds, workers=2)
    assert key(many) == key(one)
    assert (
        capfd.readouterr().err.count("resolved 'gym://CartPole-v1'") == 2
    )  # one sandbox per worker
    assert children() == []  # and both are gone
    with pytest.raises(
        ValueError, match=r"functools\.partial\(rlmesh\.SandboxEnv, 'gym://CartPole-v1', \.\.\.\)"
    ):
        rlmesh.run(cart_policy, "gym://CartPole-v1", seeds=seeds, workers=2)


def test_a_worker_that_cannot_build_its_env_fails_the_run_with_that_error() -> None:
    import functools

    def broken_env(scene: str) -> Any:
        raise FileNotFoundError(f"no such scene: {scene}")

    with pytest.raises(FileNotFoundError, match="no such scene: kitchen"):
        rlmesh.run(sign_policy, functools.partial(broken_env, "kitchen"), seeds=[1, 2], workers=2)
    assert children() == []


def test_record_first_n_counts_the_runs_episodes_not_each_workers(tmp_path: Path) -> None:
    import functools
    import json

    require("av")
    make = functools.partial(Walk, render_mode="rgb_array", horizon=8, sleep_s=0.01)
    with rlmesh.Recorder(fps=10, codec="h264") as rec:
        hooks = rec.capture(model="walker", env="Walk", record="first:2")
        rlmesh.run(sign_policy, make, seeds=[10, 11, 12, 13, 14], hooks=hooks, workers=2)
        rec.export(tmp_path / "b")
    (w,) = json.loads((tmp_path / "b" / "result.json").read_text())["workloads"]
    assert [e["seed"] for e in w["episodes"]] == [10, 11, 12, 13, 14]
    assert [bool(e.get("media")) for e in w["episodes"]] == [True, True, False, False, False]
