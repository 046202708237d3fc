"""Recording a run: cameras, videos decoded back, media layout, warnings (REC-3..7, REC-9, DELTA-52).

Every video is decoded with PyAV and checked against the frames the env produced: frame
count, size and a PSNR bound. Video frame ``i`` shows the env after ``i`` steps,
``frame(i)``: a ``render()`` camera has the reset frame plus one frame per step (taken
after it), a role camera one frame per step (the observation the action was predicted
from), issue 29.
"""

from __future__ import annotations

import json
import os
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from recorder_envs import CamEnv, frame, psnr, tagged

import rlmesh
from conftest import require
from rlmesh.recorder import Recorder, ResultSet, merge

pytestmark = pytest.mark.slow  # video encoding: kept out of make test-fast

#: A lossy AV1/H.264 encode of these smooth frames at the default quality stays above this.
PSNR_FLOOR_DB = 30.0


@pytest.fixture(autouse=True)
def _av() -> Any:
    return require("av", "video recording")


def decode(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as container:
        assert len(container.streams.video) == 1
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def run(rec: Recorder, env: Any, *, seeds: Any = (0,), **capture: Any) -> Any:
    hooks = rec.capture(
        model=capture.pop("model", "pi"), env=capture.pop("env", "Cam-v0"), **capture
    )
    return rlmesh.run(rlmesh.RANDOM_SAMPLE, env, seeds=list(seeds), hooks=hooks)


def media(rec: Recorder, w: int = 0) -> list[list[dict[str, Any]]]:
    return [e.get("media", []) for e in rec.to_dict()["workloads"][w]["episodes"]]


def test_REC3_discovers_render_first_then_image_roles_and_decodes_back(tmp_path: Path) -> None:
    env = tagged(
        CamEnv(6, images=("front", "wrist")), {"front": "image/primary", "wrist": "image/wrist"}
    )
    with Recorder(fps=12) as rec:
        run(rec, env, seeds=[1, 2])
        out = rec.export(tmp_path / "b")
        rows = media(rec)
    assert [[m["camera"] for m in ep] for ep in rows] == [
        ["render", "image/primary", "image/wrist"]
    ] * 2
    assert [m["path"] for m in rows[1]] == [
        "media/w000-pi/Cam-v0/ep00001/render.mp4",
        "media/w000-pi/Cam-v0/ep00001/image_primary.mp4",
        "media/w000-pi/Cam-v0/ep00001/image_wrist.mp4",
    ]
    for ep in rows:
        for m in ep:
            count = 7 if m["camera"] == "render" else 6  # render(): the reset frame too
            assert (m["kind"], m["format"], m["frameCount"], m["width"], m["height"], m["fps"]) == (
                "video",
                "mp4",
                count,
                64,
                48,
                12.0,
            )
            path = out / m["path"]
            assert path.read_bytes()[4:8] == b"ftyp"
            frames = decode(path)
            assert len(frames) == count and frames[0].shape == (48, 64, 3)
            salt = {"render": 0, "image/primary": 1, "image/wrist": 2}[m["camera"]]
            worst = min(psnr(f, frame(i, salt=salt)) for i, f in enumerate(frames))
            assert worst > PSNR_FLOOR_DB, (m["camera"], worst)


@pytest.mark.parametrize("codec", ["av1", "h264"])
def test_REC6_codecs_decode_within_the_psnr_bound(tmp_path: Path, codec: str) -> None:
    with Recorder(codec=codec) as rec:
        run(rec, CamEnv(8))
        out = rec.export(tmp_path / "b")
        (row,) = media(rec)[0]
    assert row["codec"] == codec
    frames = decode(out / row["path"])
    assert len(frames) == 9  # the reset frame and one per step
    assert min(psnr(f, frame(i)) for i, f in enumerate(frames)) > PSNR_FLOOR_DB


def test_lossless_codec_is_pixel_exact(tmp_path: Path) -> None:
    with Recorder(codec="lossless") as rec:
        run(rec, CamEnv(5))
        (row,) = media(rec)[0]
        frames = decode(rec.export(tmp_path / "b") / row["path"])
    assert [np.array_equal(f, frame(i)) for i, f in enumerate(frames)] == [True] * 6


def test_REC6_odd_sizes_are_cropped_to_even(tmp_path: Path) -> None:
    with Recorder() as rec:
        run(rec, CamEnv(3, size=(33, 47)))
        (row,) = media(rec)[0]
        frames = decode(rec.export(tmp_path / "b") / row["path"])
    assert (row["width"], row["height"]) == (46, 32)
    assert frames[0].shape == (32, 46, 3)


def test_REC6_higher_quality_gives_a_larger_file(tmp_path: Path) -> None:
    sizes = []
    for quality in (10, 90):
        with Recorder(quality=quality) as rec:
            run(rec, CamEnv(20, size=(96, 128)))
            (row,) = media(rec)[0]
            sizes.append((rec.export(tmp_path / f"q{quality}") / row["path"]).stat().st_size)
    assert sizes[1] > sizes[0] * 1.5, sizes


def test_REC7_colliding_camera_names_get_numbered_suffixes(tmp_path: Path) -> None:
    env = tagged(CamEnv(3, images=("a", "b")), {"a": "image/primary", "b": "image_primary"})
    with Recorder() as rec:
        run(rec, env)
        (rows,) = media(rec)
        out = rec.export(tmp_path / "b")
    assert [(m["camera"], m["path"].rsplit("/", 1)[1]) for m in rows] == [
        ("render", "render.mp4"),
        ("image/primary", "image_primary.mp4"),
        ("image_primary", "image_primary-2.mp4"),
    ]
    assert all((out / m["path"]).is_file() for m in rows)


def test_REC3_explicit_render_prefers_a_declared_role_named_render() -> None:
    env = tagged(CamEnv(3, images=("r",)), {"r": "render"})
    with Recorder() as rec:
        run(rec, env, cameras=["render"])
        (rows,) = media(rec)
        frames = decode(
            Path(rec._staging or "") / rows[0]["path"]
        )  # the role frame(i, salt=1), not render()
    assert [m["camera"] for m in rows] == ["render"]
    assert min(psnr(f, frame(i, salt=1)) for i, f in enumerate(frames)) > PSNR_FLOOR_DB
    assert env.renders == 0


def test_REC3_explicit_cameras_pick_sources_and_unknown_ones_warn() -> None:
    env = tagged(CamEnv(3, images=("front",)), {"front": "image/primary"})
    with Recorder() as rec, pytest.warns(UserWarning, match="nope") as caught:
        run(rec, env, cameras=["image/primary", "nope"])
        assert [[m["camera"] for m in ep] for ep in media(rec)] == [["image/primary"]]
    assert env.renders == 0
    assert any("cannot be read" in str(w.message) for w in caught)


def test_REC3_explicit_empty_cameras_record_metrics_only_without_discovery() -> None:
    env = CamEnv(4)
    with Recorder() as rec, warnings.catch_warnings():
        warnings.simplefilter("error")
        run(rec, env, cameras=[], seeds=[1, 2])
        doc = rec.to_dict()
    assert env.renders == 0
    assert [("media" in e) for e in doc["workloads"][0]["episodes"]] == [False, False]
    assert doc["workloads"][0]["metrics"] == {
        "meanReward": 5.0,
        "successRate": 1.0,
        "totalSteps": 8,
    }


def test_REC3_an_env_without_cameras_warns_and_records_metrics_only() -> None:
    with (
        Recorder() as rec,
        pytest.warns(UserWarning, match="no render\\(\\) or image roles discovered"),
    ):
        run(rec, CamEnv(3, render=False), seeds=[0, 1])
        doc = rec.to_dict()
        assert rec._staging is not None and not list(rec._staging.rglob("*.mp4"))
    assert doc["workloads"][0]["numEpisodes"] == 2
    assert all("media" not in e and "stepLog" in e for e in doc["workloads"][0]["episodes"])


def test_REC4_a_transient_read_failure_skips_one_frame_and_keeps_the_camera(tmp_path: Path) -> None:
    env = CamEnv(5, render_fails_at=(2,))
    with Recorder() as rec:
        run(rec, env, seeds=[0, 1])
        rows = media(rec)
        out = rec.export(tmp_path / "b")
    assert [[m["frameCount"] for m in ep] for ep in rows] == [[5], [5]]
    frames = decode(out / rows[1][0]["path"])
    expected = [frame(t) for t in (0, 1, 3, 4, 5)]  # step 2's frame is missing, the rest line up
    assert min(psnr(f, e) for f, e in zip(frames, expected)) > PSNR_FLOOR_DB


def test_REC4_a_resolution_change_drops_the_camera_with_one_warning() -> None:
    env = CamEnv(6, resize_at=3)
    with Recorder() as rec, pytest.warns(UserWarning, match="changed resolution") as caught:
        result = run(rec, env, seeds=[0, 1])
        rows = media(rec)
    assert result.num_episodes == 2  # the eval went on
    assert rows == [[], []]
    assert sum("disabled" in str(w.message) for w in caught) == 1


def test_REC4_warnings_never_raise_even_under_W_error() -> None:
    with Recorder() as rec, warnings.catch_warnings():
        warnings.simplefilter("error")
        result = run(rec, CamEnv(3, render=False, resize_at=1), seeds=[0])
        result2 = run(rec, CamEnv(3, resize_at=2), seeds=[0])
    assert result.num_episodes == result2.num_episodes == 1


#: The start of a WebM file: an EBML header with DocType "webm" (what the content check reads).
WEBM = bytes.fromhex("1a45dfa39f4286810142f7810142f2810442f381084282847765626d42878104428581021853")


def _video_info(path: str) -> Any:
    return lambda t: {"video_artifact_path": path} if t >= 2 else {}


def test_REC5_env_video_paths_under_the_run_directory_are_copied_at_episode_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("vids").mkdir()
    Path("vids/ep.webm").write_bytes(WEBM + b"first episode video")
    with Recorder() as rec:
        run(rec, CamEnv(3, render=False, info=_video_info("vids/ep.webm")), cameras=[])
        Path("vids/ep.webm").write_bytes(b"overwritten later")  # must not clobber the copy
        (rows,) = media(rec)
        out = rec.export(tmp_path / "out")
    assert rows == [
        {
            "camera": "video_artifact_path",
            "kind": "video",
            "path": "media/w000-pi/Cam-v0/ep00000/video_artifact_path.webm",
            "format": "webm",
        }
    ]
    assert (out / rows[0]["path"]).read_bytes() == WEBM + b"first episode video"


@pytest.mark.parametrize("where", ["outside", "escape", "symlink", "directory", "missing", "url"])
def test_DELTA52_unreadable_env_video_paths_warn_and_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    monkeypatch.chdir(run_dir)
    outside = tmp_path / "secret.mp4"
    outside.write_bytes(WEBM)
    path = {
        "outside": str(outside),
        "escape": "../secret.mp4",
        "symlink": "link.mp4",
        "directory": ".",
        "missing": "nope.mp4",
        "url": "https://example.invalid/v.mp4",
    }[where]
    if where == "symlink":
        os.symlink(outside, run_dir / "link.mp4")
    with Recorder() as rec, pytest.warns(UserWarning, match="is not copied: it is not"):
        run(rec, CamEnv(3, render=False, info=_video_info(path)), cameras=[])
        assert media(rec) == [[]]


def test_REC7_media_paths_are_unique_across_workloads_runs_and_episodes(tmp_path: Path) -> None:
    with Recorder() as rec:
        hooks = rec.capture(model="pi", env="Cam-v0")
        rlmesh.run(rlmesh.RANDOM_SAMPLE, CamEnv(2), seeds=[0, 1], hooks=hooks)
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE, CamEnv(2), seeds=[2], hooks=hooks
        )  # same workload, second run
        run(rec, CamEnv(2), seeds=[0, 1])  # same names, new workload
        doc = rec.to_dict()
        out = rec.export(tmp_path / "b.zip")
    assert [e["index"] for e in doc["workloads"][0]["episodes"]] == [0, 1, 2]
    paths = [m["path"] for w in doc["workloads"] for e in w["episodes"] for m in e["media"]]
    assert len(paths) == 5 == len(set(paths))
    assert paths[3].startswith("media/w001-pi/Cam-v0/ep00000/")
    with zipfile.ZipFile(out) as zf:
        for p in paths:
            assert (
                zf.getinfo(p).compress_type == zipfile.ZIP_STORED
            )  # REC-9: media stored uncompressed


