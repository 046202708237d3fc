"""The hooks ``Recorder.capture`` returns: cameras, videos, step logs, env videos (REC-3..5, DELTA-52).

Per run: the cameras are resolved on the first step (``cameras=None`` -> the viewer's
discovery, VIEW-3; an explicit list -> those names; ``[]`` -> metrics only). A vector
env with cameras is refused in ``on_run_start`` (frames come from a single env).

Per step: each live camera's frame is fetched, normalised (VIEW-7) and pushed to that
camera's writer for the episode (opened lazily at the first frame). A fetch that raises
or returns a non-image skips that frame only; a camera whose fetch fails a few times in a
row, or fails for a reason the next frame cannot heal (a missing package such as pygame,
an undeclared role), an encoder error or a resolution change drops the camera for the
rest of the run with one warning that names the cause and the fix
(:mod:`rlmesh.view._faults`). One ``steps.jsonl`` line is
buffered per step. The first ``video_info_keys`` key holding a non-empty string names an
env-produced video.

Per episode end: the selection policy (``record=``) decides whether the episode keeps its
media; kept videos become media rows (the writers finish in the background and are
joined at run end), the env video is copied into staging at once, the step log is
written. Nothing here may abort an eval: every failure becomes a warning, and a
warning can never raise (REC-4).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from .._metadata import sanitize_metadata
from ..adapters import Image
from ..eval._hooks import RunHooks
from ..view._faults import FAILURES_IN_A_ROW, camera_fault, is_lasting
from ..view._sources import context_env, discover_sources, normalize_frame, render_thunk
from ._encode import VideoWriter
from ._lerobot import observation_state
from ._reader import open_inside, sniff_video
from ._records import MediaRef, WorkloadRecord, sanitize_name
from ._warn import warn

if TYPE_CHECKING:
    from ..eval._hooks import RunContext, StepEvent
    from ..eval._results import EpisodeResult, RunResult
    from ._recorder import Recorder

__all__ = ["RecordPolicy", "parse_record", "warn"]

_SCALARS = (bool, int, float, str, type(None))

#: Info keys the client adds to every step (not the env's data): kept out of ``steps.jsonl``.
RUNTIME_INFO_KEYS = frozenset({"episode_ids", "completed_episodes"})


# -- record= policy ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordPolicy:
    """Which episodes keep their media: ``all``, ``failures``, ``successes``, ``first:N`` or a callable."""

    kind: str
    first: int = 0
    predicate: Callable[[Any], bool] | None = None

    def wants_frames(self, index: int) -> bool:
        """Whether episode ``index`` of the workload can be kept at all (skip capture if not)."""
        return self.kind != "first" or index < self.first

    def keeps(self, result: EpisodeResult) -> bool:
        """Decide at episode end; a success is ``success`` when reported, else ``terminated``."""
        if self.kind == "all" or self.kind == "first":
            return True
        succeeded = result.success if result.success is not None else result.terminated
        if self.kind == "failures":
            return not succeeded
        if self.kind == "successes":
            return bool(succeeded)
        assert self.predicate is not None
        return bool(self.predicate(result))


def parse_record(record: object) -> RecordPolicy:
    """Validate ``record=``.

    >>> parse_record("first:3")
    RecordPolicy(kind='first', first=3, predicate=None)

    Raises:
        ValueError: an unknown string or a bad ``first:N``.
        TypeError: neither a string nor a callable.
    """
    if callable(record):
        return RecordPolicy("callable", predicate=record)
    if not isinstance(record, str):
        raise TypeError(
            f"record must be a str or a callable on the EpisodeResult, got {type(record).__name__}"
        )
    text = record.strip().lower()
    if text in ("all", "failures", "successes"):
        return RecordPolicy(text)
    if text.startswith("first:"):
        n = text[6:].strip()
        if n.isdigit() and int(n) >= 1:
            return RecordPolicy("first", first=int(n))
    raise ValueError(
        f"record={record!r}: expected 'all', 'failures', 'successes', 'first:N' (N >= 1) "
        "or a callable taking the EpisodeResult"
    )


# -- cameras -----------------------------------------------------------------------------------


@dataclass
class _Camera:
    """A camera: ``fetch(observation, read)`` -> the raw frame.

    ``after_step``: the frame shows the env *after* the step (``render()``: pushed at
    ``step + 1``, with the reset frame at 0); otherwise it is the observation the action
    was predicted from (pushed at ``step``).
    """

    label: str
    fetch: Callable[[Any, Callable[[object], object]], Any]
    after_step: bool = False
    explicit_role: bool = False  # an undeclared role name: a resolution error drops it
    produced: bool = False
    dead: bool = False
    failures: int = 0  # failed reads in a row
    last_error: BaseException | None = None


def _resolve_cameras(context: Any, cameras: Sequence[str] | None) -> list[_Camera]:
    """Discovery (``None``) or the explicit names, through the viewer's sources (VIEW-3, REC-3).

    An explicit role name is read through the step event's ``read`` (the run's
    ``Session.read`` bound to the observation), so it needs no discovery and no
    ``session=``; only ``"render"`` needs the run's env.
    """
    if cameras is None:
        return [_source_camera(s) for s in discover_sources(context)]
    try:
        found = discover_sources(context) if context is not None else ()
    except Exception:
        found = ()
    by_label = {s.label: s for s in found}
    # no contract to discover from (hooks run without a session): "render" may still be a
    # declared role, which only the step's read can tell (REC-3: the role wins)
    blind = getattr(context, "contract", None) is None
    out: list[_Camera] = []
    for name in cameras:
        name = str(name)
        if name in by_label:  # "render" is a declared role named render if any, else render()
            out.append(_source_camera(by_label[name], label=name))
        elif name == "render" and blind:
            thunk = render_thunk(context_env(context))
            out.append(
                _Camera(name, _role_or_render(Image(name, layout="hwc"), thunk), explicit_role=True)
            )
        elif name in ("render", "render()"):
            env = context_env(context)
            thunk = render_thunk(env)
            if thunk is None:
                out.append(_Camera(name, _no_render, explicit_role=True))
            else:
                out.append(_Camera(name, _render_fetch(thunk), after_step=True))
        else:
            out.append(_Camera(name, _role_fetch(Image(name, layout="hwc")), explicit_role=True))
    return out


def _source_camera(source: Any, label: str | None = None) -> _Camera:
    fetch = source.fetch
    return _Camera(
        label or source.label, lambda obs, _read: fetch(obs, 0), after_step=source.kind == "render"
    )


def _render_fetch(thunk: Callable[[int], Any]) -> Callable[[Any, Any], Any]:
    return lambda _obs, _read: thunk(0)


def _role_fetch(item: Any) -> Callable[[Any, Any], Any]:
    return lambda _obs, read: read(item)


def _role_or_render(item: Any, thunk: Callable[[int], Any] | None) -> Callable[[Any, Any], Any]:
    """The role named render when the observation has one, else ``render()`` (decided once)."""
    use_render: list[bool] = []

    def fetch(_obs: Any, read: Any) -> Any:
        if use_render:
            return thunk(0) if use_render[0] and thunk is not None else read(item)
        try:
            frame = read(item)
        except Exception:
            if thunk is None:
                raise
            use_render.append(True)  # no such role: the env's render() it is
            return thunk(0)
        use_render.append(False)
        return frame

    return fetch


def _no_read(_item: object) -> object:
    raise ValueError("no observation to read at reset")


class _Unreachable(ValueError):
    """A camera with nothing to read from (no env here, or one without ``render()``)."""


def _no_render(_obs: Any, _read: Any) -> Any:
    raise _Unreachable(
        "the run's env is not reachable here, or has no render() method "
        "(pass session= to capture() when the hooks run away from the env)"
    )


#: How to go on without a camera, in the recorder's words.
_LEAVE_OUT = "leave it out of cameras= (cameras=[] records metrics only)"


# -- per-episode state ---------------------------------------------------------------------------


@dataclass
class _Episode:
    index: int
    rel_dir: str
    capture: bool
    writers: dict[str, VideoWriter] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # camera -> unique file stem
    lines: list[bytes] = field(default_factory=list)
    env_video: tuple[str, str] | None = None  # (info key, path)
    last_pts: dict[str, int] = field(default_factory=dict)  # camera -> the last frame's stamp

    def stem(self, camera: str) -> str:
        """A file stem unique within the episode: sanitized, ``-2``, ``-3`` ... on collision (REC-7)."""
        if camera not in self.names:
            base = sanitize_name(camera)
            taken = set(self.names.values())
            stem, n = base, 1
            while stem in taken or stem == "steps":
                n += 1
                stem = f"{base}-{n}"
            self.names[camera] = stem
        return self.names[camera]


def _open_env_video(raw: str, allowed: Sequence[Path]) -> tuple[IO[bytes], str] | str:
    """Open an env-reported video: a complete video container under an allowed dir (issue 28).

    Returns the open file and its container (``"mp4"``, ``"webm"`` ...) recognised by
    content, or why it is refused. The path is opened one component at a time from the
    allowed dir without following any symlink, and must be a regular file.
    """
    if "\x00" in raw:
        return "its path holds a NUL byte"
    path = Path(raw)
    for base in allowed:
        candidate = Path(os.path.normpath(path if path.is_absolute() else base / path))
        try:
            rel = candidate.relative_to(base)
        except ValueError:
            continue
        if not rel.parts:
            continue
        try:
            fh = open_inside(base, rel.as_posix())
        except (OSError, ValueError):
            return "it is not a readable regular file (symlinks are not followed)"
        try:
            kind = sniff_video(fh, os.fstat(fh.fileno()).st_size)
            fh.seek(0)
        except OSError:
            kind = None
        if kind is None:
            fh.close()
            return "it is not a complete MP4/MOV/WebM/Matroska video (checked by content)"
        return fh, kind
    where = ", ".join(str(b) for b in allowed) or "nowhere (env_video_dirs=[])"
    return f"it is not under an allowed directory ({where})"


class CaptureHooks(RunHooks):
    """``RunHooks`` that record one workload of a :class:`~rlmesh.recorder.Recorder` (REC-3)."""

    def __init__(
        self,
        recorder: Recorder,
        workload: WorkloadRecord,
        ordinal: int,
        *,
        cameras: Sequence[str] | None,
        session: RunContext | None,
        video_info_keys: tuple[str, ...],
        included_in_metrics: bool,
        policy: RecordPolicy,
        step_log: bool,
        env_video_dirs: tuple[Path, ...] = (),
    ) -> None:
        self._rec = recorder
        self._video_dirs = env_video_dirs
        self._fps = recorder.fps
        self._workload = workload
        self._ordinal = ordinal
        self._cameras_arg = None if cameras is None else tuple(str(c) for c in cameras)
        self._session = session
        self._video_keys = tuple(video_info_keys)
        self._included = included_in_metrics
        self._policy = policy
        self._step_log = step_log
        self._base = (
            f"media/w{ordinal:03d}-{sanitize_name(workload.model)}/{sanitize_name(workload.task)}"
        )
        self._context: Any = None
        self._cams: list[_Camera] | None = None
        self._episodes: dict[int, _Episode] = {}
        self._encode: Callable[[Any], bytes] | None = None  # json encoder, made on first use

    # -- run ---------------------------------------------------------------------------------

    def on_run_start(self, context: RunContext) -> None:
        self._context = self._session if self._session is not None else context
        self._cams = None
        self._episodes.clear()
        self._fps = self._rec._fps_for(self._context)
        if self._cameras_arg == ():
            self._cams = []
            return
        try:
            lanes = int(getattr(self._context, "num_envs", 1))
        except Exception:
            lanes = 1
        if lanes > 1:
            wanted = self._cameras_arg
            if wanted is None:
                wanted = tuple(s.label for s in discover_sources(self._context))
            if wanted:
                raise ValueError(
                    f"recorder captures frames from a single env: this env drives num_envs={lanes} "
                    f"lanes and the cameras {list(wanted)} cannot be told apart per episode. "
                    "Pass cameras=[] to record metrics only."
                )
            self._cams = []
            return
        # Before the first reset (outside every episode's clock): the encoder process is up.
        self._rec._encoder_ready()

    def _resolve(self) -> list[_Camera]:
        try:
            cams = _resolve_cameras(self._context, self._cameras_arg)
        except Exception as exc:
            warn(
                f"recorder: camera discovery failed ({type(exc).__name__}: {exc}); recording metrics only"
            )
            cams = []
        if not cams and self._cameras_arg is None:
            warn(
                "recorder: no render() or image roles discovered (the env has no rgb render mode "
                "and declares no image role); recording metrics only"
            )
        self._cams = cams
        return cams

    def on_episode_start(self, *, episode: int, seed: int | None) -> None:
        # Indices are the order of completion within the workload: 0, 1, 2 ... with no hole
        # for an aborted episode. A single env completes episodes in start order, so this
        # guess is the final index; vector lanes (metrics only) are renumbered at the end.
        index = len(self._workload.episodes) + len(self._episodes)
        ep = self._episodes[episode] = _Episode(
            index=index,
            rel_dir=f"{self._base}/ep{index:05d}",
            capture=self._policy.wants_frames(index),
        )
        if not ep.capture:
            return
        cams = self._cams if self._cams is not None else self._resolve()
        for cam in cams:  # the reset frame of the cameras that show the env after a step
            if cam.after_step and not cam.dead:
                self._frame(ep, cam, None, 0, _no_read)

    def on_step(self, event: StepEvent) -> None:
        ep = self._episodes.get(event.episode)
        if ep is None:
            return
        if self._video_keys and event.info:
            for key in self._video_keys:
                value = event.info.get(key)
                if isinstance(value, str) and value:
                    ep.env_video = (key, value)
                    break
        if not ep.capture:
            return
        cams = self._cams if self._cams is not None else self._resolve()
        for cam in cams:
            if not cam.dead:
                pts = event.step + 1 if cam.after_step else event.step
                self._frame(ep, cam, event.observation, pts, event.read)
        if self._step_log:
            self._log(ep, event)

    def _frame(
        self, ep: _Episode, cam: _Camera, obs: Any, pts: int, read: Callable[[object], object]
    ) -> None:
        try:
            frame = normalize_frame(cam.fetch(obs, read))
        except Exception as exc:
            cam.failures += 1
            cam.last_error = exc
            if cam.explicit_role and not cam.produced and isinstance(exc, _Unreachable):
                cam.dead = True
                warn(f"recorder: camera {cam.label!r} cannot be read ({exc}); not recording it")
            elif is_lasting(exc) or cam.failures >= FAILURES_IN_A_ROW:
                cam.dead = True  # say why once, and how to fix it
                text = camera_fault("recorder", cam.label, exc, leave_out=_LEAVE_OUT)
                if cam.explicit_role and not cam.produced:
                    text += f" (camera {cam.label!r} cannot be read)"
                warn(text)
            return  # a transient read failure skips this frame only
        cam.failures = 0
        if frame is None or frame.shape[0] < 2 or frame.shape[1] < 2:
            return
        last = ep.last_pts.get(cam.label, -1)
        if pts <= last:  # a repeated step's stamp: the next slot, so every frame is kept
            pts = last + 1
        writer = ep.writers.get(cam.label)
        try:
            if writer is None:
                path = self._rec._staged(f"{ep.rel_dir}/{ep.stem(cam.label)}.mp4")
                writer = self._rec._writer(path, self._fps)
                ep.writers[cam.label] = writer
            if writer.error is not None:
                raise writer.error
            writer.push(frame, pts)
            ep.last_pts[cam.label] = pts
            cam.produced = True
        except Exception as exc:
            cam.dead = True
            ep.writers.pop(cam.label, None)
            if writer is not None:
                writer.discard()
            warn(
                f"recorder: camera {cam.label!r} disabled for the rest of the run: {type(exc).__name__}: {exc}"
            )

    def _log(self, ep: _Episode, event: StepEvent) -> None:
        try:
            encode = self._encode
            if encode is None:
                import msgspec

                encode = self._encode = msgspec.json.Encoder().encode
            info = event.info
            scalars = {}
            if info:
                for k, v in sanitize_metadata(info).items():
                    if k in RUNTIME_INFO_KEYS or k.startswith("rlmesh."):
                        continue
                    if isinstance(v, _SCALARS) and not (isinstance(v, float) and v != v):
                        scalars[k] = v
            action = event.action
            tolist = getattr(action, "tolist", None)
            if callable(tolist):
                action = tolist()
            elif isinstance(action, (Mapping, list, tuple)):
                action = sanitize_metadata({"a": action})["a"]
            elif not isinstance(action, _SCALARS):
                action = str(action)
            fps = self._fps
            ep.lines.append(
                encode(
                    {
                        "step": event.step,
                        "t": event.step / fps,
                        "reward": event.reward,
                        "terminated": event.terminated,
                        "truncated": event.truncated,
                        "action": action,
                        "observation": observation_state(
                            event.observation
                        ),  # LeRobot export: observation.state
                        "modelMs": event.predict_ms,
                        "envMs": event.step_ms,
                        "info": scalars,
                    }
                )
            )
        except Exception as exc:
            self._step_log = False
            warn(f"recorder: step log disabled after an error: {type(exc).__name__}: {exc}")

    # -- episode end -------------------------------------------------------------------------

    def on_episode_end(self, result: EpisodeResult) -> None:
        ep = self._episodes.pop(result.index, None)
        index = len(self._workload.episodes)
        if ep is None:  # hooks driven without on_episode_start: metrics only
            ep = _Episode(index=index, rel_dir="", capture=False)
        if ep.index != index:  # interleaved vector lanes (which record no video)
            ep.index = index
        ep.rel_dir = f"{self._base}/ep{index:05d}"
        try:
            keep = self._policy.keeps(result)
        except Exception as exc:
            keep = False
            warn(
                f"recorder: record= callable raised {type(exc).__name__}: {exc}; episode {ep.index} kept without media"
            )
        media: list[MediaRef] = []
        step_log: str | None = None
        if keep:
            for label, writer in ep.writers.items():
                if writer.started and writer.error is None:
                    writer.start_finish()
                    media.append(
                        MediaRef(
                            camera=label,
                            kind="video",
                            path=f"{ep.rel_dir}/{ep.stem(label)}.mp4",
                            format="mp4",
                            frame_count=writer.pushed,
                            width=writer.width,
                            height=writer.height,
                            fps=float(writer.fps),
                            codec=writer.spec.codec,
                        )
                    )
                else:
                    writer.discard()
            if ep.env_video is not None:
                ref = self._copy_env_video(ep)
                if ref is not None:
                    media.append(ref)
            if ep.lines:
                step_log = self._write_log(ep)
        else:
            for writer in ep.writers.values():
                writer.discard()
        record = self._rec._append(
            self._workload, result, ep.index, self._included, media, step_log
        )
        for ref in media:
            pending = ep.writers.get(ref.camera)
            if pending is not None and ref.codec is not None:
                self._rec._pending_writer(self._workload, record.index, ref.path, pending)

    def _copy_env_video(self, ep: _Episode) -> MediaRef | None:
        key, raw = ep.env_video  # type: ignore[misc]
        opened = _open_env_video(raw, self._video_dirs)
        if isinstance(opened, str):
            warn(f"recorder: env video {raw!r} (info[{key!r}]) is not copied: {opened}; skipping")
            return None
        src, kind = opened
        rel = f"{ep.rel_dir}/{ep.stem(key)}.{kind}"
        try:
            with src, open(self._rec._staged(rel), "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        except OSError as exc:
            warn(f"recorder: env video {raw!r} could not be copied ({exc}); skipping")
            return None
        return MediaRef(camera=key, kind="video", path=rel, format=kind)

    def _write_log(self, ep: _Episode) -> str | None:
        rel = f"{ep.rel_dir}/steps.jsonl"
        try:
            path = self._rec._staged(rel)
            with open(path, "wb") as fh:
                fh.write(b"\n".join(ep.lines))
                fh.write(b"\n")
        except OSError as exc:
            warn(f"recorder: step log of episode {ep.index} could not be written ({exc})")
            return None
        finally:
            ep.lines = []
        return rel

    def on_run_end(self, result: RunResult) -> None:
        for ep in self._episodes.values():  # aborted / in-flight episodes: no record, no media
            for writer in ep.writers.values():
                writer.discard()
        self._episodes.clear()
        self._rec._settle()
        for cam in self._cams or ():
            if not cam.produced and not cam.dead:
                why = cam.last_error
                warn(
                    f"recorder: camera {cam.label!r} never produced a frame in this run"
                    + (
                        ""
                        if why is None
                        else f" (its last read failed: {type(why).__name__}: {why})"
                    )
                )
