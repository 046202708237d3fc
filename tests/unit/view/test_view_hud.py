"""HUD rules (VIEW-8, VIEW-15, EVAL-70, DELTA-44), terminal drawing helpers (VIEW-12..14) and View config (VIEW-1/2)."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.eval import View
from rlmesh.eval._view import normalize_view
from rlmesh.view._core import Viewer
from rlmesh.view._hud import format_duration, format_hud, outcome_of, wilson_interval
from rlmesh.view._sources import FrameSource
from rlmesh.view._terminal import fit_size, halfblock_rows, parse_keys

FULL = {
    "episode": 3,
    "episodes": 10,
    "step": 42,
    "elapsed_s": 3725.0,
    "seed": 5,
    "model_ms": 4.56,
    "env_ms": 12.4,
    "sps": 30.04,
    "chunk_pos": 2,
    "chunk_len": 8,
    "reward": 1.5,
    "outcome": "success",
    "width": 640,
    "height": 480,
    "fps": 29.6,
}


def test_view15_full_line_groups_and_formats() -> None:
    assert format_hud(FULL) == (
        "ep 3/10  step 42  1:02:05  seed 5  |  model 4.6ms  env 12ms  30.0sps  |  chunk 2/8  |  "
        "R +1.50 success  |  640x480  30fps"
    )


def test_view15_groups_drop_frame_then_chunk_then_timing() -> None:
    full = format_hud(FULL)
    no_frame = format_hud(FULL, len(full) - 1)
    assert "640x480" not in no_frame and "chunk 2/8" in no_frame
    no_chunk = format_hud(FULL, len(no_frame) - 1)
    assert "chunk" not in no_chunk and "model" in no_chunk
    core = format_hud(FULL, len(no_chunk) - 1)
    assert "model" not in core and "step 42" in core and "R +1.50 success" in core
    tiny = format_hud(FULL, 5)
    assert tiny == "step 42  |  R +1.50 success"  # step and reward always stay


def test_view15_unknown_values_are_omitted() -> None:
    line = format_hud(
        {"step": 1, "reward": -2.0, "episode": 0, "seed": -1, "width": 0, "chunk_len": 1}
    )
    assert (
        not line.startswith("ep ")
        and "seed" not in line
        and "fps" not in line
        and "chunk" not in line
    )
    assert "R -2.00" in line
    assert format_hud({"step": 1, "episode": 4, "episodes": 0}).startswith("ep 4  step 1")


def test_view15_durations() -> None:
    assert format_duration(0) == "0:00"
    assert format_duration(59.9) == "0:59"
    assert format_duration(3600) == "1:00:00"


def test_view8_outcome_rule_with_delta44() -> None:
    assert outcome_of(True, False, True) == "success"
    assert outcome_of(False, True, True) == "success"
    assert outcome_of(True, False, False) == "failure"
    assert outcome_of(True, False, None) == "done"  # DELTA-44: never an inferred success
    assert outcome_of(False, True, None) == "timeout"
    assert outcome_of(False, True, False) == "timeout"


def test_success_rate_interval() -> None:
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and 0.25 < hi < 0.35
    lo, hi = wilson_interval(10, 10)
    assert hi == pytest.approx(1.0) and 0.65 < lo < 0.75
    assert wilson_interval(0, 0) == (0.0, 1.0)


def _viewer() -> Viewer:
    return Viewer([FrameSource("cam", "leaf", "cam", lambda o, lane: None)], fps=30)


def test_eval70_ema_seeded_by_first_sample_and_replays_do_not_count() -> None:
    class Route:
        chunk_pos, chunk_len = 1, 4

    v = _viewer()
    v.route = Route()
    v.begin_episode(0, 7, 3, None)
    v.step(None, 1, 1.0, 1.0, 10.0, 2.0)
    assert v.hud.model_ms == 10.0 and v.hud.env_ms == 2.0 and v.hud.sps == 0.0  # first step: no gap
    Route.chunk_pos = 2  # a replay step: model_ms keeps its value
    v.step(None, 2, 2.0, 1.0, 0.001, 4.0)
    assert v.hud.model_ms == 10.0
    assert v.hud.env_ms == pytest.approx(0.85 * 2.0 + 0.15 * 4.0)
    assert v.hud.sps > 0.0
    Route.chunk_pos = 1
    v.step(None, 3, 3.0, 1.0, 20.0, 4.0)
    assert v.hud.model_ms == pytest.approx(0.85 * 10.0 + 0.15 * 20.0)
    doc = v.hud_doc()
    assert doc["episode"] == 1 and doc["episodes"] == 3 and doc["seed"] == 7 and doc["step"] == 3
    assert doc["chunk_pos"] == 1 and doc["chunk_len"] == 4
    assert set(doc) >= {
        "step",
        "reward",
        "outcome",
        "fps",
        "model_ms",
        "env_ms",
        "sps",
        "elapsed_s",
        "episode",
        "episodes",
        "seed",
        "width",
        "height",
        "chunk_pos",
        "chunk_len",
    }  # VIEW-16 /hud.json


def test_view8_unseeded_episode_reports_seed_minus_one() -> None:
    v = _viewer()
    v.begin_episode(0, None, 0, None)
    assert v.hud_doc()["seed"] == -1 and v.hud_doc()["episodes"] == 0


# -- terminal helpers --------------------------------------------------------------------------


def test_view14_fit_keeps_aspect_and_even_height() -> None:
    assert fit_size(480, 640, 80, 22) == (44, 58)
    ph, pw = fit_size(100, 1000, 50, 20)
    assert pw == 50 and ph % 2 == 0 and ph >= 2
    assert fit_size(0, 10, 80, 24) == (0, 0)


def test_view14_half_blocks_emit_colour_only_on_change() -> None:
    img = np.zeros((2, 3, 3), np.uint8)
    img[0] = (255, 0, 0)
    img[1] = (0, 0, 255)
    (row,) = halfblock_rows(img)
    assert row.count("▀") == 3
    assert row.count("\x1b[38;2;255;0;0m") == 1 and row.count("\x1b[48;2;0;0;255m") == 1
    img[0, 1] = (0, 255, 0)
    (row,) = halfblock_rows(img)
    assert row.count("\x1b[38;2;") == 3 and row.count("\x1b[48;2;") == 1


def test_view12_keys() -> None:
    assert parse_keys(b"\x1b[C\t ") == ["next", "next", "next"]
    assert parse_keys(b"\x1b[D") == ["prev"]
    assert parse_keys(b"19") == ["select:0", "select:8"]
    assert parse_keys(b"0") == []
    assert parse_keys(b"nN") == ["skip", "skip"]
    assert parse_keys(b"qQ\x1b\x03\x04") == ["quit"] * 5
    assert parse_keys(b"p.") == ["toggle", "step"]
    assert parse_keys(b"\x1b[A") == []  # other arrows are ignored


# -- View config -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fps": 0}, "fps"),
        ({"format": "gif"}, "format"),
        ({"quality": 0}, "quality"),
        ({"quality": 101}, "quality"),
        ({"port": 0}, "port"),
        ({"port": 65536}, "port"),
        ({"backend": "tv"}, "backend"),
        ({"host": ""}, "host"),
        ({"token": ""}, "token"),
    ],
)
def test_view1_validation(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        View(**kwargs)  # type: ignore[arg-type]


def test_view1_bounds_are_inclusive_and_repr_is_the_seed_one() -> None:
    View(port=1, quality=1, fps=1)
    View(port=65535, quality=100)
    assert repr(View("http", port=9000)) == (
        "View(backend='http', port=9000, fps=30, source=None, format='jpeg', quality=75)"
    )
    assert View(host="::1").host == "::1"


def test_view2_shorthands() -> None:
    assert normalize_view("http:9001") == View("http", port=9001)
    with pytest.raises(ValueError, match="http:"):
        normalize_view("http:x")
    with pytest.raises(ValueError, match="unknown view"):
        normalize_view("browser")
    with pytest.raises(TypeError):
        normalize_view(3)
