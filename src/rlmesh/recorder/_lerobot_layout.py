"""The two LeRobot dataset layouts the export writes: v3.0 (default) and v2.1.

:mod:`rlmesh.recorder._lerobot` reads the bundle and turns every episode into
:class:`Frames` (numpy columns and their statistics); a writer made by
:meth:`Layout.writer` lays them out in a temporary folder, one episode at a time, and
``finish`` writes the metadata. LeRobot's v3.0 layout:

- ``data/chunk-{c:03d}/file-{f:03d}.parquet``: the rows of consecutive episodes, a new
  file once one holds :data:`DATA_FILE_MB` MB (LeRobot's default);
- ``videos/<key>/chunk-{c:03d}/file-{f:03d}.mp4``: one file per episode and camera, as
  recorded (no re-encoding), ``(c, f) = divmod(episode, 1000)``; the episode's video
  starts at ``from_timestamp`` 0;
- ``meta/episodes/chunk-000/file-000.parquet``: per episode its tasks, length, the data
  file and the global row range (``dataset_from_index`` / ``dataset_to_index``), each
  camera's file and time range, and its statistics flattened as ``stats/<feature>/<stat>``;
- ``meta/tasks.parquet`` (the task strings as a pandas index, a ``task_index`` column),
  ``meta/stats.json`` (the statistics over every episode), ``meta/info.json``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CHUNKS_SIZE",
    "DATA_FILE_MB",
    "Frames",
    "Layout",
    "aggregate_stats",
    "video_stats",
    "warn",
]

#: Episodes (v2.1) or files (v3.0) per chunk folder (LeRobot's default).
CHUNKS_SIZE = 1000
#: A v3.0 data file holds episodes until it reaches this many MB (LeRobot's default).
DATA_FILE_MB = 100
#: What a v3.0 ``info.json`` says its video files hold at most (LeRobot's default).
VIDEO_FILE_MB = 200
#: Frames of a video read for its image statistics (evenly spaced), as LeRobot samples them.
STATS_FRAMES = 100
#: Image statistics look at every k-th pixel so a side has at most about this many (LeRobot's).
STATS_SIDE = 150

_V21_DATA = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
_V21_VIDEO = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
_V30_DATA = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
_V30_VIDEO = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
_V30_EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def warn(message: str) -> None:
    """A ``UserWarning`` that never raises (as the recorder's: an export warning is advice)."""
    try:
        warnings.warn(message, UserWarning, stacklevel=3)
    except Exception:
        pass


@dataclass
class Frames:
    """One episode's rows as numpy columns, and the statistics of each column."""

    index: int
    length: int
    start: int  # the global index of its first row
    task: str
    task_index: int
    columns: dict[str, np.ndarray]
    stats: dict[str, dict[str, Any]]
    record: Any  # the bundle's EpisodeRecord


def video_stats(path: Path, length: int) -> dict[str, Any] | None:
    """Per-channel min/max/mean/std of a video's pixels in [0, 1], shaped (3, 1, 1) as LeRobot's.

    Only the episode's ``length`` frames count (the frame after the last action has no row);
    up to :data:`STATS_FRAMES` of them, evenly spaced, each subsampled to about
    :data:`STATS_SIDE` pixels a side. The sums run on the uint8 pixels (no float copy of
    the frames), so a 600x400 episode costs milliseconds.

    None when PyAV is missing or the file does not decode (the stats are advisory).
    """
    try:
        import av
    except ImportError:
        return None
    count = max(0, int(length))
    wanted = set(np.linspace(0, count - 1, min(count, STATS_FRAMES)).round().astype(int).tolist())
    picked: list[np.ndarray] = []
    try:
        with av.open(str(path)) as container:
            for i, frame in enumerate(container.decode(video=0)):
                if i >= count:
                    break
                if i in wanted:  # decode every frame (the codec needs them), convert only these
                    img = frame.to_ndarray(format="rgb24")
                    step = max(1, max(img.shape[:2]) // STATS_SIDE)
                    picked.append(img[::step, ::step])
    except Exception:
        return None
    if not picked:
        return None
    px = np.stack(picked).reshape(-1, 3)
    n = px.shape[0]
    mean = px.sum(axis=0, dtype=np.float64) / n
    squares = np.einsum("ij,ij->j", px, px, dtype=np.float64) / n  # no float copy of the pixels
    std = np.sqrt(np.maximum(squares - mean**2, 0.0))

    def shaped(values: np.ndarray) -> list[list[list[float]]]:
        return [[[float(v) / 255.0]] for v in values]

    return {
        "min": shaped(px.min(axis=0)),
        "max": shaped(px.max(axis=0)),
        "mean": shaped(mean),
        "std": shaped(std),
        "count": [len(picked)],
    }


def aggregate_stats(per_episode: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The statistics over every episode (LeRobot's ``meta/stats.json``): counts weight means.

    >>> a = {"x": {"min": [0.0], "max": [2.0], "mean": [1.0], "std": [1.0], "count": [2]}}
    >>> b = {"x": {"min": [4.0], "max": [4.0], "mean": [4.0], "std": [0.0], "count": [2]}}
    >>> aggregate_stats([a, b])["x"]
    {'min': [0.0], 'max': [4.0], 'mean': [2.5], 'std': [1.6583123951777], 'count': [4]}
    """
    out: dict[str, dict[str, Any]] = {}
    for key in per_episode[0] if per_episode else ():
        parts = [ep[key] for ep in per_episode if key in ep]
        counts = np.asarray([p["count"][0] for p in parts], np.float64)
        means = np.stack([np.asarray(p["mean"], np.float64) for p in parts])
        stds = np.stack([np.asarray(p["std"], np.float64) for p in parts])
        weights = (counts / counts.sum()).reshape((-1,) + (1,) * (means.ndim - 1))
        mean = (means * weights).sum(axis=0)
        var = ((stds**2 + (means - mean) ** 2) * weights).sum(axis=0)
        out[key] = {
            "min": np.min(np.stack([np.asarray(p["min"]) for p in parts]), axis=0).tolist(),
            "max": np.max(np.stack([np.asarray(p["max"]) for p in parts]), axis=0).tolist(),
            "mean": mean.tolist(),
            "std": np.sqrt(var).tolist(),
            "count": [int(counts.sum())],
        }
    return out


def _table(columns: Mapping[str, np.ndarray]) -> Any:
    import pyarrow as pa

    out: dict[str, Any] = {}
    for name, values in columns.items():
        if values.ndim == 2 and values.shape[1] == 1:  # shape [1] is a scalar column to LeRobot
            out[name] = pa.array(values.reshape(-1))
        elif values.ndim == 2:  # a vector per row: LeRobot's fixed-size float lists
            out[name] = pa.FixedSizeListArray.from_arrays(
                pa.array(values.reshape(-1)), values.shape[1]
            )
        else:
            out[name] = pa.array(values)
    return pa.table(out)


def _jsonl(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")


def _write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=4) + "\n", "utf-8")


def _episode_summary(frames: Frames) -> dict[str, Any]:
    rec = frames.record
    return {
        "seed": rec.seed,
        "reward": rec.reward,
        "success": rec.success,
        "terminated": rec.terminated,
        "truncated": rec.truncated,
    }


@dataclass(eq=False)
class Layout:
    """What every writer needs: the format, fps, robot type, features and where the videos are.

    ``videos`` maps each video key to ``(camera, [the bundle path of its video, per episode])``.
    """

    version: str
    fps: float
    robot_type: str | None
    features: dict[str, Any]
    videos: dict[str, tuple[str, list[str]]]

    def writer(self, root: Path, src: Any) -> _V30Writer | _V21Writer:
        """A writer laying the dataset out under ``root``, copying videos out of ``src`` (a bundle)."""
        return (_V30Writer if self.version == "v3.0" else _V21Writer)(self, root, src)

    def copy_video(self, src: Any, key: str, frames: Frames, dest: Path) -> dict[str, Any] | None:
        camera, paths = self.videos[key]
        if not src.copy_to(paths[frames.index], dest):
            raise FileNotFoundError(f"the bundle lacks {paths[frames.index]} (camera {camera!r})")
        return video_stats(dest, frames.length)


class _V30Writer:
    def __init__(self, layout: Layout, root: Path, src: Any) -> None:
        self.layout, self.root, self.src = layout, root, src
        self.rows: list[dict[str, Any]] = []  # meta/episodes
        self.stats: list[dict[str, Any]] = []
        self.pending: list[Any] = []  # tables of the data file being filled
        self.pending_bytes = 0
        self.file = (0, 0)  # (chunk_index, file_index) of that data file
        self.total = 0

    def add(self, frames: Frames) -> None:
        lay = self.layout
        table = _table(frames.columns)
        self.pending.append(table)
        self.pending_bytes += table.nbytes
        chunk, file = self.file
        row: dict[str, Any] = {
            "episode_index": frames.index,
            "tasks": [frames.task],
            "length": frames.length,
            "data/chunk_index": chunk,
            "data/file_index": file,
            "dataset_from_index": frames.start,
            "dataset_to_index": frames.start + frames.length,
        }
        stats = dict(frames.stats)
        v_chunk, v_file = divmod(frames.index, CHUNKS_SIZE)
        for key in lay.videos:
            dest = self.root / _V30_VIDEO.format(
                video_key=key, chunk_index=v_chunk, file_index=v_file
            )
            image = lay.copy_video(self.src, key, frames, dest)
            if image is not None:
                stats[key] = image
            row[f"videos/{key}/chunk_index"] = v_chunk
            row[f"videos/{key}/file_index"] = v_file
            row[f"videos/{key}/from_timestamp"] = 0.0
            row[f"videos/{key}/to_timestamp"] = frames.length / lay.fps
        row["meta/episodes/chunk_index"] = 0
        row["meta/episodes/file_index"] = 0
        for feature, values in stats.items():
            for name, value in values.items():
                row[f"stats/{feature}/{name}"] = value
        row.update(_episode_summary(frames))
        self.rows.append(row)
        self.stats.append(stats)
        self.total += frames.length
        if self.pending_bytes >= DATA_FILE_MB * 1024 * 1024:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        chunk, file = self.file
        out = self.root / _V30_DATA.format(chunk_index=chunk, file_index=file)
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.concat_tables(self.pending), out)
        self.pending, self.pending_bytes = [], 0
        self.file = (chunk + 1, 0) if file == CHUNKS_SIZE - 1 else (chunk, file + 1)

    def finish(self, tasks: dict[str, int]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._flush()
        lay = self.layout
        path = self.root / _V30_EPISODES
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(self.rows), path)
        pq.write_table(_tasks_table(tasks), self.root / "meta" / "tasks.parquet")
        _write_json(self.root / "meta" / "stats.json", aggregate_stats(self.stats))
        fps: float | int = int(lay.fps) if float(lay.fps).is_integer() else lay.fps
        features = {
            k: (f if f["dtype"] == "video" else {**f, "fps": fps}) for k, f in lay.features.items()
        }
        n = len(self.rows)
        _write_json(
            self.root / "meta" / "info.json",
            {
                "codebase_version": "v3.0",
                "robot_type": lay.robot_type,
                "total_episodes": n,
                "total_frames": self.total,
                "total_tasks": len(tasks),
                "chunks_size": CHUNKS_SIZE,
                "data_files_size_in_mb": DATA_FILE_MB,
                "video_files_size_in_mb": VIDEO_FILE_MB,
                "fps": fps,
                "splits": {"train": f"0:{n}"},
                "data_path": _V30_DATA,
                "video_path": _V30_VIDEO if lay.videos else None,
                "features": features,
            },
        )


def _tasks_table(tasks: dict[str, int]) -> Any:
    """``meta/tasks.parquet`` as pandas writes it: the task strings are the frame's index.

    LeRobot reads it with ``pandas.read_parquet`` and looks a task up by index; the pandas
    metadata below makes that index without needing pandas here.
    """
    import pyarrow as pa

    names = list(tasks)
    table = pa.table({"task_index": pa.array([tasks[t] for t in names], pa.int64()),
                      "task": pa.array(names, pa.string())})  # fmt: skip
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": "task",
                "field_name": "task",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.0.0",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


class _V21Writer:
    def __init__(self, layout: Layout, root: Path, src: Any) -> None:
        self.layout, self.root, self.src = layout, root, src
        self.episodes: list[dict[str, Any]] = []
        self.stats: list[dict[str, Any]] = []
        self.total = 0

    def add(self, frames: Frames) -> None:
        import pyarrow.parquet as pq

        chunk = frames.index // CHUNKS_SIZE
        out = self.root / _V21_DATA.format(episode_chunk=chunk, episode_index=frames.index)
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(_table(frames.columns), out)
        stats = dict(frames.stats)
        for key in self.layout.videos:
            dest = self.root / _V21_VIDEO.format(
                episode_chunk=chunk, video_key=key, episode_index=frames.index
            )
            image = self.layout.copy_video(self.src, key, frames, dest)
            if image is not None:
                stats[key] = image
        self.episodes.append(
            {"episode_index": frames.index, "tasks": [frames.task], "length": frames.length,
             **_episode_summary(frames)}
        )  # fmt: skip
        self.stats.append({"episode_index": frames.index, "stats": stats})
        self.total += frames.length

    def finish(self, tasks: dict[str, int]) -> None:
        lay = self.layout
        n = len(self.episodes)
        meta = self.root / "meta"
        _write_json(
            meta / "info.json",
            {
                "codebase_version": "v2.1",
                "robot_type": lay.robot_type,
                "total_episodes": n,
                "total_frames": self.total,
                "total_tasks": len(tasks),
                "total_videos": n * len(lay.videos),
                "total_chunks": (n - 1) // CHUNKS_SIZE + 1,
                "chunks_size": CHUNKS_SIZE,
                "fps": lay.fps,
                "splits": {"train": f"0:{n}"},
                "data_path": _V21_DATA,
                "video_path": _V21_VIDEO if lay.videos else None,
                "features": lay.features,
            },
        )
        _jsonl(meta / "episodes.jsonl", self.episodes)
        _jsonl(meta / "tasks.jsonl", [{"task_index": i, "task": t} for t, i in tasks.items()])
        _jsonl(meta / "episodes_stats.jsonl", self.stats)
