"""``Recorder``: collect eval results and their videos into an ``rlmesh.result.v1`` bundle (REC-1..9)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._spawn.host import tree_size
from ._bundle import archive_mode, dumps_document, write_bundle
from ._capture import CaptureHooks, parse_record, warn
from ._encode import CODECS, EncoderProcess, EncoderSpec, VideoWriter, encoder_spec
from ._html import build_index
from ._journal import STAGING_PREFIX, Journal, finished_episodes, orphans
from ._reader import open_inside
from ._records import EpisodeRecord, MediaRef, ResultSet, WorkloadRecord, json_safe

if TYPE_CHECKING:
    from ..eval._hooks import RunContext, RunHooks
    from ..eval._results import EpisodeResult, RunResult

__all__ = ["Recorder"]

#: Writers allowed to finish in the background before an episode end waits for the oldest.
MAX_FINISHING = 4

#: Video frame rate when neither ``Recorder(fps=)`` nor the env's ``render_fps`` says.
DEFAULT_FPS = 30

_warned_orphans: set[str] = set()  # staging parents already checked in this process


class Recorder:
    """Collect eval results, with a video per camera per episode, into a result bundle.

    ``add(result, ...)`` records a finished :class:`~rlmesh.RunResult` (metrics only);
    ``capture(...)`` returns :class:`~rlmesh.RunHooks` that record a run as it happens,
    video included. ``export(path)`` writes the bundle: ``result.json``
    (``rlmesh.result.v1``), the media and a static ``index.html``, to a folder or a zip.

    Args:
        result_set_id: The document's id (default: a random uuid4 hex).
        fps: Frame rate of the videos (an int >= 1). ``None`` (default): the env's
            ``metadata["render_fps"]`` (rounded to a whole number) when it declares one,
            else 30.
        quality: 1..100; higher is better and larger.
        codec: ``"av1"`` (default, SVT-AV1), ``"h264"`` (plays everywhere) or
            ``"lossless"`` (RGB, pixel exact).
        drop_frames_ok: Never make the run wait for the encoder: a frame that finds the
            encoder's queue full is dropped. By default no frame is dropped.
        queue_frames: Frames buffered per camera between the run and the encoder.
        staging_dir: Where the staging dir ``rlmesh-recorder-*`` is made (default: the
            temp dir). Put it on a disk that outlives the machine's temp dir when a
            killed run must stay recoverable (see :func:`rlmesh.recorder.recover`).

    What survives a crash: each finished episode's record is appended to the staging
    dir's ``journal.jsonl`` beside its media as it finishes. When the ``with`` block
    ends with an exception (a crashed env, a dead server, Ctrl-C), the staging dir is
    kept as a partial bundle and ``export`` still works; after a ``kill -9``,
    :func:`rlmesh.recorder.recover` rebuilds the bundle from it.

    Raises:
        ValueError: ``fps``, ``quality``, ``codec`` or ``queue_frames`` out of range.

    Example::

        with rlmesh.Recorder() as rec:
            hooks = rec.capture(model="policy-v3", env="CartPole-v1")
            rlmesh.run(model, env, seeds=range(10), hooks=hooks)
            rec.export("results/cartpole")
    """

    def __init__(
        self,
        *,
        result_set_id: str | None = None,
        fps: int | None = None,
        quality: int = 60,
        codec: str = "av1",
        drop_frames_ok: bool = False,
        queue_frames: int = 8,
        staging_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if fps is not None and (isinstance(fps, bool) or not isinstance(fps, int) or fps < 1):
            raise ValueError(f"Recorder fps must be an integer >= 1; got {fps!r}")
        if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
            raise ValueError(f"Recorder quality must be an integer in 1..100; got {quality!r}")
        if codec not in CODECS:
            raise ValueError(f"Recorder codec must be one of {CODECS}; got {codec!r}")
        if isinstance(queue_frames, bool) or not isinstance(queue_frames, int) or queue_frames < 1:
            raise ValueError(f"Recorder queue_frames must be an integer >= 1; got {queue_frames!r}")
        if result_set_id is not None and not isinstance(result_set_id, str):
            raise TypeError(f"result_set_id must be a str, got {type(result_set_id).__name__}")
        self._set = ResultSet(result_set_id or uuid.uuid4().hex)
        self._fps_given = fps
        self.fps = DEFAULT_FPS if fps is None else fps
        self.quality = quality
        self.codec = codec
        self.drop_frames_ok = bool(drop_frames_ok)
        self.queue_frames = queue_frames
        self._staging_dir = None if staging_dir is None else Path(staging_dir)
        self._journal: Journal | None = None
        self._journaled = 0  # episodes in the journal since the last export
        self._spec: EncoderSpec | None = None
        self._proc: EncoderProcess | None = None
        self._proc_error = "the encoder process is not available"
        self._staging: Path | None = None
        self._closed = False
        self._finishing: list[tuple[WorkloadRecord, int, str, VideoWriter]] = []
        # A recorder dropped without close(): stop its encoder, delete its staging dir.
        self._owned: dict[str, Any] = {}
        self._finalizer = weakref.finalize(self, _release, self._owned)

    # -- properties ----------------------------------------------------------------------

    @property
    def result_set_id(self) -> str:
        """The document's ``resultSetId``."""
        return self._set.result_set_id

    @property
    def workloads(self) -> tuple[WorkloadRecord, ...]:
        """The workloads in the order they were started."""
        return tuple(self._set.workloads)

    @property
    def result_set(self) -> ResultSet:
        """The document as a :class:`ResultSet` (videos still encoding are waited for)."""
        self._settle()
        return self._set

    # -- recording -----------------------------------------------------------------------

    def _new_workload(
        self, model: str, env: str, task: str | None, config: Any
    ) -> tuple[WorkloadRecord, int]:
        if self._closed:
            raise RuntimeError("Recorder is closed; create a new Recorder to record more")
        for name, value in (("model", model), ("env", env)):
            if not isinstance(value, str):
                raise TypeError(
                    f"{name} must be a str naming the {name}, got {type(value).__name__}"
                )
        if task is not None and not isinstance(task, str):
            raise TypeError(f"task must be a str or None, got {type(task).__name__}")
        if config is not None and not isinstance(config, dict):
            raise TypeError(f"config must be a dict or None, got {type(config).__name__}")
        workload = WorkloadRecord(
            model=model, env=env, task=env if task is None else task, config=dict(config or {})
        )
        self._set.workloads.append(workload)
        ordinal = len(self._set.workloads) - 1
        if self._journal is not None:
            self._journal.workload(ordinal, workload)
        return workload, ordinal

    def add(
        self,
        result: RunResult,
        *,
        model: str,
        env: str,
        task: str | None = None,
        config: dict[str, Any] | None = None,
        included_in_metrics: bool = True,
    ) -> WorkloadRecord:
        """Record a finished run as a new workload, metrics only (REC-2).

        Episodes are re-numbered ``0..`` within the workload; ``task`` defaults to
        ``env``; ``config`` is copied.
        """
        episodes = getattr(result, "episodes", None)
        if episodes is None:
            raise TypeError(f"add() takes a rlmesh.RunResult, got {type(result).__name__}")
        workload, ordinal = self._new_workload(model, env, task, config)
        for i, ep in enumerate(episodes):
            record = EpisodeRecord.from_result(ep, index=i, included_in_metrics=included_in_metrics)
            workload.episodes.append(record)
            if self._journal is not None:
                self._journal.episode(ordinal, record)
        return workload

    def capture(
        self,
        *,
        model: str,
        env: str,
        task: str | None = None,
        config: dict[str, Any] | None = None,
        cameras: Sequence[str] | None = None,
        session: RunContext | None = None,
        video_info_keys: tuple[str, ...] = ("video_artifact_path", "video_url"),
        included_in_metrics: bool = True,
        record: str | Callable[[EpisodeResult], bool] = "all",
        step_log: bool = True,
        env_video_dirs: Sequence[str | os.PathLike[str]] | None = None,
    ) -> RunHooks:
        """Start a workload and return the hooks that record a run into it (REC-3).

        Pass the hooks to ``rlmesh.run``/``Model.run``/``Session.run`` as ``hooks=``;
        several runs with the same hooks add to the same workload with unique episode
        indices.

        Args:
            model, env, task, config: The workload's names and settings.
            cameras: ``None`` discovers the env's cameras (its rgb ``render()`` first,
                then its declared image roles, as the viewer does); ``[]`` records
                metrics only; a list names roles and/or ``"render"``.
            session: Where cameras are read (default: the run's own context).
            video_info_keys: Info keys whose string value is a video file the env wrote.
            included_in_metrics: Whether the workload's metrics count these episodes.
            record: Which episodes keep their media: ``"all"``, ``"failures"``,
                ``"successes"``, ``"first:N"`` or a callable on the ``EpisodeResult``.
            step_log: Write a ``steps.jsonl`` per episode (rlmesh addition).
            env_video_dirs: Where an env-reported video (``video_info_keys``) may be
                copied from: ``None`` (default) is the working directory at this call,
                ``[]`` turns env videos off. Only a complete MP4/MOV/WebM/Matroska file
                (checked by content) reached without a symlink is copied, so an env cannot
                make the recorder copy any other file into the bundle.
        """
        policy = parse_record(record)
        if env_video_dirs is None:
            video_dirs: tuple[Path, ...] = (Path.cwd().resolve(),)
        elif isinstance(env_video_dirs, (str, os.PathLike)):
            raise TypeError("env_video_dirs must be a list of directories (or [] / None)")
        else:
            video_dirs = tuple(Path(d).resolve() for d in env_video_dirs)
        if isinstance(video_info_keys, str) or not all(isinstance(k, str) for k in video_info_keys):
            raise TypeError("video_info_keys must be a tuple of info key strings")
        if cameras is not None and (
            isinstance(cameras, str) or not all(isinstance(c, str) for c in cameras)
        ):
            raise TypeError(
                "cameras must be a list of camera names (roles or 'render'), [] or None"
            )
        if cameras is None or cameras:
            if cameras:
                self._encoder()  # fail now, not mid-run, without PyAV
            self._start_encoder()  # boot the encoder process while the run connects
        self._ensure_staging()  # the crash journal starts before the first episode
        workload, ordinal = self._new_workload(model, env, task, config)
        return CaptureHooks(
            self,
            workload,
            ordinal,
            cameras=cameras,
            session=session,
            video_info_keys=tuple(video_info_keys),
            included_in_metrics=included_in_metrics,
            policy=policy,
            step_log=bool(step_log),
            env_video_dirs=video_dirs,
        )

    # -- used by the capture hooks -----------------------------------------------------------

    def _encoder(self) -> EncoderSpec:
        if self._spec is None:
            self._spec = encoder_spec(self.codec, self.quality)
        return self._spec

    def _start_encoder(self) -> EncoderProcess | None:
        """The encoder process, started now if PyAV is there (``None`` otherwise)."""
        if self._proc is None or self._proc.dead is not None:
            try:
                self._encoder()
            except (ImportError, ValueError):
                return None
            try:
                self._proc = self._owned["proc"] = EncoderProcess()
            except (OSError, ValueError) as exc:  # no subprocess / pipes here
                self._proc_error = (
                    f"could not start the encoder process: {type(exc).__name__}: {exc}"
                )
                return None
        return self._proc

    def _encoder_ready(self) -> None:
        """Wait for a started encoder process to be ready (no-op when none was started)."""
        if self._proc is not None and self._proc.dead is None:
            self._proc.wait_ready()

    def _ensure_staging(self) -> Path:
        """The staging dir, made (with its journal) on first use."""
        if self._closed:
            raise RuntimeError("Recorder is closed")
        if self._staging is None:
            _warn_orphans(self._staging_dir)
            if self._staging_dir is not None:
                self._staging_dir.mkdir(parents=True, exist_ok=True)
            self._staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self._staging_dir))
            self._owned["staging"] = self._staging
            try:
                self._journal = Journal(self._staging, self.result_set_id)
            except OSError as exc:
                warn(
                    f"recorder: no crash journal in {self._staging} ({exc}); a killed run will not be recoverable"
                )
            else:
                for ordinal, w in enumerate(self._set.workloads):
                    self._journal.workload(ordinal, w)
                    for ep in w.episodes:
                        self._journal.episode(ordinal, ep)
        return self._staging

    def _staged(self, rel: str) -> Path:
        """The staging path of a bundle-relative file (the staging dir is made on first use)."""
        path = self._ensure_staging() / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _fps_for(self, context: Any) -> int:
        """The video fps of a run: ``Recorder(fps=)``, else the env's ``render_fps``, else 30."""
        if self._fps_given is not None:
            return self._fps_given
        try:
            metadata = getattr(getattr(context, "contract", None), "metadata", None) or {}
            value = float(metadata["render_fps"])
        except Exception:
            return self.fps
        return max(1, round(value)) if value == value and 0 < value < 10_000 else self.fps

    def _writer(self, path: Path, fps: int | None = None) -> VideoWriter:
        spec = self._encoder()
        proc = self._start_encoder()
        if proc is None:
            raise RuntimeError(self._proc_error)
        return VideoWriter(
            path,
            spec,
            fps=self.fps if fps is None else fps,
            encoder=proc,
            queue_frames=self.queue_frames,
            drop_frames_ok=self.drop_frames_ok,
        )

    def _append(
        self,
        workload: WorkloadRecord,
        result: EpisodeResult,
        index: int,
        included: bool,
        media: list[MediaRef],
        step_log: str | None,
    ) -> EpisodeRecord:
        record = EpisodeRecord.from_result(
            result, index=index, included_in_metrics=included, media=media, step_log=step_log
        )
        workload.episodes.append(record)
        if self._journal is not None:
            self._journal.episode(self._ordinal(workload), record)
            self._journaled += 1
            self._owned["dirty"] = True
        return record

    def _ordinal(self, workload: WorkloadRecord) -> int:
        return next(i for i, w in enumerate(self._set.workloads) if w is workload)

    def _pending_writer(
        self, workload: WorkloadRecord, index: int, rel: str, writer: VideoWriter
    ) -> None:
        """Track a writer finishing in the background; too many -> wait for the oldest."""
        self._finishing.append((workload, index, rel, writer))
        if self._proc is not None:
            with self._proc.lock:
                self._proc.pump(0)
        # forget the videos that completed fine; keep the busy ones and the failures for _settle
        self._finishing = [
            e for e in self._finishing if e[3].busy or e[3].error is not None or e[3].encoded == 0
        ]
        busy = [entry for entry in self._finishing if entry[3].busy]
        if len(busy) > MAX_FINISHING:
            busy[0][3].finish()

    def _settle(self) -> None:
        """Join the writers still finishing; a failed video is dropped from its episode."""
        finishing, self._finishing = self._finishing, []
        for workload, index, rel, writer in finishing:
            if writer.finish():
                continue
            warn(
                f"recorder: video {rel} failed to encode ({writer.error!r}); dropped from the bundle"
            )
            writer.discard()
            self._patch(workload, index, rel, lambda _m: None)
            if self._journal is not None:
                self._journal.drop(self._ordinal(workload), index, rel)

    @staticmethod
    def _patch(
        workload: WorkloadRecord, index: int, rel: str, fix: Callable[[MediaRef], MediaRef | None]
    ) -> None:
        for i, ep in enumerate(workload.episodes):
            if ep.index != index:
                continue
            media = []
            for m in ep.media:
                if m.path == rel:
                    fixed = fix(m)
                    if fixed is not None:
                        media.append(fixed)
                else:
                    media.append(m)
            workload.episodes[i] = dataclasses.replace(ep, media=tuple(media))

    # -- output --------------------------------------------------------------------------

    def to_dict(self, *, recorded_at: str | None = None) -> dict[str, Any]:
        """The ``rlmesh.result.v1`` document, stamped ``recorded_at`` (default now, REC-8/9)."""
        self._settle()
        return self._set.to_dict(recorded_at=recorded_at)

    def _has_media(self) -> bool:
        return any(ep.media or ep.step_log for w in self._set.workloads for ep in w.episodes)

    def export(
        self, path: str | Path, *, archive: bool | str | None = None, recorded_at: str | None = None
    ) -> Path:
        """Write the bundle to a folder or a zip and return its path (REC-9).

        ``archive``: ``True``/``"zip"`` -> zip; ``False``/``"folder"``/``"dir"`` -> folder;
        ``None`` -> zip when ``path`` ends in ``.zip``. A zip stores ``result.json``
        deflated and the media uncompressed. The new bundle is written beside the old
        one and swapped in last, so a failure (a full disk) leaves the old one intact;
        only an ``rlmesh.result.v1`` bundle is replaced, and a ``media/`` file its
        document does not name is never deleted (the export is refused). After the
        ``with`` block ended with an exception the kept staging dir still exports (and is
        deleted once exported).

        Raises:
            ValueError: an unknown ``archive``.
            FileExistsError: the destination is not a bundle this would safely replace.
            RuntimeError: the recorder was closed and its staged media are gone.
        """
        target = Path(path)
        as_zip = archive_mode(archive, target)
        document = self.to_dict(recorded_at=recorded_at)
        if self._closed and self._has_media() and self._staging is None:
            raise RuntimeError(
                "Recorder is closed and its staged media were deleted; export before close() "
                "(a recorder without media can still export)"
            )
        out = write_bundle(target, document, self._staging, as_zip=as_zip)
        self._journaled = 0
        self._owned["dirty"] = False
        if (
            self._closed and self._staging is not None
        ):  # kept after an exception; now safe in the bundle
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
            self._owned.pop("staging", None)
        return out

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def staging(self) -> Path | None:
        """The staging dir (``None`` before the first capture and after it was deleted)."""
        return self._staging

    def close(self) -> None:
        """Finish pending videos and delete the staging dir (idempotent)."""
        if self._closed:
            return
        try:
            self._settle()
        finally:
            self._closed = True
            self._proc = self._staging = None
            if self._journal is not None:
                self._journal.close()
            self._owned["closing"] = True  # an explicit close() deletes the staging dir (REC-7)
            self._finalizer()

    def _close_keeping(self, reason: str) -> None:
        """Close after a failure: finish the videos, keep the staging dir as a partial bundle."""
        staging = self._staging
        try:
            self._settle()
        finally:
            self._closed = True
            self._proc = None
            self._owned["keep"] = True
            if self._journal is not None:
                self._journal.close()
            self._finalizer()  # stops the encoder; the staging dir is kept
        assert staging is not None
        try:
            document = {**self._set.to_dict(), "partial": True}
            tmp = staging / ".result.json.tmp"
            tmp.write_text(dumps_document(document), "utf-8")
            os.replace(tmp, staging / "result.json")
            (staging / "index.html").write_text(
                build_index(json_safe(document), _staged_text(staging)), "utf-8"
            )
        except (OSError, ValueError, TypeError) as exc:
            warn(
                f"recorder: could not write the partial result.json into {staging} ({exc}); its journal remains"
            )
        warn(
            f"recorder: the run ended with {reason}; the {self._journaled} finished episode(s) not yet exported "
            f"are kept in {staging} (a partial bundle). Call rec.export(path), or from another process "
            f"rlmesh.recorder.recover({str(staging)!r}, path)"
        )

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if (
            exc_type is not None
            and not self._closed
            and self._staging is not None
            and self._journaled
        ):
            self._close_keeping(exc_type.__name__)
        else:
            self.close()

    def __repr__(self) -> str:
        return f"Recorder(result_set_id={self.result_set_id!r}, workloads={len(self._set.workloads)}, fps={self.fps})"


