"""A result bundle as a LeRobot-format dataset (``ResultSet.to_lerobot``; LeRobot v3.0 layout).

What it writes (:mod:`rlmesh.recorder._lerobot_layout` holds the two layouts)::

    v3.0 (default, what current LeRobot reads)
    data/chunk-000/file-000.parquet                 every episode's rows, one file per 100 MB
    videos/observation.images.<camera>/chunk-000/file-000.mp4   one file per episode
    meta/info.json           codebase_version "v3.0", fps, totals, path templates, features
    meta/stats.json          min/max/mean/std/count of every feature over the dataset
    meta/tasks.parquet       the tasks (a pandas index) and their task_index
    meta/episodes/chunk-000/file-000.parquet   per episode: tasks, length, where its rows
                             and videos are, and its own stats (``stats/<feature>/<stat>``)

    v2.1 (``version="v2.1"``)
    data/chunk-000/episode_000000.parquet, videos/chunk-000/<key>/episode_000000.mp4,
    meta/info.json, meta/episodes.jsonl, meta/tasks.jsonl, meta/episodes_stats.jsonl

Image statistics are per channel in [0, 1], shaped (3, 1, 1), from up to 100 evenly
spaced frames of each episode, subsampled to at most ~150 pixels a side (as LeRobot
computes them).

A frame is one env step of the bundle's ``steps.jsonl``: ``observation.state`` (the
observation the action was predicted from: its numeric, non-image leaves, flattened and
concatenated in declared order; logged by the recorder), ``action`` (flattened),
``next.reward``, ``next.done`` (the step terminated or truncated the episode),
``timestamp`` (``frame_index / fps``), ``frame_index``, ``episode_index``, ``index``
(global) and ``task_index`` (the workload's task). Camera videos are copied as recorded:
the recorder stamps a step's frame at ``step / fps``, which is the frame's ``timestamp``;
a ``render()`` camera's video holds one frame more than its episode has rows (the scene after the last action,
at ``length / fps``), which LeRobot's timestamp-based decoding never asks for.

Invariants: nothing is written into ``path`` until the whole dataset is ready in a
sibling temporary folder, which then replaces ``path`` atomically (``path`` must not exist
or be an empty folder); pyarrow is imported only when exporting.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DependencyMissing
from ._lerobot_layout import Frames, Layout, warn
from ._reader import open_bundle

if TYPE_CHECKING:
    from ._records import ResultSet

__all__ = ["CODEBASE_VERSION", "VERSIONS", "export_lerobot", "observation_state"]

#: The LeRobot dataset format written by default (meta/info.json ``codebase_version``).
CODEBASE_VERSION = "v3.0"
#: The formats ``to_lerobot(version=...)`` writes.
VERSIONS = ("v3.0", "v2.1")
#: Observation leaves larger than this are not logged as state (images travel as video).
MAX_STATE = 4096


# -- the recorder's side: what the step log keeps of an observation -------------------------


def _state_leaf(value: Any) -> list[float] | None:
    try:
        arr = np.asarray(value)
    except Exception:
        return None
    if arr.dtype.kind not in "biuf" or arr.size > MAX_STATE or arr.ndim > 2:
        return None
    if arr.ndim == 2 and arr.dtype == np.uint8:  # a grayscale image: a camera, not state
        return None
    return [float(x) for x in arr.reshape(-1).tolist()]


def _collect(value: Any, name: str, out: dict[str, list[float]], depth: int) -> None:
    if depth > 8:
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            _collect(v, f"{name}.{k}" if name else str(k), out, depth + 1)
    elif isinstance(value, tuple):
        for i, v in enumerate(value):
            _collect(v, f"{name}.{i}" if name else str(i), out, depth + 1)
    elif not isinstance(value, (str, bytes)):
        leaf = _state_leaf(value)
        if leaf is not None:
            out[name or "observation"] = leaf


def observation_state(observation: Any) -> dict[str, list[float]] | None:
    """The numeric, non-image leaves of an observation, flattened, by leaf name; None when none.

    A plain array is named ``"observation"``; Dict/Tuple leaves by their key path
    (``"robot.joints"``). Images (uint8 2-D, any 3-D+) and leaves over ``MAX_STATE``
    elements are left out: cameras are recorded as video.

    >>> import numpy as np
    >>> observation_state({"pos": np.array([1.0, 2.0]), "image": np.zeros((8, 8, 3), np.uint8), "mode": 2})
    {'pos': [1.0, 2.0], 'mode': [2.0]}
    """
    out: dict[str, list[float]] = {}
    try:
        _collect(observation, "", out, 0)
    except Exception:
        return None
    return out or None


# -- the export ------------------------------------------------------------------------------


def _flat(value: Any) -> list[float]:
    """An action from the step log (a number, nested lists or a dict of them) as floats."""
    if isinstance(value, (bool, int, float)):
        return [float(value)]
    if isinstance(value, Mapping):
        return [x for v in value.values() for x in _flat(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat(v)]
    if value is None:
        return []
    raise ValueError(
        f"an action of type {type(value).__name__} ({value!r:.40}) has no numeric LeRobot form"
    )


def _names(prefix: str, sizes: Iterable[tuple[str, int]]) -> list[str]:
    out: list[str] = []
    for key, n in sizes:
        out.extend([key] if n == 1 else [f"{key}[{i}]" for i in range(n)])
    return out or [prefix]


def _stats(values: np.ndarray) -> dict[str, list[float]]:
    v = values.astype(np.float64).reshape(len(values), -1)
    return {
        "min": v.min(axis=0).tolist(),
        "max": v.max(axis=0).tolist(),
        "mean": v.mean(axis=0).tolist(),
        "std": v.std(axis=0).tolist(),
        "count": [len(v)],
    }


class _Episode:
    def __init__(
        self, rows: list[dict[str, Any]], task: str, record: Any, media: dict[str, Any]
    ) -> None:
        self.rows = rows
        self.task = task
        self.record = record
        self.media = media  # camera -> MediaRef (mp4 videos only)


def _fps_of(episodes: list[_Episode], fps: float | None) -> float:
    if fps is not None:
        if not (isinstance(fps, (int, float)) and math.isfinite(fps) and fps > 0):
            raise ValueError(f"fps must be a positive number, got {fps!r}")
        return float(fps)
    seen = {float(m.fps) for ep in episodes for m in ep.media.values() if m.fps}
    for ep in episodes:  # the step log stamps t = step / fps
        for row in ep.rows:
            step, t = row.get("step"), row.get("t")
            if isinstance(step, int) and step > 0 and isinstance(t, (int, float)) and t > 0:
                seen.add(round(step / float(t), 6))
                break
    if len(seen) > 1:
        raise ValueError(
            f"the bundle mixes frame rates {sorted(seen)}; a LeRobot dataset has one fps: "
            "export the workloads separately or pass fps="
        )
    return seen.pop() if seen else 30.0


def _read_episodes(result_set: ResultSet, src: Any) -> list[_Episode]:
    episodes: list[_Episode] = []
    skipped = 0
    for w in result_set.workloads:
        for rec in w.episodes:
            if rec.step_log is None:
                skipped += 1
                continue
            try:
                text = src.read(rec.step_log).decode("utf-8")
            except (KeyError, OSError):
                skipped += 1
                continue
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
            if not rows:
                skipped += 1
                continue
            media = {
                m.camera: m
                for m in rec.media
                if m.kind == "video" and m.format == "mp4" and m.width
            }
            episodes.append(_Episode(rows, w.task or w.env, rec, media))
    if not episodes:
        raise ValueError(
            "no episode of this result set has a step log (steps.jsonl) to export; record with "
            "Recorder(...).capture(...) and step_log=True (the default)"
        )
    if skipped:
        warn(f"recorder: {skipped} episode(s) without a step log are not in the LeRobot dataset")
    return episodes


def _frames(ep: _Episode, ei: int, start: int, task_index: int, rate: float,
            state_keys: list[tuple[str, int]], action_dim: int) -> Frames:  # fmt: skip
    """One episode's columns (numpy) and their statistics."""
    n = len(ep.rows)
    state = np.zeros((n, sum(d for _, d in state_keys)), np.float32)
    action = np.zeros((n, action_dim), np.float32)
    reward = np.zeros(n, np.float32)
    done = np.zeros(n, np.bool_)
    for i, row in enumerate(ep.rows):
        obs = row.get("observation") or {}
        if state_keys:
            layout = [(k, len(v)) for k, v in obs.items()]
            if layout != state_keys:
                raise ValueError(
                    f"episode {ep.record.index} step {i}: observation layout {layout} differs "
                    f"from the first step's {state_keys}"
                )
            state[i] = [x for v in obs.values() for x in v]
        act = _flat(row.get("action"))
        if len(act) != action_dim:
            raise ValueError(
                f"episode {ep.record.index} step {i}: action of {len(act)} values, the first step had {action_dim}"
            )
        action[i] = act
        reward[i] = float(row.get("reward", 0.0))
        done[i] = bool(row.get("terminated")) or bool(row.get("truncated"))
    frame_index = np.arange(n, dtype=np.int64)
    columns: dict[str, np.ndarray] = {}
    if state_keys:
        columns["observation.state"] = state
    columns.update(
        {
            "action": action,
            "next.reward": reward,
            "next.done": done,
            "timestamp": (frame_index / rate).astype(np.float32),
            "frame_index": frame_index,
            "episode_index": np.full(n, ei, np.int64),
            "index": np.arange(start, start + n, dtype=np.int64),
            "task_index": np.full(n, task_index, np.int64),
        }
    )
    stats = {k: _stats(v) for k, v in columns.items()}
    return Frames(ei, n, start, ep.task, task_index, columns, stats, ep.record)


