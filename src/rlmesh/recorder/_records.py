"""The ``rlmesh.result.v1`` document: ``MediaRef``, ``EpisodeRecord``, ``WorkloadRecord``, ``ResultSet`` (REC-2, REC-8).

The document (what ``result.json`` holds)::

    {"schema": "rlmesh.result.v1", "resultSetId": str, "recordedAt": ISO-8601 UTC,
     "workloads": [{"model", "env", "task", "config", "numEpisodes",
                    "metrics": {"meanReward", "successRate", "totalSteps"},
                    "episodes": [{"index", "seed", "steps", "reward", "terminated",
                                  "truncated", "success", "durationS", "includedInMetrics",
                                  ["media": [{"camera", "kind", "path", "format",
                                              ["frameCount", "width", "height", "fps"]}]]}]}]}

Field names and layout are the reference's; what rlmesh adds lives under new keys only
(``stepLog`` on an episode, ``codec`` on a media row), so a reader of the reference's
bundles reads ours. ``meanReward`` and ``successRate`` count only episodes with
``includedInMetrics``; ``successRate`` is ``null`` when there are none or any of them
reported no outcome (DELTA-44, DELTA-52); ``totalSteps`` counts every episode.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..eval._results import EpisodeOutcome
from ._lerobot import export_lerobot
from ._reader import open_bundle

__all__ = [
    "SCHEMA",
    "EpisodeRecord",
    "MediaRef",
    "ResultSet",
    "WorkloadRecord",
    "json_safe",
    "sanitize_name",
]

#: The document schema tag (REC-8).
SCHEMA = "rlmesh.result.v1"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def sanitize_name(name: str) -> str:
    """A path component from any name: runs outside ``[A-Za-z0-9._-]`` become ``_`` (REC-7).

    ``._-`` are stripped from both ends; an empty result is ``"unnamed"``.

    >>> sanitize_name("image/primary"), sanitize_name("my model/x"), sanitize_name("..")
    ('image_primary', 'my_model_x', 'unnamed')
    """
    return _UNSAFE.sub("_", str(name)).strip("._-") or "unnamed"


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float (NaN, +-inf) replaced by ``None`` (JSON ``null``).

    ``result.json`` is RFC 8259 JSON: a NaN or infinite reward, mean or duration is
    written as ``null`` (as ``steps.jsonl`` does) and read back as NaN.

    >>> json_safe({"r": float("nan"), "xs": [1.0, float("-inf")], "ok": 2})
    {'r': None, 'xs': [1.0, None], 'ok': 2}
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _nan_if_null(value: Any) -> float:
    """A float field of the document: ``null`` is how a NaN/infinite value is written."""
    return math.nan if value is None else float(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class MediaRef:
    """One media file of an episode: a camera's video (REC-5, REC-8).

    Attributes:
        camera: The camera's name (a source label such as ``"render"`` or an image
            role, or the info key an env-produced video came from).
        kind: ``"video"``.
        path: POSIX path of the file relative to the bundle root (``media/...``).
        format: Container format, the file suffix (``"mp4"``).
        frame_count: Frames in the video (recorded cameras), else ``None``.
        width, height: Frame size in pixels (recorded cameras), else ``None``.
        fps: Nominal frame rate (the recorder's ``fps``), else ``None``.
        codec: The encoder used (``"av1"``, ``"h264"``, ``"lossless"``); rlmesh addition.
    """

    camera: str
    kind: str
    path: str
    format: str
    frame_count: int | None = None
    width: int | None = None
    height: int | None = None
    fps: float | None = None
    codec: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The media row of ``rlmesh.result.v1`` (optional keys only when known)."""
        out: dict[str, Any] = {
            "camera": self.camera,
            "kind": self.kind,
            "path": self.path,
            "format": self.format,
        }
        for key, value in (
            ("frameCount", self.frame_count),
            ("width", self.width),
            ("height", self.height),
            ("fps", self.fps),
            ("codec", self.codec),
        ):
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MediaRef:
        """Parse a media row (unknown keys are ignored)."""
        return cls(
            camera=str(d["camera"]),
            kind=str(d.get("kind", "video")),
            path=str(d["path"]),
            format=str(d.get("format", "")),
            frame_count=_opt_int(d.get("frameCount")),
            width=_opt_int(d.get("width")),
            height=_opt_int(d.get("height")),
            fps=_opt_float(d.get("fps")),
            codec=None if d.get("codec") is None else str(d["codec"]),
        )


@dataclass(frozen=True)
class EpisodeRecord(EpisodeOutcome):
    """One episode of a workload: its outcome and media (REC-2, REC-8).

    Attributes:
        index: 0-based index within the workload (unique across the runs captured into it).
        seed, steps, reward, terminated, truncated, success, duration_s: As on
            :class:`rlmesh.EpisodeResult` (op latencies are dropped).
        included_in_metrics: Whether the workload's ``meanReward``/``successRate`` count it.
        media: The episode's videos.
        step_log: Bundle-relative path of the episode's ``steps.jsonl``, or ``None``
            (rlmesh addition, key ``stepLog``).
    """

    included_in_metrics: bool = True
    media: tuple[MediaRef, ...] = ()
    step_log: str | None = None

    @classmethod
    def from_result(
        cls,
        result: Any,
        *,
        index: int | None = None,
        included_in_metrics: bool = True,
        media: Iterable[MediaRef] = (),
        step_log: str | None = None,
    ) -> EpisodeRecord:
        """A record of an :class:`rlmesh.EpisodeResult`; ``index`` overrides the run's own."""
        return cls(
            index=int(result.index if index is None else index),
            seed=None if result.seed is None else int(result.seed),
            steps=int(result.steps),
            reward=float(result.reward),
            terminated=bool(result.terminated),
            truncated=bool(result.truncated),
            success=None if result.success is None else bool(result.success),
            duration_s=float(result.duration_s),
            included_in_metrics=bool(included_in_metrics),
            media=tuple(media),
            step_log=step_log,
        )

    def to_dict(self) -> dict[str, Any]:
        """The episode row of ``rlmesh.result.v1`` (``media`` only when there is some)."""
        out: dict[str, Any] = {
            "index": self.index,
            "seed": self.seed,
            "steps": self.steps,
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "success": self.success,
            "durationS": self.duration_s,
            "includedInMetrics": self.included_in_metrics,
        }
        if self.media:
            out["media"] = [m.to_dict() for m in self.media]
        if self.step_log is not None:
            out["stepLog"] = self.step_log
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EpisodeRecord:
        """Parse an episode row (unknown keys are ignored)."""
        success = d.get("success")
        return cls(
            index=int(d["index"]),
            seed=_opt_int(d.get("seed")),
            steps=int(d.get("steps", 0)),
            reward=_nan_if_null(d.get("reward", 0.0)),
            terminated=bool(d.get("terminated", False)),
            truncated=bool(d.get("truncated", False)),
            success=None if success is None else bool(success),
            duration_s=_nan_if_null(d.get("durationS", 0.0)),
            included_in_metrics=bool(d.get("includedInMetrics", True)),
            media=tuple(MediaRef.from_dict(m) for m in d.get("media") or ()),
            step_log=None if d.get("stepLog") is None else str(d["stepLog"]),
        )


@dataclass
class WorkloadRecord:
    """One model x env x task x config workload and its episodes (REC-2, REC-8).

    Attributes:
        model, env, task: Names (``task`` defaults to ``env``).
        config: Free-form settings of the workload (copied at creation).
        episodes: The episodes in order of completion.
    """

    model: str
    env: str
    task: str
    config: dict[str, Any] = field(default_factory=dict)
    episodes: list[EpisodeRecord] = field(default_factory=list)

    def _metric_episodes(self) -> list[EpisodeRecord]:
        return [e for e in self.episodes if e.included_in_metrics]

    @property
    def num_episodes(self) -> int:
        """Number of episodes (all of them, included in metrics or not)."""
        return len(self.episodes)

    @property
    def mean_reward(self) -> float:
        """Mean total reward of the episodes included in metrics (0.0 when none)."""
        eps = self._metric_episodes()
        return math.fsum(e.reward for e in eps) / len(eps) if eps else 0.0

    @property
    def success_rate(self) -> float | None:
        """Fraction of included episodes with ``success`` true; ``None`` when none or any lacks an outcome (DELTA-44)."""
        eps = self._metric_episodes()
        if not eps or any(e.success is None for e in eps):
            return None
        return sum(1 for e in eps if e.success) / len(eps)

    @property
    def total_steps(self) -> int:
        """Env steps over every episode."""
        return sum(e.steps for e in self.episodes)

    def to_dict(self) -> dict[str, Any]:
        """The workload row of ``rlmesh.result.v1`` with its metrics."""
        return {
            "model": self.model,
            "env": self.env,
            "task": self.task,
            "config": dict(self.config),
            "numEpisodes": self.num_episodes,
            "metrics": {
                "meanReward": self.mean_reward,
                "successRate": self.success_rate,
                "totalSteps": self.total_steps,
            },
            "episodes": [e.to_dict() for e in self.episodes],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkloadRecord:
        """Parse a workload row; the metrics are recomputed from the episodes."""
        env = str(d.get("env", ""))
        return cls(
            model=str(d.get("model", "")),
            env=env,
            task=str(d.get("task", env)),
            config=dict(d.get("config") or {}),
            episodes=[EpisodeRecord.from_dict(e) for e in d.get("episodes") or ()],
        )


@dataclass
class ResultSet:
    """A whole ``rlmesh.result.v1`` document: an id and its workloads (REC-8).

    ``ResultSet.load(path)`` reads an exported bundle (folder or zip) and remembers it
    (``bundle_path``) for :meth:`to_lerobot`.
    """

    result_set_id: str
    workloads: list[WorkloadRecord] = field(default_factory=list)
    #: The bundle this set was loaded from (``load``), where its media and step logs are.
    bundle_path: Path | None = field(default=None, init=False, repr=False, compare=False)

    def to_dict(self, *, recorded_at: str | None = None) -> dict[str, Any]:
        """The document, stamped with ``recorded_at`` (default: now, ISO-8601 UTC).

        Non-finite floats (a NaN or infinite reward, mean or duration) are ``None``
        (JSON ``null``), so the document is always RFC 8259 JSON; ``from_dict`` reads
        ``null`` back as NaN.
        """
        if recorded_at is None:
            from datetime import datetime, timezone

            recorded_at = datetime.now(timezone.utc).isoformat()
        doc: dict[str, Any] = json_safe(
            {
                "schema": SCHEMA,
                "resultSetId": self.result_set_id,
                "recordedAt": recorded_at,
                "workloads": [w.to_dict() for w in self.workloads],
            }
        )
        return doc

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ResultSet:
        """Parse a document.

        Raises:
            ValueError: ``d`` is not an ``rlmesh.result.v1`` document.
        """
        if not isinstance(d, Mapping) or d.get("schema") != SCHEMA:
            got = d.get("schema") if isinstance(d, Mapping) else type(d).__name__
            raise ValueError(f"not an {SCHEMA} document (schema={got!r})")
        return cls(
            result_set_id=str(d.get("resultSetId", "")),
            workloads=[WorkloadRecord.from_dict(w) for w in d.get("workloads") or ()],
        )

    @classmethod
    def load(cls, path: Any) -> ResultSet:
        """Read the document of an exported bundle (a folder or a ``.zip``)."""
        with open_bundle(path) as bundle:
            out = cls.from_dict(bundle.document())
        out.bundle_path = Path(path)
        return out

    def to_lerobot(
        self,
        path: Any,
        *,
        bundle: Any = None,
        fps: float | None = None,
        robot_type: str | None = None,
        version: str = "v3.0",
    ) -> Path:
        """Write the episodes as a LeRobot-format dataset (v3.0 layout) at ``path``; see docs/recording.md.

        Rows (``observation.state``, ``action``, ``next.reward``, ``next.done``,
        ``timestamp``, ``frame_index``, ``episode_index``, ``index``, ``task_index``) in
        ``data/chunk-000/file-000.parquet``, each camera's video per episode under
        ``videos/<key>/``, ``meta/info.json`` (features, fps), ``meta/stats.json``,
        ``meta/tasks.parquet`` and ``meta/episodes/``: what current LeRobot
        (``LeRobotDataset``) reads. ``version="v2.1"`` writes the older layout instead
        (a Parquet file per episode, ``meta/*.jsonl``). Needs the ``lerobot`` extra (pyarrow).

        Args:
            path: A new (or empty) folder for the dataset.
            bundle: The bundle holding the step logs and videos (default: the one
                :meth:`load` read).
            fps: The dataset's frame rate (default: the videos' / step logs' own).
            robot_type: Written to ``meta/info.json``.
            version: ``"v3.0"`` (default) or ``"v2.1"``.

        Raises:
            ValueError: no bundle to read from, or nothing exportable (see the message).
            FileExistsError: ``path`` exists and is not an empty folder.
            DependencyMissing: pyarrow is not installed.
        """
        source = bundle if bundle is not None else self.bundle_path
        if source is None:
            raise ValueError(
                "this ResultSet was not loaded from a bundle: export it first (Recorder.export) and use "
                "ResultSet.load(bundle).to_lerobot(path), or pass bundle="
            )
        return export_lerobot(self, source, path, fps=fps, robot_type=robot_type, version=version)
