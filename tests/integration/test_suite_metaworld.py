"""Meta-World end to end: two MT10 tasks with the scripted policy, in process, served, over
workers, recorded; the Gymnasium id served as it is reproduces a local trajectory.

Kept to a few minutes on 2 cores: short episodes where the test allows, few seeds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import require

pytestmark = pytest.mark.slow

require("metaworld", "the metaworld extra: pip install '.[metaworld]'")
os.environ.setdefault("MUJOCO_GL", "osmesa")  # CI installs Debian's libosmesa6

import rlmesh.numpy as rn  # noqa: E402
from rlmesh import suites  # noqa: E402
from rlmesh.suites import metaworld as mw  # noqa: E402

TASKS = ("reach-v3", "push-v3")


def _key(result: Any) -> list[tuple[Any, ...]]:
    return [(e.seed, e.steps, e.success, round(e.reward, 9)) for e in result.episodes]


def _serve(tmp_path: Path, target: str, kwargs: dict[str, Any]) -> Iterator[str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmesh.cli",
            "serve",
            target,
            "--address",
            f"unix://{tmp_path}/env.sock",
            "--kwargs-json",
            json.dumps(kwargs),
            "--ready-file",
            str(ready),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not (ready.exists() and ready.read_text().strip()):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the server did not start in 120 s"
            time.sleep(0.05)
        yield ready.read_text().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def in_process() -> Any:
    return suites.run("scripted", "metaworld", tasks=list(TASKS), episodes_per_task=3)


def test_scripted_policy_solves_two_mt10_tasks_in_process(in_process: Any) -> None:
    assert list(in_process) == list(TASKS)
    for task in TASKS:
        assert in_process[task].success_rate == 1.0, (task, _key(in_process[task].result))
        assert [e.seed for e in in_process[task].result.episodes] == [0, 1, 2]
    assert in_process.sandboxed is False and in_process.workers is None


def test_workers_run_the_same_episodes_per_seed(in_process: Any) -> None:
    spread = suites.run("scripted", "metaworld", tasks=list(TASKS), episodes_per_task=3, workers=2)
    assert spread.workers == 2
    for task in TASKS:
        assert _key(spread[task].result) == _key(in_process[task].result)


def test_a_suite_journal_resumes_and_refuses_another_task_list(
    in_process: Any, tmp_path: Path
) -> None:
    seen: list[str] = []
    first = suites.run(
        "scripted",
        "metaworld",
        tasks=list(TASKS),
        episodes_per_task=3,
        workers=2,
        journal=tmp_path,
        on_task=lambda t: seen.append(t.task),
    )
    assert sorted(seen) == sorted(TASKS) and (tmp_path / "suite.journal").exists()
    assert [t.seconds > 0 for t in first.tasks] == [True, True]
    again = suites.run(
        "scripted", "metaworld", tasks=list(TASKS), episodes_per_task=3, workers=2, journal=tmp_path
    )
    for task in TASKS:
        assert _key(again[task].result) == _key(in_process[task].result)
        assert again[task].seconds == 0.0  # every episode came from the journal: none ran again
    with pytest.raises(ValueError, match="names"):
        suites.run(
            "scripted", "metaworld", tasks=["reach-v3"], episodes_per_task=3, journal=tmp_path
        )


def test_served_suite_env_runs_the_same_episodes(in_process: Any, tmp_path: Path) -> None:
    for task in TASKS:
        for address in _serve(tmp_path / task, "rlmesh.suites.metaworld:MetaWorld", {"task": task}):
            served = rlmesh.run(mw.scripted(task), address, seeds=mw.seeds(task, 3))
        assert _key(served) == _key(in_process[task].result)


def test_served_meta_world_gym_id_reproduces_a_local_trajectory(tmp_path: Path) -> None:
    """The server never resets or steps the env on its own: Meta-World's Gymnasium envs are
    seeded at construction and advance with each reset."""
    import gymnasium as gym

    def rollout(env: Any) -> np.ndarray[Any, Any]:
        policy, out = mw.scripted("reach-v3"), []
        for _ in range(2):
            obs, _ = env.reset()
            out.append(np.asarray(obs))
            for _ in range(25):
                obs, reward, *_ = env.step(policy.predict(obs))
                out += [np.asarray(obs), np.asarray([reward])]
        return np.concatenate(out)

    local = gym.make("Meta-World/MT1", env_name="reach-v3", seed=7)
    expected = rollout(local)
    local.close()
    for address in _serve(tmp_path, "Meta-World/MT1", {"env_name": "reach-v3", "seed": 7}):
        remote = rn.RemoteEnv(address)
        got = rollout(remote)
        remote.close()
    np.testing.assert_array_equal(got, expected)


def test_recorded_suite_writes_one_bundle_with_videos_per_task(tmp_path: Path) -> None:
    require("av", "the record extra")
    from rlmesh.recorder import ResultSet

    bundle = tmp_path / "bundle"
    res = suites.run(
        "scripted",
        "metaworld",
        tasks=list(TASKS),
        episodes_per_task=1,
        workers=2,
        record=bundle,
        camera="corner",
        image_size=64,
        max_episode_steps=20,
    )
    assert all(res[t].episodes == 1 for t in TASKS)
    loaded = ResultSet.load(bundle)
    tasks = sorted(w.task for w in loaded.workloads)
    assert tasks == sorted(TASKS)
    videos = sorted(p.name for p in bundle.rglob("*.mp4"))
    assert len(videos) == len(TASKS), videos


def test_eval_cli_suite_reports_success_per_task(tmp_path: Path) -> None:
    from rlmesh._cli.eval import main

    out = tmp_path / "suite.json"
    code = main(
        [
            "metaworld:scripted",
            "--suite",
            "metaworld:reach-v3,push-v3",
            "--episodes-per-task",
            "2",
            "--workers",
            "2",
            "--json",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert set(doc["tasks"]) == set(TASKS)
    for task in TASKS:
        row = doc["tasks"][task]
        assert row["episodes"] == 2 and row["success_rate"] >= 0.9
        assert 0.0 <= row["success_ci95"][0] <= row["success_rate"] <= row["success_ci95"][1]
    assert doc["workers"] == 2


def test_camera_images_are_upright_frames_of_the_declared_size() -> None:
    env = mw.make_env("reach-v3", camera="corner", image_size=48, render_every=3)
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (48, 48, 3) and obs["image"].dtype == np.uint8
    assert obs["instruction"] == "reach"
    first = obs["image"]
    obs, *_ = env.step(np.zeros(4, np.float32))
    assert obs["image"] is first  # render_every=3: the frame repeats until step 3
    for _ in range(2):
        obs, *_ = env.step(np.zeros(4, np.float32))
    assert obs["image"] is not first
    env.close()


def test_the_example_runs_as_a_user_would() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [
            sys.executable,
            "examples/metaworld_suite.py",
            "--suite",
            "metaworld:reach-v3",
            "--episodes",
            "1",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "reach-v3" in out.stdout and "episodes/hour" in out.stdout


def test_suite_runs_in_a_venv_sandbox_that_installs_metaworld(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The envs in their own venv (built from the package index, then cached), rendering headless there."""
    monkeypatch.setenv("RLMESH_SANDBOX_CACHE", str(tmp_path_factory.mktemp("sbx-metaworld")))
    monkeypatch.setenv("RLMESH_SANDBOX_PROGRESS", "0")
    res = suites.run(
        "scripted",
        "metaworld:reach-v3",
        episodes_per_task=1,
        sandbox="venv",
        camera="corner",
        image_size=32,
        max_episode_steps=80,
    )
    assert res.sandboxed is True
    assert res["reach-v3"].success_rate == 1.0
