"""One distributed run over several (model, env, seeds) groups -- a suite's tasks -- with task
affinity: each group's results equal its own one-process run, and each group's env is built
by about one worker instead of by every worker (``rlmesh.eval._api.run_groups``)."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
from test_distributed import Walk, key, sign_policy

import rlmesh
from rlmesh.eval._api import run_groups
from rlmesh.eval._options import RunOptions
from rlmesh.numpy import Model as NpModel

pytestmark = pytest.mark.slow


def builds(path: Path) -> list[tuple[int, str]]:
    """``(pid, group)`` per env built, in order."""
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(int(pid), group) for pid, group in rows]


class CountedWalk(Walk):
    """A walk that notes ``pid group`` in a file each time one is built."""

    def __init__(self, group: str, log: str, drift: float, sleep_s: float = 0.0) -> None:
        super().__init__(drift=drift, sleep_s=sleep_s)
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()} {group}\n")


def groups(
    log: Path, n: int, episodes: int, sleep_s: float = 0.002
) -> list[tuple[Any, Any, list[int]]]:
    model = NpModel(sign_policy)  # one model object: the workers keep it across groups
    return [
        (
            model,
            functools.partial(CountedWalk, f"g{g}", str(log), 0.2 * g - 0.4, sleep_s),
            [100 * g + k for k in range(episodes)],
        )
        for g in range(n)
    ]


def test_each_group_equals_its_own_run_and_each_env_is_built_by_about_one_worker(
    tmp_path: Path,
) -> None:
    log = tmp_path / "builds"
    plan = groups(log, 5, 6)
    results = run_groups(plan, RunOptions(workers=rlmesh.Workers(n=2, backend="processes")))
    assert len(results) == 5
    for (model, env, seeds), result in zip(plan, results):
        one = rlmesh.run(model, env(), seeds=seeds)
        assert key(result) == key(one)  # indices and trial indices 0..5 per group, as its own run
    made = builds(log)
    one_process = [row for row in made if row[0] == os.getpid()]
    in_workers = [row for row in made if row[0] != os.getpid()]
    assert len(one_process) == 5  # the reference runs above
    # before affinity every worker built every group's env (10 builds); now each group once,
    # plus at most one worker joining the last group's tail
    assert 5 <= len(in_workers) <= 6, in_workers
    assert {group for _, group in in_workers} == {f"g{g}" for g in range(5)}


def test_groups_with_fewer_episodes_than_workers_and_a_warm_pool(tmp_path: Path) -> None:
    log = tmp_path / "builds"
    plan = groups(log, 3, 1, sleep_s=0.0)
    with rlmesh.Workers(n=2, backend="processes").start() as pool:
        first = run_groups(plan, RunOptions(workers=pool))
        again = run_groups(plan, RunOptions(workers=pool))
    assert [key(r) for r in first] == [key(r) for r in again]
    assert [[e.seed for e in r.episodes] for r in first] == [[0], [100], [200]]


def test_a_journal_resumes_a_grouped_run_and_names_tell_its_runs_apart(tmp_path: Path) -> None:
    log = tmp_path / "builds"
    journal = tmp_path / "suite.journal"
    plan = groups(log, 3, 4)
    options = RunOptions(workers=2, journal=str(journal))
    first = run_groups(plan, options, names=["a", "b", "c"])
    ran = len(builds(log))
    again = run_groups(plan, options, names=["a", "b", "c"])
    assert [key(r) for r in again] == [key(r) for r in first]
    # the resumed run ran no episode: its workers built only the env they set up on
    assert len(builds(log)) - ran <= 2
    with pytest.raises(ValueError, match="names"):
        run_groups(plan, options, names=["a", "b", "d"])


def test_an_episode_error_in_one_group_fails_the_run_with_it(tmp_path: Path) -> None:
    bad = functools.partial(Walk, raise_seed=102)
    plan = [*groups(tmp_path / "builds", 2, 3), (NpModel(sign_policy), bad, [100, 101, 102])]
    with pytest.raises(RuntimeError, match="simulator exploded on seed 102"):
        run_groups(plan, RunOptions(workers=2))


def test_worker_side_hooks_are_refused() -> None:
    from rlmesh.recorder import Recorder

    rec = Recorder()
    try:
        with pytest.raises(ValueError, match="driver-side hooks only"):
            run_groups(
                [(sign_policy, Walk, [0])],
                RunOptions(workers=1, hooks=rec.capture(model="m", env="walk")),
            )
    finally:
        rec.close()