def test_REC9_export_after_close_with_staged_media_is_a_RuntimeError(tmp_path: Path) -> None:
    rec = Recorder()
    run(rec, CamEnv(2))
    staging = rec._staging
    rec.close()
    assert staging is not None and not staging.exists()  # REC-7: close removes the staging dir
    with pytest.raises(RuntimeError, match="export before close"):
        rec.export(tmp_path / "b")


def test_record_failures_keeps_media_only_for_failed_episodes() -> None:
    env = CamEnv(3, success=lambda episode: episode != 1)  # episode 1 fails
    with Recorder() as rec:
        run(rec, env, seeds=[0, 1, 2], record="failures")
        rows = media(rec)
        staged = sorted(p.name for p in (rec._staging or Path()).rglob("*.mp4"))
    assert [len(r) for r in rows] == [0, 1, 0]
    assert staged == ["render.mp4"]  # the other episodes' files were deleted


def test_record_first_N_does_not_even_render_later_episodes() -> None:
    env = CamEnv(3)
    with Recorder() as rec:
        run(rec, env, seeds=[0, 1, 2], record="first:1")
        assert [len(r) for r in media(rec)] == [1, 0, 0]
    assert env.renders == 4  # the reset frame and 3 steps of episode 0 only


def test_record_callable_decides_at_episode_end() -> None:
    with Recorder() as rec:
        run(rec, CamEnv(3), seeds=[0, 1, 2], record=lambda r: r.seed == 2)
        assert [len(r) for r in media(rec)] == [0, 0, 1]