def _release(owned: dict[str, Any]) -> None:
    """Stop the encoder process and delete the staging dir (close() or garbage collection).

    The staging dir is kept when it holds finished episodes the user never got: after an
    exception (``keep``), or when the recorder is dropped without ``close()``/``export``.
    """
    proc = owned.pop("proc", None)
    staging = owned.pop("staging", None)
    try:
        if proc is not None:
            proc.stop()
    finally:
        if staging is not None:
            if owned.get("keep"):
                pass
            elif owned.get("dirty") and not owned.get("closing"):
                warn(
                    f"recorder: a Recorder was dropped without export() or close(); its finished episodes "
                    f"are kept in {staging}: rlmesh.recorder.recover({str(staging)!r}, path)"
                )
            else:
                shutil.rmtree(staging, ignore_errors=True)


def _staged_text(staging: Path) -> Callable[[str], str | None]:
    def read_text(rel: str) -> str | None:
        try:
            with open_inside(staging, rel) as fh:
                return fh.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return None

    return read_text


def _warn_orphans(directory: Path | None) -> None:
    """Once per directory and process: say when killed recorder runs left finished episodes behind.

    Staging dirs of dead runs that hold no finished episode (a run killed before its first
    episode ended) have nothing to recover: they are not worth a warning on every start.
    """
    key = str(directory or tempfile.gettempdir())
    if key in _warned_orphans:
        return
    _warned_orphans.add(key)
    try:
        counted = [(d, finished_episodes(d)) for d in orphans(directory)]
    except Exception:
        return
    found = [d for d, episodes in counted if episodes]
    if found:
        episodes = sum(n for _, n in counted)
        size = sum(tree_size(d) for d in found)
        warn(
            f"recorder: {len(found)} staging dir(s) of recorder runs that never exported hold {episodes} "
            f"finished episode(s) ({size / 1e6:.1f} MB) in {found[0].parent} (oldest: {found[0].name}). "
            "rlmesh.recorder.orphans() lists them, rlmesh.recorder.recover(dir, path) turns one into a "
            "bundle; delete the ones you do not need"
        )
