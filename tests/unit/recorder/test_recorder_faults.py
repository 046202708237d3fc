"""The recorder under faults and hostile input (issue 28 items 1, 3, 4, 6, 7; issue 29 item 10).

- A run that raises (a crashed env, a dead server, Ctrl-C) inside ``with Recorder()``
  loses no finished episode: the staging dir stays as a partial bundle and ``export``
  still works after the exception.
- A re-export that fails half-way (a full disk) leaves the previous bundle byte for byte;
  only an ``rlmesh.result.v1`` bundle is replaced and no user file is deleted.
- ``result.json`` is RFC 8259 JSON whatever the rewards.
- ``merge`` / ``ResultSet.load`` follow no symlink out of a bundle and refuse zip bombs
  before inflating.
- An env cannot make the recorder copy an arbitrary file into a bundle.
- Cameras: explicit names read through ``StepEvent.read``; the reset frame is recorded;
  the video fps follows the env's ``render_fps``; runtime info keys stay out of steps.jsonl.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from recorder_envs import CamEnv, frame

import rlmesh
import rlmesh.recorder as recorder
from conftest import require
from rlmesh import EpisodeResult, RunResult
from rlmesh.errors import ConnectionLost
from rlmesh.eval._hooks import StepEvent
from rlmesh.recorder import Recorder, ResultSet, merge

pytestmark = pytest.mark.slow  # video encoding: kept out of make test-fast


def _av() -> None:
    require("av", "video recording")


def decode(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (hidden ones included) and its bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _no_constants(name: str) -> Any:
    raise AssertionError(f"result.json holds {name}: not RFC 8259 JSON")


class _Crash(CamEnv):
    """Episodes 0 and 1 finish; episode 2 raises ``error`` at its second step."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(3)
        self.error = error

    def step(self, action: Any) -> Any:
        if self.episode == 2 and self.t == 1:
            raise self.error
        return super().step(action)


# -- item 1: a failure never deletes finished episodes --------------------------------------


@pytest.mark.parametrize(
    "error",
    [RuntimeError("simulator crashed"), ConnectionLost("the env server died"), KeyboardInterrupt()],
    ids=["crashed-env", "dead-server", "ctrl-c"],
)
def test_an_exception_from_the_run_keeps_the_finished_episodes_exportable(
    tmp_path: Path, error: BaseException
) -> None:
    _av()
    with (
        pytest.raises(type(error)),
        pytest.warns(UserWarning, match="finished episode"),
        Recorder() as rec,
    ):
        hooks = rec.capture(model="pi", env="Cam-v0")
        rlmesh.run(rlmesh.RANDOM_SAMPLE, _Crash(error), seeds=[0, 1, 2, 3], hooks=hooks)
        rec.export(tmp_path / "never")  # the documented pattern: skipped by the exception
    staging = rec._staging
    assert staging is not None and staging.is_dir()
    # On disk already: a partial bundle that ResultSet.load reads.
    partial = json.loads((staging / "result.json").read_text(), parse_constant=_no_constants)
    assert partial["partial"] is True and [
        e["seed"] for e in partial["workloads"][0]["episodes"]
    ] == [0, 1]
    assert ResultSet.load(staging).workloads[0].num_episodes == 2
    # And still exportable after the exception.
    out = rec.export(tmp_path / "b")
    doc = json.loads((out / "result.json").read_text())
    episodes = doc["workloads"][0]["episodes"]
    assert [e["seed"] for e in episodes] == [0, 1]
    for e in episodes:
        (m,) = e["media"]
        assert len(decode(out / m["path"])) == 4  # the reset frame and 3 steps
        assert (out / e["stepLog"]).is_file()
    assert not staging.exists()  # safe in the bundle: the kept staging dir is gone


def test_a_clean_close_still_deletes_the_staging_dir(tmp_path: Path) -> None:
    _av()
    with Recorder(staging_dir=tmp_path / "stage") as rec:
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE, CamEnv(2), seeds=[0], hooks=rec.capture(model="pi", env="e")
        )
        staging = rec.staging
        assert staging is not None and (staging / "journal.jsonl").is_file()
    assert not staging.exists()