def test_steps_jsonl_lines_up_with_the_video_timeline(tmp_path: Path) -> None:
    env = CamEnv(4, info=lambda t: {"dist": np.float32(t / 10), "pose": object(), "deep": {"x": 1}})
    with Recorder(fps=20) as rec:
        result = run(rec, env)
        out = rec.export(tmp_path / "b")
        episode = rec.to_dict()["workloads"][0]["episodes"][0]
    lines = [json.loads(x) for x in (out / episode["stepLog"]).read_text().splitlines()]
    assert episode["stepLog"] == "media/w000-pi/Cam-v0/ep00000/steps.jsonl"
    assert [(r["step"], r["t"], r["reward"]) for r in lines] == [
        (i, i / 20, 0.5 * (i + 1)) for i in range(4)
    ]
    assert sum(r["reward"] for r in lines) == result.episodes[0].reward
    assert lines[0]["info"]["dist"] == pytest.approx(0.1) and isinstance(
        lines[0]["info"]["pose"], str
    )
    assert "deep" not in lines[0]["info"]  # scalars only
    assert lines[-1]["info"]["is_success"] is True and lines[-1]["terminated"] is True
    assert (
        isinstance(lines[0]["action"], list) and lines[0]["modelMs"] >= 0 and lines[0]["envMs"] >= 0
    )


