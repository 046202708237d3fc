"""The Recorder's surface and its rlmesh.result.v1 document, no video (REC-1, REC-2, REC-7..9, DELTA-52)."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

import rlmesh
import rlmesh.recorder as recorder
from rlmesh import EpisodeResult, RunResult
from rlmesh.recorder import SCHEMA, EpisodeRecord, MediaRef, Recorder, ResultSet, WorkloadRecord
from rlmesh.recorder._capture import parse_record
from rlmesh.recorder._records import sanitize_name


def ep(
    i: int,
    *,
    success: bool | None = True,
    reward: float = 1.0,
    steps: int = 3,
    seed: int | None = None,
) -> EpisodeResult:
    return EpisodeResult(
        i, seed, steps, reward, success is not None, success is None, success, 0.25, 9.0, 9.0
    )


def test_module_exports_the_A10_names_plus_merge_and_crash_recovery() -> None:
    assert set(recorder.__all__) == {"SCHEMA", "EpisodeRecord", "MediaRef", "Recorder", "ResultSet", "WorkloadRecord", "merge",
                                     "recover", "orphans", "UnsafeBundle"}  # fmt: skip
    assert SCHEMA == "rlmesh.result.v1"
    assert rlmesh.Recorder is Recorder and "Recorder" in rlmesh.__all__


# -- REC-1 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fps", [0, -1, 1.5, "30", True])
def test_REC1_fps_must_be_an_int_at_least_1(fps: object) -> None:
    with pytest.raises(ValueError, match="fps"):
        Recorder(fps=fps)  # type: ignore[arg-type]


@pytest.mark.parametrize("quality", [0, 101, 50.0, "60", None, False])
def test_REC1_quality_must_be_an_int_in_1_to_100(quality: object) -> None:
    with pytest.raises(ValueError, match="quality"):
        Recorder(quality=quality)  # type: ignore[arg-type]


def test_REC1_bounds_are_inclusive_and_result_set_id_defaults_to_a_uuid4_hex() -> None:
    a, b = Recorder(fps=1, quality=1), Recorder(fps=240, quality=100)
    assert re.fullmatch(r"[0-9a-f]{32}", a.result_set_id) and a.result_set_id != b.result_set_id
    assert Recorder(result_set_id="run-7").result_set_id == "run-7"
    assert a.workloads == ()


def test_REC1_codec_and_queue_are_validated() -> None:
    with pytest.raises(ValueError, match="codec"):
        Recorder(codec="gif")
    with pytest.raises(ValueError, match="queue_frames"):
        Recorder(queue_frames=0)


def test_REC1_context_manager_closes_and_close_is_idempotent() -> None:
    with Recorder() as rec:
        rec.add(RunResult((ep(0),)), model="m", env="e")
    rec.close()
    with pytest.raises(RuntimeError, match="closed"):
        rec.add(RunResult(()), model="m", env="e")


# -- REC-2 / REC-8 -------------------------------------------------------------------------


def test_REC2_add_makes_a_workload_renumbered_from_zero_task_defaults_to_env_config_copied() -> (
    None
):
    rec = Recorder()
    config = {"horizon": 8}
    w = rec.add(RunResult((ep(5, seed=7), ep(9, seed=8))), model="pi", env="Cart-v1", config=config)
    config["horizon"] = 99
    assert isinstance(w, WorkloadRecord) and rec.workloads == (w,)
    assert [e.index for e in w.episodes] == [0, 1]
    assert [e.seed for e in w.episodes] == [7, 8]
    assert w.task == "Cart-v1" and w.config == {"horizon": 8}
    assert all(e.media == () for e in w.episodes)


def test_REC8_document_shape_and_field_names() -> None:
    rec = Recorder(result_set_id="abc")
    rec.add(
        RunResult((ep(0, seed=3, reward=2.0, steps=4),)),
        model="m",
        env="e",
        task="t",
        config={"k": [1]},
    )
    doc = rec.to_dict(recorded_at="2026-01-02T03:04:05+00:00")
    assert doc == {
        "schema": "rlmesh.result.v1",
        "resultSetId": "abc",
        "recordedAt": "2026-01-02T03:04:05+00:00",
        "workloads": [
            {
                "model": "m",
                "env": "e",
                "task": "t",
                "config": {"k": [1]},
                "numEpisodes": 1,
                "metrics": {"meanReward": 2.0, "successRate": 1.0, "totalSteps": 4},
                "episodes": [
                    {
                        "index": 0,
                        "seed": 3,
                        "steps": 4,
                        "reward": 2.0,
                        "terminated": True,
                        "truncated": False,
                        "success": True,
                        "durationS": 0.25,
                        "includedInMetrics": True,
                    }
                ],
            }
        ],
    }


def test_REC8_recorded_at_defaults_to_now_in_utc_iso8601() -> None:
    stamp = Recorder().to_dict()["recordedAt"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00", stamp)


def test_REC8_metrics_count_included_episodes_and_success_rate_may_be_null() -> None:
    rec = Recorder()
    w = rec.add(
        RunResult((ep(0, reward=1.0), ep(1, success=False, reward=3.0))), model="m", env="e"
    )
    assert (w.mean_reward, w.success_rate, w.total_steps) == (2.0, 0.5, 6)
    w2 = rec.add(RunResult((ep(0, success=None), ep(1))), model="m", env="e")
    assert w2.success_rate is None  # DELTA-44/52: an episode without an outcome -> null
    excluded = rec.add(
        RunResult((ep(0, reward=5.0),)), model="m", env="e", included_in_metrics=False
    )
    assert (excluded.mean_reward, excluded.success_rate, excluded.total_steps) == (0.0, None, 3)
    empty = rec.add(RunResult(()), model="m", env="e")
    assert (empty.mean_reward, empty.success_rate, empty.total_steps) == (0.0, None, 0)
    metrics = [w["metrics"] for w in rec.to_dict()["workloads"]]
    assert [m["successRate"] for m in metrics] == [0.5, None, None, None]
    assert json.loads(json.dumps(rec.to_dict()))["workloads"][1]["metrics"]["successRate"] is None


def test_REC8_mixed_inclusion_within_a_workload() -> None:
    w = WorkloadRecord("m", "e", "e")
    w.episodes += [
        EpisodeRecord.from_result(ep(0, reward=4.0)),
        EpisodeRecord.from_result(ep(1, success=False, reward=100.0), included_in_metrics=False),
    ]
    assert (w.mean_reward, w.success_rate, w.total_steps, w.num_episodes) == (4.0, 1.0, 6, 2)


def test_documents_round_trip_through_from_dict() -> None:
    media = (
        MediaRef(
            "render", "video", "media/w000-m/e/ep00000/render.mp4", "mp4", 5, 64, 48, 30.0, "av1"
        ),
    )
    record = EpisodeRecord(
        0, 1, 5, 2.5, True, False, None, 0.5, True, media, "media/w000-m/e/ep00000/steps.jsonl"
    )
    rs = ResultSet("id", [WorkloadRecord("m", "e", "t", {"a": 1}, [record])])
    doc = rs.to_dict(recorded_at="now")
    assert doc["workloads"][0]["episodes"][0]["media"][0] == {
        "camera": "render",
        "kind": "video",
        "path": "media/w000-m/e/ep00000/render.mp4",
        "format": "mp4",
        "frameCount": 5,
        "width": 64,
        "height": 48,
        "fps": 30.0,
        "codec": "av1",
    }
    assert ResultSet.from_dict(doc).to_dict(recorded_at="now") == doc
    with pytest.raises(ValueError, match=r"rlmesh\.result\.v1"):
        ResultSet.from_dict({"schema": "other"})


def test_REC7_sanitize_names() -> None:
    assert sanitize_name("my model/x") == "my_model_x"
    assert sanitize_name("Env:v1") == "Env_v1"
    assert sanitize_name("__a b__") == "a_b"
    assert sanitize_name("...") == "unnamed"
    assert sanitize_name("ok-1.2_x") == "ok-1.2_x"


# -- REC-9 ---------------------------------------------------------------------------------


def _rec() -> Recorder:
    rec = Recorder(result_set_id="r")
    rec.add(RunResult((ep(0),)), model="m", env="e")
    return rec


def test_REC9_export_folder_writes_result_json_indented_and_index_html(tmp_path: Path) -> None:
    out = _rec().export(tmp_path / "bundle", recorded_at="T")
    assert out == tmp_path / "bundle"
    text = (out / "result.json").read_text()
    assert text.startswith('{\n  "schema": "rlmesh.result.v1"')
    assert json.loads(text)["recordedAt"] == "T"
    assert (out / "index.html").is_file()


@pytest.mark.parametrize(
    ("name", "archive", "is_zip"),
    [
        ("b.zip", None, True),
        ("b", None, False),
        ("b", True, True),
        ("b", "zip", True),
        ("b.zip", False, False),
        ("b", "folder", False),
        ("b", "dir", False),
    ],
)
def test_REC9_archive_modes(tmp_path: Path, name: str, archive: object, is_zip: bool) -> None:
    out = _rec().export(tmp_path / name, archive=archive)  # type: ignore[arg-type]
    assert zipfile.is_zipfile(out) is is_zip and out.is_dir() is not is_zip


def test_REC9_unknown_archive_string_is_a_ValueError(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="archive"):
        _rec().export(tmp_path / "b", archive="tar")


def test_REC9_zip_holds_result_json_deflated(tmp_path: Path) -> None:
    with zipfile.ZipFile(_rec().export(tmp_path / "b.zip")) as zf:
        info = zf.getinfo("result.json")
        assert info.compress_type == zipfile.ZIP_DEFLATED
        assert json.loads(zf.read("result.json"))["schema"] == SCHEMA


def test_REC9_folder_export_refuses_a_file_and_a_foreign_media_dir(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(FileExistsError, match="not a directory"):
        _rec().export(tmp_path / "afile", archive=False)
    (tmp_path / "foreign" / "media").mkdir(parents=True)
    (tmp_path / "foreign" / "media" / "precious.mp4").write_bytes(b"keep")
    with pytest.raises(FileExistsError, match="not an rlmesh bundle"):
        _rec().export(tmp_path / "foreign")
    assert (tmp_path / "foreign" / "media" / "precious.mp4").read_bytes() == b"keep"


def test_REC9_folder_export_never_deletes_a_media_file_the_old_bundle_does_not_name(
    tmp_path: Path,
) -> None:
    target = _rec().export(tmp_path / "b")
    stray = target / "media" / "w000-old" / "e" / "ep00000" / "render.mp4"
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"mine")
    with pytest.raises(FileExistsError, match="does not name"):
        _rec().export(target)
    assert stray.read_bytes() == b"mine"
    stray.unlink()
    _rec().export(target)  # only the bundle's own files left: replaced
    assert json.loads((target / "result.json").read_text())["resultSetId"] == "r"


def test_REC9_export_after_close_without_media_is_fine(tmp_path: Path) -> None:
    rec = _rec()
    rec.close()
    assert (
        json.loads((rec.export(tmp_path / "b") / "result.json").read_text())["workloads"][0][
            "numEpisodes"
        ]
        == 1
    )


def test_ResultSet_load_reads_folder_and_zip_bundles(tmp_path: Path) -> None:
    rec = _rec()
    for path in (rec.export(tmp_path / "f"), rec.export(tmp_path / "z.zip")):
        loaded = ResultSet.load(path)
        assert loaded.result_set_id == "r" and loaded.workloads[0].episodes[0].success is True


# -- record= -------------------------------------------------------------------------------


def test_record_policy_parsing() -> None:
    assert parse_record("all").kind == "all"
    assert parse_record(" Failures ").kind == "failures"
    assert parse_record("first:2").first == 2
    assert parse_record(lambda r: r.reward > 1).kind == "callable"
    for bad in ("some", "first:0", "first:x", ""):
        with pytest.raises(ValueError, match="record="):
            parse_record(bad)
    with pytest.raises(TypeError, match="record"):
        parse_record(3)


def test_record_policy_decisions() -> None:
    win, loss, unknown_term = (
        ep(0),
        ep(1, success=False),
        EpisodeResult(2, None, 3, 0.0, True, False),
    )
    assert [parse_record("failures").keeps(r) for r in (win, loss, unknown_term)] == [
        False,
        True,
        False,
    ]
    assert [parse_record("successes").keeps(r) for r in (win, loss, unknown_term)] == [
        True,
        False,
        True,
    ]
    first = parse_record("first:2")
    assert [first.wants_frames(i) for i in range(4)] == [True, True, False, False]


def test_capture_validates_its_arguments() -> None:
    rec = Recorder()
    with pytest.raises(ValueError, match="record="):
        rec.capture(model="m", env="e", record="most")
    with pytest.raises(TypeError, match="cameras"):
        rec.capture(model="m", env="e", cameras="render")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model"):
        rec.capture(model=None, env="e")  # type: ignore[arg-type]
    assert rec.workloads == ()


def test_a_bundle_shaped_like_the_references_loads_and_merges(tmp_path: Path) -> None:
    """REC-8: the reference's own document (keys as it writes them, no rlmesh additions) reads back."""
    from rlmesh.recorder import merge

    theirs = tmp_path / "theirs"
    video = theirs / "media" / "w000-my_model_x" / "Env_v1" / "ep00000" / "render.mp4"
    video.parent.mkdir(parents=True)
    video.write_bytes(b"\x00\x00\x00\x18ftypisom")
    (theirs / "result.json").write_text(
        json.dumps(
            {
                "schema": "rlmesh.result.v1",
                "resultSetId": "f11c",
                "recordedAt": "2026-12-02T19:02:54.634450+00:00",
                "workloads": [
                    {
                        "model": "my model/x",
                        "env": "Env:v1",
                        "task": "Env:v1",
                        "config": {"a": 1},
                        "numEpisodes": 1,
                        "metrics": {"meanReward": 5.0, "successRate": None, "totalSteps": 5},
                        "episodes": [
                            {
                                "index": 0,
                                "seed": 3,
                                "steps": 5,
                                "reward": 5.0,
                                "terminated": True,
                                "truncated": False,
                                "success": None,
                                "durationS": 0.008,
                                "includedInMetrics": True,
                                "media": [
                                    {
                                        "camera": "render",
                                        "kind": "video",
                                        "path": "media/w000-my_model_x/Env_v1/ep00000/render.mp4",
                                        "format": "mp4",
                                        "frameCount": 5,
                                        "width": 80,
                                        "height": 62,
                                        "fps": 10.0,
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        )
    )
    loaded = ResultSet.load(theirs)
    assert (
        loaded.to_dict(recorded_at="T")["workloads"]
        == json.loads((theirs / "result.json").read_text())["workloads"]
    )
    out = merge([theirs, _rec().export(tmp_path / "ours.zip")], tmp_path / "merged")
    doc = json.loads((out / "result.json").read_text())
    assert [w["model"] for w in doc["workloads"]] == ["my model/x", "m"]
    row = doc["workloads"][0]["episodes"][0]["media"][0]
    assert row == {
        "camera": "render",
        "kind": "video",
        "path": "media/w000-my_model_x/Env_v1/ep00000/render.mp4",
        "format": "mp4",
        "frameCount": 5,
        "width": 80,
        "height": 62,
        "fps": 10.0,
    }
    assert (out / row["path"]).read_bytes() == video.read_bytes()