# -- item 2: recovery (the SIGKILL case is tests/integration/test_recorder_crash.py) ---------------


def test_recover_drops_a_video_that_was_cut_short(tmp_path: Path) -> None:
    require("av", "video recording")
    rec = Recorder(staging_dir=tmp_path / "stage")
    rlmesh.run(
        rlmesh.RANDOM_SAMPLE, CamEnv(3), seeds=[0, 1], hooks=rec.capture(model="pi", env="e")
    )
    assert rec.result_set.workloads  # waits for the videos to finish
    staging = rec._staging
    assert staging is not None
    first = staging / rec.to_dict()["workloads"][0]["episodes"][0]["media"][0]["path"]
    first.write_bytes(first.read_bytes()[:100])  # as if killed while the encoder wrote it
    with pytest.warns(UserWarning, match="1 media file"):
        out = recorder.recover(staging, tmp_path / "b.zip", remove=False)
    episodes = ResultSet.load(out).workloads[0].episodes
    assert [len(e.media) for e in episodes] == [0, 1] and all(e.step_log for e in episodes)
    assert staging.exists()  # remove=False
    rec.close()


def test_a_torn_last_journal_line_is_ignored_and_live_staging_is_no_orphan(tmp_path: Path) -> None:
    rec = Recorder(staging_dir=tmp_path / "stage")
    hooks = rec.capture(model="pi", env="e", cameras=[])
    rlmesh.run(rlmesh.RANDOM_SAMPLE, CamEnv(2, render=False), seeds=[0, 1], hooks=hooks)
    staging = rec._staging
    assert staging is not None
    assert recorder.orphans(tmp_path / "stage") == []  # its owner (this process) is alive
    with open(staging / "journal.jsonl", "ab") as fh:
        fh.write(b'{"op": "episode", "workload": 0, "rec')  # killed in the middle of a write
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = recorder.recover(staging, tmp_path / "b")
    assert [str(w.message) for w in caught if "unreadable" in str(w.message)] == []
    assert any("belongs to a running process" in str(w.message) for w in caught)
    assert [e.seed for e in ResultSet.load(out).workloads[0].episodes] == [0, 1]
    assert staging.exists()  # never removed while its owner runs
    rec.close()


def test_a_recorder_dropped_without_close_or_export_keeps_its_episodes(tmp_path: Path) -> None:
    import gc

    rec = Recorder(staging_dir=tmp_path / "stage")
    rlmesh.run(
        rlmesh.RANDOM_SAMPLE,
        CamEnv(2, render=False),
        seeds=[0],
        hooks=rec.capture(model="pi", env="e", cameras=[]),
    )
    staging = rec._staging
    with pytest.warns(UserWarning, match="dropped without export"):
        del rec
        gc.collect()
    assert staging is not None and (staging / "journal.jsonl").is_file()
    with pytest.warns(UserWarning, match="belongs to a running process"):
        out = recorder.recover(
            staging, tmp_path / "b"
        )  # its owner is alive: recovered, not removed
    assert ResultSet.load(out).workloads[0].num_episodes == 1
    shutil.rmtree(staging)


# -- item 3: export never destroys -------------------------------------------------------------


def _recorded(tmp_path: Path, seeds: list[int], length: int = 3) -> Recorder:
    rec = Recorder()
    rlmesh.run(
        rlmesh.RANDOM_SAMPLE, CamEnv(length), seeds=seeds, hooks=rec.capture(model="pi", env="e")
    )
    return rec


