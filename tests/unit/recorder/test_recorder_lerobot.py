"""``ResultSet.to_lerobot``: a recorded bundle as a LeRobot dataset (v3.0, and v2.1 on request), read back.

Checked with pyarrow and PyAV as a LeRobot user would see it: the rows with the right
frame count, ``observation.state`` equal to the observations the policy saw, episode
boundaries in ``next.done`` / ``episode_index``, timestamps at the dataset fps, one video
per camera per episode with one frame per step, and the meta files. LeRobot itself
(``LeRobotDataset``) loads the v3.0 dataset where it installs.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from recorder_envs import CamEnv, tagged

import rlmesh
from conftest import require
from rlmesh.recorder import Recorder, ResultSet

pytestmark = pytest.mark.slow  # video encoding: kept out of make test-fast


@pytest.fixture(autouse=True)
def _deps() -> Any:
    require("av", "video recording")
    return require("pyarrow", "the LeRobot export")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _episode_table(root: Path, i: int) -> dict[str, list[Any]]:
    """Episode ``i``'s rows, in either layout."""
    import pyarrow.parquet as pq

    v21 = root / f"data/chunk-000/episode_{i:06d}.parquet"
    if v21.exists():
        return pq.read_table(v21).to_pydict()
    ep = _episodes_v30(root)[i]
    data = pq.read_table(
        root / f"data/chunk-{ep['data/chunk_index']:03d}/file-{ep['data/file_index']:03d}.parquet"
    ).to_pydict()
    rows = [r for r, e in enumerate(data["episode_index"]) if e == i]
    assert rows == list(range(rows[0], rows[0] + len(rows)))  # an episode's rows are contiguous
    first = data["index"][rows[0]]
    assert (first, first + len(rows)) == (ep["dataset_from_index"], ep["dataset_to_index"])
    return {k: [v[r] for r in rows] for k, v in data.items()}