def export_lerobot(
    result_set: ResultSet,
    bundle: Any,
    path: Any,
    *,
    fps: float | None = None,
    robot_type: str | None = None,
    version: str = CODEBASE_VERSION,
) -> Path:
    """Write the episodes of ``result_set`` (files read from ``bundle``) as a LeRobot dataset at ``path``.

    ``version``: ``"v3.0"`` (default) or ``"v2.1"`` (the layout of LeRobot before 0.4).

    Raises:
        DependencyMissing: pyarrow is not installed (``pip install ".[lerobot]"``).
        FileExistsError: ``path`` exists and is not an empty folder.
        ValueError: no episode has a step log, the step logs disagree on the state or
            action layout, the bundle mixes frame rates, or an unknown ``version``.
    """
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {list(VERSIONS)}, got {version!r}")
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise DependencyMissing(
            'ResultSet.to_lerobot needs pyarrow: pip install ".[lerobot]" (or pip install pyarrow)',
            name="pyarrow",
        ) from None
    target = Path(path)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(
            f"{target} exists and is not an empty folder; export the LeRobot dataset to a new path"
        )
    target.parent.mkdir(parents=True, exist_ok=True)

    with open_bundle(bundle) as src:
        episodes = _read_episodes(result_set, src)
        rate = _fps_of(episodes, fps)
        # the layouts, fixed by the first episode's first step
        first = episodes[0].rows[0]
        state_keys = [(k, len(v)) for k, v in (first.get("observation") or {}).items()]
        action_dim = len(_flat(first.get("action")))
        cameras = [c for c in episodes[0].media if all(c in ep.media for ep in episodes)]
        dropped = sorted({c for ep in episodes for c in ep.media} - set(cameras))
        if dropped:
            warn(
                f"recorder: camera(s) {dropped} are missing from some episodes; left out of the LeRobot dataset"
            )
        # the media file stem is the camera name made path-safe (and unique) by the recorder
        video_keys = {
            c: f"observation.images.{PurePosixPath(episodes[0].media[c].path).stem}"
            for c in cameras
        }
        features: dict[str, Any] = {}
        if state_keys:
            features["observation.state"] = {
                "dtype": "float32", "shape": [sum(d for _, d in state_keys)],
                "names": _names("state", state_keys),
            }  # fmt: skip
        features["action"] = {
            "dtype": "float32",
            "shape": [action_dim],
            "names": _names("action", [("action", action_dim)]),
        }
        for cam, key in video_keys.items():
            m = episodes[0].media[cam]
            features[key] = {
                "dtype": "video",
                "shape": [m.height, m.width, 3],
                "names": ["height", "width", "channels"],
                "info": {
                    "video.fps": rate, "video.height": m.height, "video.width": m.width, "video.channels": 3,
                    "video.codec": m.codec or "unknown", "video.pix_fmt": "yuv420p",
                    "video.is_depth_map": False, "has_audio": False,
                },
            }  # fmt: skip
        for name, dtype in (("next.reward", "float32"), ("next.done", "bool"), ("timestamp", "float32"),
                            ("frame_index", "int64"), ("episode_index", "int64"), ("index", "int64"),
                            ("task_index", "int64")):  # fmt: skip
            features[name] = {"dtype": dtype, "shape": [1], "names": None}

        tasks: dict[str, int] = {}
        layout = Layout(
            version, rate, robot_type, features,
            {key: (cam, [ep.media[cam].path for ep in episodes]) for cam, key in video_keys.items()},
        )  # fmt: skip
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            writer = layout.writer(tmp, src)
            start = 0
            for ei, ep in enumerate(episodes):
                frames = _frames(ep, ei, start, tasks.setdefault(ep.task, len(tasks)), rate,
                                 state_keys, action_dim)  # fmt: skip
                writer.add(frames)
                start += frames.length
            writer.finish(tasks)
            if target.is_dir():
                target.rmdir()  # empty (checked above): replaced by the finished dataset
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target