def test_drop_frames_ok_never_waits_for_a_stalled_encoder(tmp_path: Path) -> None:
    import signal

    from rlmesh.recorder._encode import EncoderProcess, VideoWriter, encoder_spec

    proc = EncoderProcess()
    try:
        writer = VideoWriter(
            tmp_path / "v.mp4",
            encoder_spec("h264", 60),
            fps=10,
            encoder=proc,
            queue_frames=2,
            drop_frames_ok=True,
        )
        os.kill(proc.proc.pid, signal.SIGSTOP)  # the encoder stalls: every slot stays in flight
        try:
            accepted = [writer.push(frame(t), t) for t in range(6)]  # would hang if push waited
        finally:
            os.kill(proc.proc.pid, signal.SIGCONT)
        assert writer.finish()
    finally:
        proc.stop()
    assert accepted == [True, True, False, False, False, False]
    assert (writer.pushed, writer.dropped, writer.encoded) == (2, 4, 2)
    assert len(decode(tmp_path / "v.mp4")) == 2


def test_a_dead_encoder_process_fails_the_camera_not_the_run_and_the_next_run_gets_a_new_one(
    tmp_path: Path,
) -> None:
    rec = Recorder(queue_frames=1)

    def kill_encoder(t: int) -> dict[str, Any]:
        if t == 3 and rec._proc is not None and rec._proc.proc.poll() is None:
            rec._proc.proc.kill()
            rec._proc.proc.wait()
        return {}

    with rec, pytest.warns(UserWarning, match="disabled for the rest of the run"):
        hooks = rec.capture(model="pi", env="Cam-v0")
        result = rlmesh.run(
            rlmesh.RANDOM_SAMPLE, CamEnv(20, info=kill_encoder), seeds=[0, 1], hooks=hooks
        )
        assert result.num_episodes == 2  # the eval went on without the camera
        assert [len(r) for r in media(rec)] == [0, 0]
        rlmesh.run(rlmesh.RANDOM_SAMPLE, CamEnv(4), seeds=[2], hooks=hooks)
        (row,) = media(rec)[2]
        assert len(decode(rec.export(tmp_path / "b") / row["path"])) == 5