def _episodes_v30(root: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()


class Log(rlmesh.RunHooks):
    """The observations and actions the policy saw, per episode."""

    def __init__(self) -> None:
        self.obs: dict[int, list[Any]] = {}
        self.actions: dict[int, list[Any]] = {}

    def on_step(self, event: rlmesh.StepEvent) -> None:
        self.obs.setdefault(event.episode, []).append(np.array(event.observation, copy=True))
        self.actions.setdefault(event.episode, []).append(event.action)


class Both(rlmesh.RunHooks):
    def __init__(self, *hooks: rlmesh.RunHooks) -> None:
        self.hooks = hooks

    def on_run_start(self, context: Any) -> None:
        for h in self.hooks:
            h.on_run_start(context)

    def on_episode_start(self, *, episode: int, seed: int | None) -> None:
        for h in self.hooks:
            h.on_episode_start(episode=episode, seed=seed)

    def on_step(self, event: rlmesh.StepEvent) -> None:
        for h in self.hooks:
            h.on_step(event)

    def on_episode_end(self, result: Any) -> None:
        for h in self.hooks:
            h.on_episode_end(result)

    def on_run_end(self, result: Any) -> None:
        for h in self.hooks:
            h.on_run_end(result)


@pytest.mark.parametrize("version", ["v3.0", "v2.1"])
def test_a_recorded_cartpole_bundle_reads_back_frame_for_frame(
    tmp_path: Path, version: str
) -> None:
    gym = require("gymnasium")
    log = Log()
    with Recorder(fps=50) as rec:
        hooks = rec.capture(model="random", env="CartPole-v1", task="balance the pole", cameras=[])
        result = rlmesh.run(
            rlmesh.RANDOM_SAMPLE, gym.make("CartPole-v1"), seeds=[0, 1, 2], hooks=Both(hooks, log)
        )
        bundle = rec.export(tmp_path / "bundle")
    kwargs = {} if version == "v3.0" else {"version": "v2.1"}
    out = ResultSet.load(bundle).to_lerobot(tmp_path / "lerobot", **kwargs)

    info = json.loads((out / "meta/info.json").read_text())
    lengths = [e.steps for e in result.episodes]
    assert info["codebase_version"] == version and info["fps"] == 50.0
    assert info["total_episodes"] == 3 and info["total_frames"] == sum(lengths)
    assert info["features"]["observation.state"]["shape"] == [4]
    assert info["features"]["action"]["shape"] == [1]
    if version == "v2.1":
        assert info["total_videos"] == 0
        assert (
            info["data_path"]
            == "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
        )
        assert [e["length"] for e in _jsonl(out / "meta/episodes.jsonl")] == lengths
        assert _jsonl(out / "meta/tasks.jsonl") == [{"task_index": 0, "task": "balance the pole"}]
        stats = _jsonl(out / "meta/episodes_stats.jsonl")
        assert [s["stats"]["action"]["count"] for s in stats] == [[n] for n in lengths]
    else:
        import pyarrow.parquet as pq

        assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
        assert info["video_path"] is None and info["features"]["action"]["fps"] == 50
        eps = _episodes_v30(out)
        assert [e["length"] for e in eps] == lengths and [e["tasks"] for e in eps] == [
            ["balance the pole"]
        ] * 3
        assert [e["stats/action/count"] for e in eps] == [[n] for n in lengths]
        assert sorted(p.name for p in (out / "data/chunk-000").iterdir()) == ["file-000.parquet"]
        tasks = pq.read_table(out / "meta/tasks.parquet")
        assert tasks.to_pydict() == {"task_index": [0], "task": ["balance the pole"]}
        assert b'"index_columns": ["task"]' in tasks.schema.metadata[b"pandas"]  # LeRobot's lookup
        stats = json.loads((out / "meta/stats.json").read_text())
        assert stats["action"]["count"] == [sum(lengths)]
        assert stats["next.reward"]["mean"] == [1.0]

    start = 0
    for i, n in enumerate(lengths):
        t = _episode_table(out, i)
        assert len(t["frame_index"]) == n
        assert t["frame_index"] == list(range(n)) and t["episode_index"] == [i] * n
        assert t["index"] == list(range(start, start + n))  # global and contiguous across episodes
        assert t["next.done"] == [False] * (n - 1) + [True]  # the episode boundary
        assert t["next.reward"] == [1.0] * n
        np.testing.assert_allclose(t["timestamp"], np.arange(n) / 50.0, rtol=1e-6)
        np.testing.assert_allclose(
            np.array(t["observation.state"]), np.stack(log.obs[i]), rtol=1e-6
        )
        assert t["action"] == [
            float(a) for a in log.actions[i]
        ]  # a width-1 action: a scalar column
        start += n
    first_obs, _ = gym.make("CartPole-v1").reset(seed=0)
    np.testing.assert_allclose(_episode_table(out, 0)["observation.state"][0], first_obs, rtol=1e-6)


def test_a_pixel_bundle_exports_one_video_per_camera_per_episode(tmp_path: Path) -> None:
    import av

    env = tagged(CamEnv(6, images=("front",)), {"front": "image/primary"})
    with Recorder(fps=12) as rec:
        hooks = rec.capture(model="pi", env="Cam-v0", task="reach")
        rlmesh.run(rlmesh.RANDOM_SAMPLE, env, seeds=[0, 1], hooks=hooks)
        bundle = rec.export(tmp_path / "b.zip")  # a zip bundle reads the same
    out = ResultSet.load(bundle).to_lerobot(tmp_path / "ds", robot_type="cam")

    info = json.loads((out / "meta/info.json").read_text())
    assert info["fps"] == 12.0 and info["robot_type"] == "cam" and info["total_frames"] == 12
    video_keys = sorted(k for k, f in info["features"].items() if f["dtype"] == "video")
    assert video_keys == ["observation.images.image_primary", "observation.images.render"]
    for key in video_keys:
        feature = info["features"][key]
        assert feature["shape"] == [48, 64, 3] and feature["info"]["video.fps"] == 12.0
    # the image leaf travels as video, not as state: the state is "pos" only
    assert info["features"]["observation.state"]["shape"] == [3]
    assert info["features"]["observation.state"]["names"] == ["pos[0]", "pos[1]", "pos[2]"]
    eps = _episodes_v30(out)
    render = {
        k.rsplit("/", 1)[1]: v
        for k, v in eps[0].items()
        if k.startswith("stats/observation.images.render/")
    }
    assert np.asarray(render["mean"]).shape == (3, 1, 1) and render["count"] == [6]
    assert 0.0 <= render["min"][0][0][0] <= render["mean"][0][0][0] <= render["max"][0][0][0] <= 1.0
    overall = json.loads((out / "meta/stats.json").read_text())["observation.images.render"]
    assert np.asarray(overall["std"]).shape == (3, 1, 1) and overall["count"] == [12]
    for i in range(2):
        t = _episode_table(out, i)
        assert len(t["frame_index"]) == 6 and t["next.done"][-1] is True
        for key in video_keys:
            ep = eps[i]
            assert (ep[f"videos/{key}/from_timestamp"], ep[f"videos/{key}/to_timestamp"]) == (
                0.0,
                0.5,
            )
            path = out / info["video_path"].format(
                video_key=key,
                chunk_index=ep[f"videos/{key}/chunk_index"],
                file_index=ep[f"videos/{key}/file_index"],
            )
            with av.open(str(path)) as container:
                frames = list(container.decode(video=0))
            # frame k is the scene after k steps; a render() camera also keeps the scene after
            # the last action (one frame past the last row), an observation camera does not
            assert len(frames) == (7 if key.endswith("render") else 6)
            assert (frames[0].height, frames[0].width) == (48, 64)
            stamps = [float(f.pts * f.time_base) for f in frames]
            np.testing.assert_allclose(
                stamps[:6], t["timestamp"], atol=1e-4
            )  # frame i at timestamp i / fps (LeRobot's tolerance)


def test_refusals_name_the_fix(tmp_path: Path) -> None:
    gym = require("gymnasium")
    with Recorder() as rec:
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE,
            gym.make("CartPole-v1"),
            seeds=[0],
            hooks=rec.capture(model="m", env="e", cameras=[]),
        )
        bundle = rec.export(tmp_path / "b")
    loaded = ResultSet.load(bundle)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="new path"):
        loaded.to_lerobot(tmp_path / "taken")
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"  # nothing of ours deleted
    with pytest.raises(ValueError, match=r"ResultSet\.load"):
        ResultSet.from_dict(json.loads((bundle / "result.json").read_text())).to_lerobot(
            tmp_path / "x"
        )
    with pytest.raises(ValueError, match="positive"):
        loaded.to_lerobot(tmp_path / "y", fps=0)
    assert not (tmp_path / "y").exists()  # a refused export leaves nothing behind
    (tmp_path / "empty").mkdir()
    assert loaded.to_lerobot(tmp_path / "empty", fps=10).is_dir()  # an empty folder is fine


