"""Result types, sentinels, View and trial_index (EVAL-40..44, VIEW-1/2, MOD-27/29, DELTA-43/47)."""

from __future__ import annotations

import copy
import pickle
import warnings
from typing import Any

import numpy as np
import pytest

import rlmesh.eval as ev
from rlmesh.eval import EpisodeResult, RunResult, TelemetryRow, View
from rlmesh.eval._results import success_from_info
from rlmesh.eval._view import normalize_view


def ep(
    i: int = 0, *, terminated: bool = True, success: Any = None, reward: float = 1.0
) -> EpisodeResult:
    return EpisodeResult(i, None, 3, reward, terminated, not terminated, success)


def test_episode_result_positional_order_and_defaults() -> None:
    e = EpisodeResult(0, 7, 10, 2.5, True, False)
    assert (e.success, e.duration_s, e.predict_ms, e.step_ms, e.trial) == (
        None,
        0.0,
        0.0,
        0.0,
        None,
    )
    with pytest.raises(AttributeError):
        e.index = 1  # type: ignore[misc]


def test_success_rate_prefers_reported_success_and_falls_back_to_terminated() -> None:
    # EVAL-42 example: [(term, False), (trunc, True), (term, None)] -> 2/3
    r = RunResult(
        (ep(0, success=False), ep(1, terminated=False, success=True), ep(2, success=None))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert r.success_rate == pytest.approx(2 / 3)
    assert r.reported_success_rate is None


def test_empty_result_aggregates_are_zero() -> None:
    r = RunResult()
    assert (r.num_episodes, r.total_steps, r.mean_reward, r.success_rate) == (0, 0, 0.0, 0.0)
    assert repr(r) == "RunResult(episodes=0, mean_reward=0.000, total_steps=0)"
    assert r.format_telemetry() == "(no telemetry: populated by Model.run's native loop)"


def test_run_result_repr_and_to_dict() -> None:
    r = RunResult((ep(0, reward=1.0, success=True), ep(1, reward=2.0, success=False)))
    assert repr(r) == "RunResult(episodes=2, mean_reward=1.500, total_steps=6)"
    d = r.to_dict()
    assert d["num_episodes"] == 2 and d["success_rate"] == 0.5 and d["reported_success_rate"] == 0.5
    assert d["episodes"][1]["reward"] == 2.0


def test_format_telemetry_is_an_aligned_table() -> None:
    row = TelemetryRow("env.step", "env", "rpc.total", "ms", 4, 1.0, 1.0, 2.0, 3.456)
    text = RunResult(telemetry=(row,)).format_telemetry().splitlines()
    assert text[0].split() == ["op", "metric", "unit", "count", "avg", "p50", "p95", "p99"]
    assert text[1].split() == ["env.step", "rpc.total", "ms", "4", "1.00", "1.00", "2.00", "3.46"]


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"is_success": True, "success": False}, True),
        ({"success": np.float32(0.0)}, False),
        ({"success": np.array(1)}, True),
        ({"is_success": "yes", "success": 1}, True),
        ({"is_success": "yes"}, None),
        ({"task_success": 1}, True),
        ({}, None),
        (None, None),
    ],
)
def test_success_signal_parsing(info: Any, expected: Any) -> None:
    # EVAL-40, DECISION-5, DELTA-44
    assert success_from_info(info) is expected


def test_sentinels_are_loud_singletons() -> None:
    # MOD-27, MOD-29
    assert repr(ev.NO_ADAPTER) == "NO_ADAPTER"
    assert repr(ev.RANDOM_SAMPLE) == "RANDOM_SAMPLE"
    assert copy.deepcopy(ev.NO_ADAPTER) is ev.NO_ADAPTER
    assert pickle.loads(pickle.dumps(ev.RANDOM_SAMPLE)) is ev.RANDOM_SAMPLE


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        (None, None),
        (False, None),
        (True, View()),
        ("", View("terminal")),
        (" TTY ", View("terminal")),
        ("both", View("both")),
        ("http", View("http", port=8008)),
        ("http:9000", View("http", port=9000)),
    ],
)
def test_view_shorthands_normalize(arg: Any, expected: Any) -> None:
    # VIEW-2
    assert normalize_view(arg) == expected


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "tv"}, "backend"),
        ({"port": 0}, "port"),
        ({"port": 65536}, "port"),
        ({"fps": 0}, "fps"),
        ({"format": "gif"}, "format"),
        ({"quality": 101}, "quality"),
    ],
)
def test_view_fields_are_validated(kwargs: dict[str, Any], match: str) -> None:
    # VIEW-1
    with pytest.raises(ValueError, match=match):
        View(**kwargs)
    View(port=1, fps=1, quality=1)
    View(port=65535, quality=100, format="png")


def test_bad_view_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="port after 'http:'"):
        normalize_view("http:abc")
    with pytest.raises(ValueError, match="unknown view"):
        normalize_view("tv")
    with pytest.raises(TypeError):
        normalize_view(3)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"trial_index": 3}, 3),
        ({"trial_index": 2.9}, 2),
        ({"trial_index": np.int64(4)}, 4),
        ({"trial_index": True}, None),
        ({"trial_index": "3"}, None),
        ({"trial_index": None}, None),
        ({}, None),
        (None, None),
    ],
)
def test_trial_index_reads_the_reserved_reset_option(options: Any, expected: Any) -> None:
    # DELTA-47
    assert ev.trial_index(options) == expected


def test_env_reset_options_key_is_the_release_constant() -> None:
    assert ev.ENV_RESET_OPTIONS_KEY == "rlmesh.env.v1.reset_options"