def test_by_default_no_frame_is_dropped_even_when_the_encoder_is_slower(tmp_path: Path) -> None:
    with Recorder(queue_frames=1) as rec:
        run(rec, CamEnv(60, size=(96, 128)))
        (row,) = media(rec)[0]
        frames = decode(rec.export(tmp_path / "b") / row["path"])
    assert row["frameCount"] == len(frames) == 61


def test_vector_env_with_cameras_is_refused_and_metrics_only_works() -> None:
    gym = require("gymnasium")

    class G(gym.Env):  # type: ignore[misc]
        metadata = {"render_modes": ["rgb_array"]}

        def __init__(self) -> None:
            self.inner = CamEnv(3)
            self.observation_space = gym.spaces.Box(-1, 1, (1,), np.float32)
            self.action_space = self.inner.action_space
            self.render_mode = "rgb_array"

        def reset(self, *, seed: Any = None, options: Any = None) -> Any:
            self.inner.reset()
            return np.zeros(1, np.float32), {}

        def step(self, action: Any) -> Any:
            _, r, te, tr, info = self.inner.step(action)
            return np.zeros(1, np.float32), r, te, tr, info

        def render(self) -> Any:
            return self.inner.render()

    vec = gym.vector.SyncVectorEnv([G, G])
    with Recorder() as rec:
        with pytest.raises(ValueError, match="Pass cameras=\\[\\] to record metrics only"):
            rlmesh.run(
                rlmesh.RANDOM_SAMPLE,
                vec,
                max_episodes=2,
                hooks=rec.capture(model="m", env="e", cameras=["render"]),
            )
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE,
            vec,
            max_episodes=2,
            hooks=rec.capture(model="m", env="e", cameras=[]),
        )
        w = rec.workloads[1]
    assert [e.index for e in w.episodes] == [0, 1] and w.total_steps == 6


def test_merge_joins_worker_bundles_into_one_workload(tmp_path: Path) -> None:
    bundles = []
    for worker, seeds in enumerate(([0, 1], [2])):
        with Recorder(result_set_id=f"w{worker}") as rec:
            run(rec, CamEnv(3, success=worker == 0), seeds=seeds, config={"ckpt": 5})
            rec.add(rlmesh.RunResult(()), model="other", env="e")
            bundles.append(rec.export(tmp_path / (f"w{worker}.zip" if worker else f"w{worker}")))
    out = merge(bundles, tmp_path / "all", result_set_id="merged", recorded_at="T")
    doc = json.loads((out / "result.json").read_text())
    assert doc["resultSetId"] == "merged" and [w["model"] for w in doc["workloads"]] == [
        "pi",
        "other",
    ]
    w = doc["workloads"][0]
    assert [e["index"] for e in w["episodes"]] == [0, 1, 2] and [
        e["seed"] for e in w["episodes"]
    ] == [0, 1, 2]
    assert w["metrics"] == {"meanReward": 3.0, "successRate": pytest.approx(2 / 3), "totalSteps": 9}
    for e in w["episodes"]:
        (m,) = e["media"]
        assert m["path"] == f"media/w000-pi/Cam-v0/ep{e['index']:05d}/render.mp4"
        assert len(decode(out / m["path"])) == 4
        assert (out / e["stepLog"]).is_file()
    assert ResultSet.load(out).workloads[0].num_episodes == 3
    separate = merge(bundles, tmp_path / "sep.zip", combine=False)
    assert [w.model for w in ResultSet.load(separate).workloads] == ["pi", "other", "pi", "other"]