def test_episodes_without_a_step_log_are_left_out_with_a_warning(tmp_path: Path) -> None:
    gym = require("gymnasium")
    with Recorder() as rec:
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE,
            gym.make("CartPole-v1"),
            seeds=[0],
            hooks=rec.capture(model="m", env="e", cameras=[]),
        )
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE,
            gym.make("CartPole-v1"),
            seeds=[1],
            hooks=rec.capture(model="m", env="e", cameras=[], step_log=False),
        )
        bundle = rec.export(tmp_path / "b")
    with pytest.warns(UserWarning, match="1 episode"):
        out = ResultSet.load(bundle).to_lerobot(tmp_path / "ds")
    assert json.loads((out / "meta/info.json").read_text())["total_episodes"] == 1


def _lerobot_dataset_class() -> Any:
    """LeRobot's ``LeRobotDataset`` (lerobot >= 0.4, or the standalone lerobot-dataset), or skip."""
    for module in ("lerobot.datasets.lerobot_dataset", "ledataset.datasets.lerobot_dataset"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return __import__(module, fromlist=["LeRobotDataset"]).LeRobotDataset
        except Exception:
            continue
    pytest.skip(
        "lerobot (or lerobot-dataset) is not installed: not an rlmesh extra, it pins torch, "
        "torchvision and many more"
    )


def test_lerobot_loads_it_where_lerobot_installs(tmp_path: Path) -> None:
    LeRobotDataset = _lerobot_dataset_class()
    gym = require("gymnasium")
    with Recorder(fps=50) as rec:
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE,
            gym.make("CartPole-v1"),
            seeds=[0, 1],
            hooks=rec.capture(model="m", env="e", cameras=[]),
        )
        bundle = rec.export(tmp_path / "b")
    out = ResultSet.load(bundle).to_lerobot(tmp_path / "ds")
    ds = LeRobotDataset("local/cartpole", root=out)
    assert ds.num_episodes == 2 and ds.fps == 50
    assert ds[len(ds) - 1]["task"] == "e" and int(ds[0]["frame_index"]) == 0


def test_the_export_command_writes_the_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gym = require("gymnasium")
    from rlmesh.cli import main

    with Recorder(fps=20) as rec:
        rlmesh.run(
            rlmesh.RANDOM_SAMPLE,
            gym.make("CartPole-v1"),
            seeds=[0, 1],
            hooks=rec.capture(model="m", env="e", cameras=[]),
        )
        bundle = rec.export(tmp_path / "b.zip")
    assert (
        main(["export", str(bundle), "--lerobot", str(tmp_path / "ds"), "--robot-type", "cartpole"])
        == 0
    )
    info = json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 2 and info["fps"] == 20.0 and info["robot_type"] == "cartpole"
    assert (
        main(["export", str(bundle), "--lerobot", str(tmp_path / "ds")]) == 1
    )  # not empty any more
    assert "FileExistsError" in capsys.readouterr().err
    assert main(["export", str(bundle)]) == 2  # --lerobot is required
    assert (
        main(
            ["export", str(bundle), "--lerobot", str(tmp_path / "old"), "--lerobot-version", "v2.1"]
        )
        == 0
    )
    assert json.loads((tmp_path / "old/meta/info.json").read_text())["codebase_version"] == "v2.1"


def test_image_statistics_are_per_channel_over_the_episode_s_frames(tmp_path: Path) -> None:
    """Per channel in [0, 1], as LeRobot computes them; from up to 100 frames, subsampled."""
    import av

    from rlmesh.recorder._lerobot_layout import video_stats

    path = tmp_path / "v.mp4"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv444p"
        stream.options = {"qp": "0"}
        for k in range(5):
            img = np.zeros((240, 320, 3), np.uint8)
            img[..., 0] = 255  # red everywhere
            img[:, :160, 1] = 40 * k  # green in the left half, brighter each frame
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    stats = video_stats(path, 4)  # the fifth frame has no row
    assert stats is not None and stats["count"] == [4]
    red, green, blue = np.asarray(stats["mean"]).reshape(3)
    assert abs(red - 1.0) < 0.02 and abs(blue) < 0.02
    assert abs(green - np.mean([40 * k / 255 / 2 for k in range(4)])) < 0.02
    assert np.asarray(stats["max"]).reshape(3)[1] == pytest.approx(120 / 255, abs=0.02)
