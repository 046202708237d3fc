"""Video encoding off the run's thread: one ``VideoWriter`` per camera per episode (REC-6, O-12).

Theory of operation:

- The run's thread calls :meth:`VideoWriter.push` with a normalised ``uint8[H, W, 3]``
  frame. ``push`` crops it to even dimensions, copies it (the env may reuse its
  buffer) and puts it on a bounded queue; nothing else happens on the run's thread.
- A worker thread (one per writer) opens the MP4 lazily at the first frame, converts
  RGB to the codec's pixel format and encodes with PyAV (FFmpeg): the heavy work runs
  in C with the GIL released.
- Back-pressure by default: a full queue blocks ``push`` until the encoder catches up,
  so no frame is lost. ``drop_frames_ok=True`` never waits: a frame that finds the
  queue full is dropped (counted in :attr:`VideoWriter.dropped`).
- Each frame's presentation time is its step index (``pts = step``, time base
  ``1/fps``): a skipped or dropped frame leaves a gap instead of shifting later
  frames, so ``t = step / fps`` in every camera's video and in ``steps.jsonl``.
- An encoder error is kept and reported by :meth:`VideoWriter.finish`; the worker
  keeps draining the queue so a producer never blocks on a dead encoder.

Codecs (``Recorder(codec=...)``): ``"av1"`` (SVT-AV1, falling back to libaom when the
FFmpeg build has no SVT-AV1), ``"h264"`` (libx264, plays everywhere) and
``"lossless"`` (libx264rgb at qp 0: RGB, pixel exact, for debugging; few browsers play it).
``quality`` (1..100) maps linearly onto the codec's constant-quality scale.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CODECS", "EncoderSpec", "VideoWriter", "encoder_spec"]

#: ``Recorder(codec=...)`` values.
CODECS = ("av1", "h264", "lossless")

#: Keyframe interval cap in frames (seeking stays cheap; REC-6).
KEYFRAME_INTERVAL = 150


@dataclass(frozen=True)
class EncoderSpec:
    """How to encode: the FFmpeg encoder, pixel format and options."""

    codec: str
    encoder: str
    pix_fmt: str
    options: dict[str, str]


def _has_encoder(name: str) -> bool:
    import av

    try:
        av.codec.Codec(name, "w")
    except Exception:
        return False
    return True


def encoder_spec(codec: str, quality: int) -> EncoderSpec:
    """The encoder for ``codec`` at ``quality`` (1..100; higher is better and larger).

    Raises:
        ImportError: PyAV is not installed.
        ValueError: no FFmpeg encoder for ``codec`` in this PyAV build.
    """
    try:
        import av  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "recording video needs PyAV: pip install 'rlmesh[record]' (or pip install av)"
        ) from exc
    worse = (100 - quality) / 99.0  # 0.0 at quality 100, 1.0 at quality 1
    if codec == "av1":
        crf = str(round(4 + worse * 59))  # SVT-AV1 / libaom crf 4..63
        if _has_encoder("libsvtav1"):
            os.environ.setdefault("SVT_LOG", "1")  # errors only: SVT-AV1 prints its banner otherwise
            return EncoderSpec("av1", "libsvtav1", "yuv420p", {"preset": "10", "crf": crf})
        if _has_encoder("libaom-av1"):
            return EncoderSpec(
                "av1", "libaom-av1", "yuv420p", {"cpu-used": "8", "usage": "realtime", "row-mt": "1", "crf": crf, "b": "0"}
            )
        raise ValueError("this PyAV build has no AV1 encoder (libsvtav1 / libaom-av1); use codec='h264'")
    if codec == "h264":
        if not _has_encoder("libx264"):
            raise ValueError("this PyAV build has no libx264 encoder; use codec='av1'")
        crf = str(round(worse * 51))
        return EncoderSpec("h264", "libx264", "yuv420p", {"preset": "veryfast", "crf": crf})
    if codec == "lossless":
        if not _has_encoder("libx264rgb"):
            raise ValueError("this PyAV build has no libx264rgb encoder for codec='lossless'")
        return EncoderSpec("lossless", "libx264rgb", "rgb24", {"preset": "ultrafast", "qp": "0"})
    raise ValueError(f"codec must be one of {CODECS}, got {codec!r}")


class VideoWriter:
    """One camera's MP4 for one episode, encoded on a worker thread (REC-6).

    Args:
        path: Where the MP4 goes (its directory is created).
        spec: The encoder (:func:`encoder_spec`).
        fps: Nominal frame rate; the time base is ``1/fps``.
        queue_frames: Frames buffered between the run and the encoder.
        drop_frames_ok: Drop a frame instead of waiting when the queue is full.
    """

    def __init__(
        self,
        path: Path,
        spec: EncoderSpec,
        *,
        fps: int,
        queue_frames: int = 4,
        drop_frames_ok: bool = False,
    ) -> None:
        self.path = path
        self.spec = spec
        self.fps = fps
        self.drop_frames_ok = drop_frames_ok
        self.width = 0
        self.height = 0
        self.pushed = 0
        self.dropped = 0
        self.encoded = 0
        self.error: BaseException | None = None
        self._last_pts = -1
        self._queue: queue.Queue[tuple[np.ndarray[Any, Any], int] | None] = queue.Queue(maxsize=max(1, queue_frames))
        self._thread = threading.Thread(target=self._work, name=f"rlmesh-recorder:{path.name}", daemon=True)
        self._started = False
        self._closed = False

    # -- run thread -----------------------------------------------------------------------

    def push(self, frame: np.ndarray[Any, Any], pts: int) -> bool:
        """Queue one ``uint8[H, W, 3]`` frame shown from step ``pts`` on; ``False`` when dropped.

        Raises:
            ValueError: the frame's (even-cropped) size differs from the first frame's,
                or ``pts`` does not increase.
        """
        h, w = frame.shape[0] & ~1, frame.shape[1] & ~1
        if h == 0 or w == 0:
            raise ValueError(f"frame of {frame.shape[1]}x{frame.shape[0]} is too small to encode (needs >= 2x2)")
        if not self._started:
            self.width, self.height = w, h
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._thread.start()
            self._started = True
        elif (w, h) != (self.width, self.height):
            raise ValueError(
                f"camera changed resolution mid-episode: {self.width}x{self.height} -> {w}x{h}"
            )
        if pts <= self._last_pts:
            raise ValueError(f"frame pts must increase: {pts} after {self._last_pts}")
        item = (np.array(frame[:h, :w], dtype=np.uint8, order="C", copy=True), int(pts))
        if self.drop_frames_ok:
            try:
                self._queue.put_nowait(item)
            except queue.Full:
                self.dropped += 1
                return False
        else:
            self._queue.put(item)
        self._last_pts = int(pts)
        self.pushed += 1
        return True

    @property
    def started(self) -> bool:
        """Whether any frame was pushed (the file exists only then)."""
        return self._started

    def finish(self, timeout: float | None = None) -> bool:
        """Flush and close the file; wait for the worker. ``True`` when the MP4 is complete.

        Idempotent. ``False`` when nothing was pushed or the encoder failed (see :attr:`error`).
        """
        if not self._started:
            return False
        if not self._closed:
            self._closed = True
            self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive() and self.error is None and self.encoded > 0

    def start_finish(self) -> None:
        """Ask the worker to flush and close without waiting (:meth:`finish` later joins)."""
        if self._started and not self._closed:
            self._closed = True
            self._queue.put(None)

    @property
    def busy(self) -> bool:
        """Whether the worker is still encoding."""
        return self._started and self._thread.is_alive()

    def discard(self) -> None:
        """Finish and delete the file (an episode not selected for recording)."""
        self.finish()
        try:
            self.path.unlink()
        except OSError:
            pass

    # -- worker thread --------------------------------------------------------------------

    def _work(self) -> None:
        get = self._queue.get
        container: Any = None
        stream: Any = None
        encode: Callable[[Any], Any] | None = None
        try:
            import av

            while True:
                item = get()
                if item is None:
                    break
                if self.error is not None:
                    continue  # keep draining: a producer must never block on a dead encoder
                frame, pts = item
                try:
                    if container is None:
                        container, stream = self._open(av)
                        encode = stream.encode
                    vf = av.VideoFrame.from_ndarray(frame, format="rgb24")
                    vf.pts = pts
                    assert encode is not None
                    for packet in encode(vf):
                        container.mux(packet)
                    self.encoded += 1
                except BaseException as exc:
                    self.error = exc
            if container is not None and self.error is None:
                for packet in stream.encode(None):
                    container.mux(packet)
        except BaseException as exc:
            self.error = self.error or exc
        finally:
            if container is not None:
                try:
                    container.close()
                except BaseException as exc:
                    self.error = self.error or exc

    def _open(self, av: Any) -> tuple[Any, Any]:
        spec = self.spec
        container = av.open(str(self.path), mode="w", format="mp4")
        try:
            stream = container.add_stream(spec.encoder, rate=self.fps, options=dict(spec.options))
            stream.width = self.width
            stream.height = self.height
            stream.pix_fmt = spec.pix_fmt
            stream.time_base = Fraction(1, self.fps)
            stream.codec_context.time_base = Fraction(1, self.fps)
            stream.codec_context.gop_size = KEYFRAME_INTERVAL
        except BaseException:
            container.close()
            raise
        return container, stream