@pytest.mark.parametrize("as_zip", [False, True], ids=["folder", "zip"])
def test_a_re_export_failing_on_a_full_disk_leaves_the_previous_bundle_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_zip: bool
) -> None:
    _av()
    target = tmp_path / ("b.zip" if as_zip else "b")
    with _recorded(tmp_path, [0, 1]) as first:
        first.export(target)
    (tmp_path / "notes.txt").write_text("mine")
    if not as_zip:
        (target / "notes.txt").write_text("mine, beside the bundle")
    before = {"b.zip": target.read_bytes()} if as_zip else snapshot(target)

    def disk_full(*_a: Any, **_k: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    with _recorded(tmp_path, [5, 6, 7], length=4) as second:
        assert second.result_set.workloads  # the videos finish before the disk fills
        monkeypatch.setattr(shutil, "copyfileobj", disk_full)
        monkeypatch.setattr(shutil, "copyfile", disk_full)
        with pytest.raises(OSError) as caught:
            second.export(target)
        assert caught.value.errno == errno.ENOSPC
        monkeypatch.undo()
        after = {"b.zip": target.read_bytes()} if as_zip else snapshot(target)
        assert after == before
        assert [
            p.name for p in tmp_path.iterdir() if p.name.startswith(".")
        ] == []  # no temp left behind
        second.export(target)  # with room again: replaced
    assert ResultSet.load(target).workloads[0].num_episodes == 3
    if not as_zip:
        assert (target / "notes.txt").read_text() == "mine, beside the bundle"
        assert [p.name for p in target.iterdir() if p.name.startswith(".")] == []


def test_a_folder_whose_result_json_is_not_rlmesh_v1_is_never_replaced(tmp_path: Path) -> None:
    target = tmp_path / "someone-elses"
    (target / "media").mkdir(parents=True)
    (target / "media" / "clip.mp4").write_bytes(b"their video")
    (target / "result.json").write_text(json.dumps({"schema": "their.tool.v3", "rows": []}))
    before = snapshot(target)
    rec = Recorder()
    rec.add(RunResult((EpisodeResult(0, 1, 3, 1.0, True, False),)), model="m", env="e")
    with pytest.raises(FileExistsError, match=r"not an rlmesh\.result\.v1 document"):
        rec.export(target)
    assert snapshot(target) == before


@pytest.mark.parametrize("theirs", ["index.html", "media"])
def test_a_folder_that_is_not_a_bundle_keeps_its_files(tmp_path: Path, theirs: str) -> None:
    target = tmp_path / "site"
    target.mkdir()
    if theirs == "media":
        (target / "media").mkdir()
        (target / "media" / "photo.jpg").write_bytes(b"jpg")
    else:
        (target / "index.html").write_text("<h1>my page</h1>")
    before = snapshot(target)
    rec = Recorder()
    rec.add(RunResult(()), model="m", env="e")
    with pytest.raises(FileExistsError, match="not an rlmesh bundle"):
        rec.export(target)
    assert snapshot(target) == before


def test_a_zip_that_is_not_a_bundle_is_never_overwritten(tmp_path: Path) -> None:
    target = tmp_path / "photos.zip"
    with zipfile.ZipFile(target, "w") as zf:
        zf.writestr("holiday.jpg", b"jpg")
    before = target.read_bytes()
    rec = Recorder()
    rec.add(RunResult(()), model="m", env="e")
    with pytest.raises(FileExistsError, match=r"not an rlmesh\.result\.v1 zip bundle"):
        rec.export(target)
    assert target.read_bytes() == before
    target.unlink()
    rec.export(target)
    rec.export(target)  # its own earlier export is replaced
    assert ResultSet.load(target).workloads[0].model == "m"


# -- item 4: result.json is RFC 8259 JSON ------------------------------------------------------


def test_non_finite_rewards_are_written_as_null_and_read_back_as_nan(tmp_path: Path) -> None:
    nan, inf = float("nan"), float("inf")
    rec = Recorder()
    rec.add(
        RunResult(
            (
                EpisodeResult(0, 1, 3, nan, True, False, True),
                EpisodeResult(1, 2, 3, -inf, True, False, True, inf),
            )
        ),
        model="m",
        env="e",
        config={"lr": nan},
    )
    folder, archive = rec.export(tmp_path / "b"), rec.export(tmp_path / "b.zip")
    with zipfile.ZipFile(archive) as zf:
        texts = {folder: (folder / "result.json").read_bytes(), archive: zf.read("result.json")}
    for out, text in texts.items():
        doc = json.loads(text, parse_constant=_no_constants)
        (w,) = doc["workloads"]
        assert [e["reward"] for e in w["episodes"]] == [None, None]
        assert w["episodes"][1]["durationS"] is None and w["metrics"]["meanReward"] is None
        assert w["config"] == {"lr": None}
        loaded = ResultSet.load(out).workloads[0].episodes
        assert np.isnan(loaded[0].reward) and np.isnan(loaded[1].reward)
    json.dumps(rec.to_dict(), allow_nan=False)  # to_dict() is the same JSON-safe document


# -- item 6: untrusted bundles -----------------------------------------------------------------


def _bundle_with(tmp_path: Path, name: str, media_path: str, step_log: str | None = None) -> Path:
    root = tmp_path / name
    root.mkdir()
    episode: dict[str, Any] = {
        "index": 0, "seed": 0, "steps": 1, "reward": 1.0, "terminated": True, "truncated": False,
        "success": True, "durationS": 0.1, "includedInMetrics": True,
        "media": [{"camera": "render", "kind": "video", "path": media_path, "format": "mp4"}],
    }  # fmt: skip
    if step_log:
        episode["stepLog"] = step_log
    doc = {"schema": "rlmesh.result.v1", "resultSetId": "x", "recordedAt": "T",
           "workloads": [{"model": "m", "env": "e", "task": "e", "config": {}, "episodes": [episode]}]}  # fmt: skip
    (root / "result.json").write_text(json.dumps(doc))
    return root


@pytest.mark.filterwarnings("ignore:recorder.merge.*is missing; dropped")
@pytest.mark.parametrize("how", ["file-link", "dir-link"])
def test_merge_copies_no_file_a_symlink_points_at(tmp_path: Path, how: str) -> None:
    secret = tmp_path / "home" / ".ssh" / "id_ed25519"
    secret.parent.mkdir(parents=True)
    secret.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY-----")
    src = _bundle_with(
        tmp_path,
        "evil",
        "media/w000-m/e/ep00000/id_ed25519",
        step_log="media/w000-m/e/ep00000/steps.jsonl",
    )
    ep_dir = src / "media" / "w000-m" / "e" / "ep00000"
    if how == "file-link":
        ep_dir.mkdir(parents=True)
        os.symlink(secret, ep_dir / "id_ed25519")
        os.symlink(secret, ep_dir / "steps.jsonl")
    else:
        (src / "media" / "w000-m" / "e").mkdir(parents=True)
        os.symlink(secret.parent, ep_dir)
    with pytest.warns(UserWarning, match="symlink"):
        out = merge([src], tmp_path / "merged")
    leaked = [p for p in out.rglob("*") if p.is_file() and b"PRIVATE KEY" in p.read_bytes()]
    assert leaked == []
    (ep,) = ResultSet.load(out).workloads[0].episodes
    assert ep.media == () and ep.step_log is None


def test_ResultSet_load_does_not_follow_a_symlinked_result_json(tmp_path: Path) -> None:
    outside = _bundle_with(tmp_path, "real", "media/x.mp4")
    evil = tmp_path / "evil"
    evil.mkdir()
    os.symlink(outside / "result.json", evil / "result.json")
    with pytest.raises(recorder.UnsafeBundle, match="symlink"):
        ResultSet.load(evil)


def _bomb(path: Path, entry: str, size: int, document: bytes | None = None) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        if document is not None:
            zf.writestr("result.json", document)
        with zf.open(entry, "w", force_zip64=True) as fh:
            chunk = b" " * (1 << 20)
            for _ in range(size >> 20):
                fh.write(chunk)
    return path


def test_a_zip_bomb_document_is_refused_before_inflating(tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "bomb.zip", "result.json", 1 << 27)  # 128 MiB of JSON whitespace
    assert bomb.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(recorder.UnsafeBundle, match=r"zip bomb|limit"):
            ResultSet.load(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"loading the bomb took {peak} bytes"


@pytest.mark.filterwarnings("ignore:recorder.merge.*is missing; dropped")
def test_merge_refuses_a_zip_bomb_media_entry_without_writing_it(tmp_path: Path) -> None:
    src = _bundle_with(
        tmp_path,
        "doc",
        "media/w000-m/e/ep00000/render.mp4",
        step_log="media/w000-m/e/ep00000/steps.jsonl",
    )
    bomb = _bomb(
        tmp_path / "bomb.zip",
        "media/w000-m/e/ep00000/steps.jsonl",
        1 << 27,
        (src / "result.json").read_bytes(),
    )
    with pytest.warns(UserWarning, match="zip bomb"):
        out = merge([bomb], tmp_path / "merged")
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < 1 << 20
    assert ResultSet.load(out).workloads[0].episodes[0].step_log is None


# -- item 7: an env cannot exfiltrate client files through info --------------------------------


def _video_info(path: str) -> Any:
    return lambda t: {"video_artifact_path": path} if t >= 2 else {}


@pytest.mark.parametrize(
    "name,content", [("creds", b"AWS_SECRET_ACCESS_KEY=abc\n"), ("fake.mp4", b"not a video at all")]
)
def test_an_env_cannot_make_the_recorder_copy_a_non_video_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, content: bytes
) -> None:
    monkeypatch.chdir(tmp_path)
    Path(name).write_bytes(content)
    with Recorder() as rec, pytest.warns(UserWarning, match="not a complete MP4"):
        rlmesh.run(rlmesh.RANDOM_SAMPLE, CamEnv(3, render=False, info=_video_info(name)), seeds=[0],
                   hooks=rec.capture(model="m", env="e", cameras=[]))  # fmt: skip
        out = rec.export(tmp_path / "out")
    assert [
        p for p in (out / "media").rglob("*") if p.is_file() and p.read_bytes() == content
    ] == []
    assert (
        "media" not in json.loads((out / "result.json").read_text())["workloads"][0]["episodes"][0]
    )


def test_a_real_env_video_is_copied_from_an_allowed_dir_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _av()
    with Recorder(codec="h264") as rec:  # a real MP4 to play the env's video
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE, CamEnv(3), seeds=[0], hooks=rec.capture(model="m", env="e")
        )
        mp4 = (
            rec.export(tmp_path / "src")
            / rec.to_dict()["workloads"][0]["episodes"][0]["media"][0]["path"]
        )
    vids = tmp_path / "vids"
    vids.mkdir()
    shutil.copyfile(mp4, vids / "episode")  # no suffix: recognised by content
    cut = vids / "cut.mp4"
    cut.write_bytes(mp4.read_bytes()[: mp4.stat().st_size // 2])  # a file cut short: no moov box
    monkeypatch.chdir(tmp_path)
    with Recorder() as rec, pytest.warns(UserWarning) as caught:
        env = CamEnv(
            3,
            render=False,
            info=lambda t: {
                "video_artifact_path": str(vids / ("episode" if env.episode == 0 else "cut.mp4"))
            },
        )
        hooks = rec.capture(model="m", env="e", cameras=[], env_video_dirs=[vids])
        rlmesh.run(rlmesh.RANDOM_SAMPLE, env, seeds=[0, 1], hooks=hooks)
        off = rec.capture(model="m", env="e", cameras=[], env_video_dirs=[])
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE,
            CamEnv(3, render=False, info=_video_info(str(vids / "episode"))),
            seeds=[0],
            hooks=off,
        )
        out = rec.export(tmp_path / "out")
        doc = rec.to_dict()
    first, second = doc["workloads"][0]["episodes"]
    (row,) = first["media"]
    assert row["format"] == "mp4" and row["path"].endswith("/video_artifact_path.mp4")
    assert (out / row["path"]).read_bytes() == mp4.read_bytes()
    assert "media" not in second  # the cut file is refused
    assert "media" not in doc["workloads"][1]["episodes"][0]  # env_video_dirs=[]: off
    messages = [str(w.message) for w in caught]
    assert any("not a complete MP4" in m for m in messages) and any(
        "not under an allowed directory" in m for m in messages
    )


# -- issue 29 item 10: cameras, reset frame, fps, runtime keys -----------------------------------


class _BareContext:
    """A run context with nothing to discover cameras from (no contract, no env)."""

    num_envs = 1


def test_explicit_cameras_without_a_session_read_through_the_step_event(tmp_path: Path) -> None:
    _av()
    with Recorder(codec="lossless") as rec:
        hooks: Any = rec.capture(model="m", env="e", cameras=["image/wrist"])
        hooks.on_run_start(_BareContext())
        hooks.on_episode_start(episode=0, seed=0)
        for t in range(3):
            obs = {"wrist": frame(t)}
            hooks.on_step(
                StepEvent(
                    0,
                    0,
                    t,
                    obs,
                    0.0,
                    1.0,
                    t == 2,
                    False,
                    {},
                    0.0,
                    0.0,
                    lambda item, o=obs: o["wrist"],
                )
            )
        hooks.on_episode_end(EpisodeResult(0, 0, 3, 3.0, True, False))
        hooks.on_run_end(RunResult(()))
        (row,) = rec.to_dict()["workloads"][0]["episodes"][0]["media"]
        frames = decode(rec.export(tmp_path / "b") / row["path"])
    assert (
        row["camera"] == "image/wrist"
        and [np.array_equal(f, frame(t)) for t, f in enumerate(frames)] == [True] * 3
    )


def test_the_reset_frame_is_recorded_and_fps_follows_render_fps(tmp_path: Path) -> None:
    _av()
    env = CamEnv(3, info=lambda t: {"completed_episodes": 0, "episode_ids": "ep-1", "dist": 0.5})
    env.metadata = {"render_modes": ["rgb_array"], "render_fps": 12}
    with Recorder(codec="lossless") as rec:
        rlmesh.run(rlmesh.RANDOM_SAMPLE, env, seeds=[0], hooks=rec.capture(model="m", env="e"))
        episode = rec.to_dict()["workloads"][0]["episodes"][0]
        out = rec.export(tmp_path / "b")
    (row,) = episode["media"]
    frames = decode(out / row["path"])
    assert np.array_equal(frames[0], frame(0))  # what the env showed right after reset
    assert [np.array_equal(f, frame(t)) for t, f in enumerate(frames)] == [True] * 4
    assert row["fps"] == 12.0
    import av

    with av.open(str(out / row["path"])) as container:
        assert container.streams.video[0].average_rate == 12
    lines = [json.loads(x) for x in (out / episode["stepLog"]).read_text().splitlines()]
    assert [r["t"] for r in lines] == [0.0, 1 / 12, 2 / 12]
    assert [sorted(r["info"]) for r in lines] == [
        ["dist"],
        ["dist"],
        ["dist", "is_success"],
    ]  # no runtime keys
    assert Recorder(fps=20)._fps_for(None) == 20  # an explicit fps wins


def _dead_staging(parent: Path, name: str, episodes: int) -> Path:
    """A staging dir as a recorder killed before export leaves it (its owner: a previous boot)."""
    import socket

    d = parent / f"rlmesh-recorder-{name}"
    d.mkdir(parents=True)
    header = {
        "journal": "rlmesh.recorder.journal.v1",
        "resultSetId": name,
        "pid": 1,
        "host": socket.gethostname(),
        "boot": "an-earlier-boot",
        "start": "0",
    }
    lines = [header] + [
        {"op": "episode", "workload": 0, "record": {"index": i}} for i in range(episodes)
    ]
    (d / "journal.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def test_leftovers_without_a_finished_episode_are_no_reason_to_warn(tmp_path: Path) -> None:
    import warnings

    import rlmesh.recorder._recorder as recorder_module

    stage = tmp_path / "stage"
    for i in range(3):
        _dead_staging(stage, f"empty{i}", episodes=0)
    assert len(recorder.orphans(stage)) == 3  # listed (the user may delete them), but empty
    recorder_module._warned_orphans.discard(str(stage))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec = Recorder(staging_dir=stage)
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE,
            CamEnv(2, render=False),
            seeds=[0],
            hooks=rec.capture(model="pi", env="e", cameras=[]),
        )
        rec.close()
    assert [str(w.message) for w in caught if "never exported" in str(w.message)] == []

    _dead_staging(stage, "full", episodes=2)
    recorder_module._warned_orphans.discard(str(stage))
    with pytest.warns(UserWarning, match=r"1 staging dir\(s\) .* hold 2 finished episode"):
        rec = Recorder(staging_dir=stage)
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE,
            CamEnv(2, render=False),
            seeds=[0],
            hooks=rec.capture(model="pi", env="e", cameras=[]),
        )
        rec.close()