def test_index_html_lists_episodes_and_videos_without_network_resources(tmp_path: Path) -> None:
    with Recorder() as rec:
        run(rec, CamEnv(3, images=()), seeds=[4, 5], model="pi <b>")
        out = rec.export(tmp_path / "b")
        doc = rec.to_dict()
    page = (out / "index.html").read_text()
    assert "pi &lt;b&gt;" in page and "<b>" not in page.split("<body>")[1].split("<table>")[0]
    for e in doc["workloads"][0]["episodes"]:
        assert f'src="{e["media"][0]["path"]}"' in page
        assert (out / e["media"][0]["path"]).is_file()
    assert 'id="plot-w0e0"' in page and '"w0e1":[[0,0.5],[1,1.5],[2,3.0]]' in page
    for needle in ('src="http', "src='http", 'href="http', "<link", "@import", "url("):
        assert needle not in page


def test_an_aborted_episode_leaves_no_record_no_file_and_no_index_hole(tmp_path: Path) -> None:
    crash = {"at": (1, 2)}  # (episode, step) at which the env raises

    def info(t: int) -> dict[str, Any]:
        if (env.episode, t) == crash["at"]:
            raise RuntimeError("simulator crashed")
        return {}

    env = CamEnv(3, info=info)
    with Recorder() as rec:
        hooks = rec.capture(model="pi", env="Cam-v0")
        with pytest.raises(RuntimeError, match="simulator crashed"):
            rlmesh.run(rlmesh.RANDOM_SAMPLE, env, seeds=[0, 1], hooks=hooks)
        rlmesh.run(rlmesh.RANDOM_SAMPLE, env, seeds=[2], hooks=hooks)
        doc = rec.to_dict()
        staging = rec._staging or Path()
        staged = sorted(str(p.relative_to(staging)) for p in staging.rglob("*.mp4"))
        assert [len(decode(staging / p)) for p in staged] == [
            4,
            4,
        ]  # the crashed episode's file is gone
    assert [(e["index"], e["seed"]) for e in doc["workloads"][0]["episodes"]] == [(0, 0), (1, 2)]
    assert (
        [e["media"][0]["path"] for e in doc["workloads"][0]["episodes"]]
        == staged
        == [
            "media/w000-pi/Cam-v0/ep00000/render.mp4",
            "media/w000-pi/Cam-v0/ep00001/render.mp4",
        ]
    )


def test_frame_rings_fall_back_to_the_next_directory_when_one_has_no_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlmesh.recorder._encode as encode

    ok = tmp_path / "rings"
    ok.mkdir()
    monkeypatch.setattr(encode, "_ring_dirs", lambda: [str(tmp_path / "missing"), str(ok)])
    with Recorder() as rec:
        run(rec, CamEnv(4))
        (row,) = media(rec)[0]
        assert len(decode(rec.export(tmp_path / "b") / row["path"])) == 5
    assert list(ok.iterdir()) == []  # ring files are unlinked once mapped
    monkeypatch.setattr(encode, "_ring_dirs", lambda: [str(tmp_path / "missing")])
    with Recorder() as rec, pytest.warns(UserWarning, match="no room for a"):
        assert run(rec, CamEnv(4)).num_episodes == 1
        assert media(rec) == [[]]
