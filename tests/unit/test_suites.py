"""rlmesh.suites without a simulator: suite strings, result sets, the GL choice, the install hint."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from rlmesh.errors import DependencyMissing
from rlmesh.eval import EpisodeResult, RunResult
from rlmesh.suites import SuiteResult, TaskResult, _gl, metaworld, parse_suite
from rlmesh.suites._results import wilson_interval


def test_suite_string_selects_a_group_a_task_list_or_the_default() -> None:
    assert parse_suite("metaworld:MT10").tasks == metaworld.MT10
    assert parse_suite("metaworld").label == "metaworld:MT10"
    assert len(parse_suite("metaworld:mt50").tasks) == 50
    assert parse_suite("metaworld:reach,push-v3").tasks == ("reach-v3", "push-v3")
    assert parse_suite("metaworld:MT10", tasks="push-v3,reach-v3").tasks == ("push-v3", "reach-v3")


@pytest.mark.parametrize(
    ("spec", "tasks", "match"),
    [
        ("libero:10", None, "unknown suite 'libero'.*metaworld"),
        ("metaworld:MT11", None, "unknown metaworld task 'MT11'.*MT10"),
        ("metaworld:MT10", "assembly-v3", "not in metaworld:MT10"),
    ],
)
def test_bad_suite_strings_say_what_exists(spec: str, tasks: str | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_suite(spec, tasks)


def test_suite_env_recipe_is_picklable_and_carries_the_params() -> None:
    import pickle

    recipe = parse_suite("metaworld:push-v3", camera="corner").env("push-v3", image_size=64)
    again = pickle.loads(pickle.dumps(recipe))
    assert again.func is metaworld.make_env
    assert again.args == ("push-v3",) and again.keywords == {"camera": "corner", "image_size": 64}


def test_seed_schedule_is_episode_index() -> None:
    assert metaworld.seeds("reach-v3", 4) == [0, 1, 2, 3]
    assert metaworld.seeds("push-v3", 0) == []


def test_wilson_interval_contains_the_rate_and_narrows_with_episodes() -> None:
    lo, hi = wilson_interval(10, 10)
    assert hi == pytest.approx(1.0) and 0.6 < lo < 0.8
    lo2, _ = wilson_interval(100, 100)
    assert lo2 > lo
    assert wilson_interval(0, 0) == (0.0, 1.0)


def _episode(i: int, success: bool, reward: float) -> EpisodeResult:
    return EpisodeResult(i, i, 10, reward, success, not success, success)


def test_suite_result_is_a_mapping_of_task_results_with_overall_figures() -> None:
    a = TaskResult("reach-v3", RunResult([_episode(0, True, 2.0), _episode(1, True, 4.0)]), 1.0)
    b = TaskResult("push-v3", RunResult([_episode(0, False, 0.0), _episode(1, True, 2.0)]), 1.0)
    res = SuiteResult("metaworld:reach-v3,push-v3", "m", (a, b), seconds=3.6)
    assert list(res) == ["reach-v3", "push-v3"] and res["push-v3"] is b and len(res) == 2
    assert res.success_rate == pytest.approx(0.75) and res.episodes == 4
    assert res.episodes_per_hour == pytest.approx(4000.0)
    doc = res.to_dict()
    assert doc["tasks"]["push-v3"]["successes"] == 1
    assert doc["tasks"]["push-v3"]["success_ci95"] == list(b.success_interval)
    with pytest.raises(KeyError):
        res["door-open-v3"]


def test_headless_gl_leaves_an_explicit_choice_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUJOCO_GL", "egl")
    assert _gl.setup_headless_gl() == "egl"


def test_headless_gl_picks_the_first_backend_that_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)
    monkeypatch.setitem(sys.modules, "mujoco", None)  # not imported yet (None: the key exists)
    monkeypatch.delitem(sys.modules, "mujoco")
    monkeypatch.setattr(_gl, "_gpu", lambda: False)
    monkeypatch.setattr(_gl, "_loads", lambda backend: backend == "egl")
    assert _gl.setup_headless_gl() == "egl"
    import os

    assert os.environ["MUJOCO_GL"] == "egl" and os.environ["PYOPENGL_PLATFORM"] == "egl"


def test_no_gl_backend_names_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setitem(sys.modules, "mujoco", None)
    monkeypatch.delitem(sys.modules, "mujoco")
    monkeypatch.setattr(_gl, "_loads", lambda backend: False)
    with pytest.raises(DependencyMissing, match="apt-get install -y libosmesa6") as info:
        _gl.setup_headless_gl()
    assert isinstance(info.value, ImportError)
    import os

    assert "MUJOCO_GL" not in os.environ


def test_missing_metaworld_raises_with_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "metaworld", None)  # import metaworld -> ImportError
    with pytest.raises(DependencyMissing, match=r"the \"metaworld\" extra of rlmesh-py"):
        metaworld.make_env("reach-v3")
    with pytest.raises(DependencyMissing, match=r"the \"metaworld\" extra of rlmesh-py"):
        metaworld.scripted("reach-v3")


def test_factory_catalog_has_a_variant_per_task_and_camera_branches() -> None:
    variants = metaworld.MetaWorld.enumerate_variants()
    assert [v.id for v in variants] == list(metaworld.MT50)
    assert isinstance(metaworld.factory(), metaworld.MetaWorld)
    state: Any = metaworld.MetaWorld.tags_for(camera=None)
    wrist: Any = metaworld.MetaWorld.tags_for(camera="gripperPOV")
    assert "image" not in state.observation and wrist.observation["image"].role == "image/wrist"
    assert metaworld.instruction_for("pick-place-v3") == "pick place"
