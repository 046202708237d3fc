"""Video encoding off the run's thread: one ``VideoWriter`` per camera per episode (REC-6, O-12).

Theory of operation:

- Encoding runs in a separate process (``_worker.py``, one per ``Recorder``, started on
  first use): PyAV holds the GIL while FFmpeg encodes, so an encoder *thread* would stall
  a Python-heavy run for the whole encode time (measured: a pure-Python loop ran at 42 %
  of its speed beside an encoder thread).
- The run's thread calls :meth:`VideoWriter.push` with a normalised ``uint8[H, W, 3]``
  frame. ``push`` crops it to even dimensions, copies it into the next slot of the
  writer's ring (a memory-mapped file in ``/dev/shm``, ``queue_frames`` slots) and bumps
  the ring's ``written`` counter: one copy, no system call, no wake-up per frame (the
  layout is in ``_worker.py``). The worker polls its open rings, copies each frame
  out, bumps ``consumed`` (the slot is free again) and encodes.
- Back-pressure by default: with every slot in flight ``push`` waits (short sleeps)
  for ``consumed`` to move, so no frame is lost. ``drop_frames_ok=True`` never waits:
  a frame that finds no free slot is dropped (counted in :attr:`VideoWriter.dropped`).
- Each frame's presentation time is its step index (``pts = step``, time base
  ``1/fps``): a skipped or dropped frame leaves a gap instead of shifting later
  frames, so ``t = step / fps`` in every camera's video and in ``steps.jsonl``.
- An encoder error is reported by ``("closed", writer, encoded, error)`` and kept in
  :attr:`VideoWriter.error`; a dead or stalled worker fails every open writer, so a
  producer never blocks forever.

Codecs (``Recorder(codec=...)``): ``"av1"`` (SVT-AV1, falling back to libaom when the
FFmpeg build has no SVT-AV1), ``"h264"`` (libx264, plays everywhere) and
``"lossless"`` (libx264rgb at qp 0: RGB, pixel exact, for debugging; few browsers play it).
``quality`` (1..100) maps linearly onto the codec's constant-quality scale.
"""

from __future__ import annotations

import mmap
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._worker import RING_PREFIX, fence, remove_stale_rings, ring_dirs, ring_layout

__all__ = [
    "CODECS",
    "EncoderProcess",
    "EncoderSpec",
    "VideoWriter",
    "encoder_spec",
    "remove_dead_rings",
]

#: ``Recorder(codec=...)`` values.
CODECS = ("av1", "h264", "lossless")

#: Keyframe interval cap in frames (seeking stays cheap; REC-6).
KEYFRAME_INTERVAL = 150

#: A wait for the encoder process gives up after this long without any progress from it.
STALL_SECONDS = 120.0

#: The nap between checks while every ring slot is in flight (back-pressure).
WAIT_SECONDS = 0.0005


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
            'recording video needs PyAV: pip install av (the "record" extra of rlmesh-py)'
        ) from exc
    worse = (100 - quality) / 99.0  # 0.0 at quality 100, 1.0 at quality 1
    if codec == "av1":
        crf = str(round(4 + worse * 59))  # SVT-AV1 / libaom crf 4..63
        if _has_encoder("libsvtav1"):
            return EncoderSpec(
                "av1", "libsvtav1", "yuv420p", {"preset": "12", "crf": crf, "svtav1-params": "lp=1"}
            )
        if _has_encoder("libaom-av1"):
            return EncoderSpec(
                "av1",
                "libaom-av1",
                "yuv420p",
                {"cpu-used": "8", "usage": "realtime", "row-mt": "1", "crf": crf, "b": "0"},
            )
        raise ValueError(
            "this PyAV build has no AV1 encoder (libsvtav1 / libaom-av1); use codec='h264'"
        )
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


def _ring_dirs() -> list[str]:
    """Where frame rings may live, in order: ``/dev/shm`` (memory) when present, the temp dir."""
    return ring_dirs()


def remove_dead_rings() -> int:
    """Unlink the frame rings of recording processes that died before their encoder opened them."""
    return remove_stale_rings(_ring_dirs())


def _create_ring(size: int) -> tuple[str, mmap.mmap]:
    """A new ``size``-byte ring file, its space reserved up front, and its mapping.

    The space is allocated (``posix_fallocate``) before mapping: a full ``/dev/shm`` (64 MB
    in a default Docker container) then fails here with ``ENOSPC`` and the next directory is
    tried, instead of a ``SIGBUS`` on the first write to a sparse page.
    """
    error: OSError | None = None
    for directory in _ring_dirs():
        path = os.path.join(directory, f"{RING_PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            error = exc
            continue
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)
            else:
                os.ftruncate(fd, size)
            return path, mmap.mmap(fd, size)
        except OSError as exc:
            error = exc
            os.unlink(path)
        finally:
            os.close(fd)
    raise OSError(f"no room for a {size}-byte frame ring in {_ring_dirs()}: {error}")


class EncoderProcess:
    """The recorder's encoder process (``_worker.py``) and the pipes to it.

    One per :class:`~rlmesh.recorder.Recorder`, started on first use and shared by all
    its writers; messages are dispatched to writers by id. The run's thread talks to it
    only through :class:`VideoWriter`.
    """

    def __init__(self) -> None:
        from multiprocessing.connection import Connection

        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ)
        env.setdefault("SVT_LOG", "1")  # errors only: SVT-AV1 prints a banner per encoder otherwise
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).with_name("_worker.py")),
                    str(to_child_r),
                    str(from_child_w),
                ],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self._out = Connection(to_child_w, readable=False)
        self._in = Connection(from_child_r, writable=False)
        self._writers: dict[int, VideoWriter] = {}
        self._next_id = 0
        self.dead: str | None = None
        self.ready = False
        self.lock = threading.RLock()

    def register(self, writer: VideoWriter) -> int:
        self._next_id += 1
        self._writers[self._next_id] = writer
        return self._next_id

    def send(self, msg: tuple[Any, ...]) -> None:
        if self.dead is not None:
            raise RuntimeError(self.dead)
        try:
            self._out.send(msg)
        except OSError as exc:
            self._die(f"the encoder process is gone ({exc})")
            raise RuntimeError(self.dead) from exc

    def pump(self, wait: float = 0.0) -> None:
        """Handle the messages that arrived (waiting up to ``wait`` seconds for the first)."""
        conn = self._in
        try:
            if not conn.poll(wait):
                return
            while True:
                self._dispatch(conn.recv())
                if not conn.poll(0):
                    return
        except (EOFError, OSError):
            code = self.proc.poll()
            self._die(f"the encoder process exited (code {code})")

    def wait_until(self, done: Callable[[], bool]) -> None:
        """Pump until ``done()`` (or the process died / stalled for ``STALL_SECONDS``)."""
        last = time.monotonic()
        while not done() and self.dead is None:
            before = self._seen
            self.pump(0.2)
            if self._seen != before:
                last = time.monotonic()
            elif self.proc.poll() is not None:
                self.pump(0)
                if not done():
                    self._die(f"the encoder process exited (code {self.proc.returncode})")
            elif time.monotonic() - last > STALL_SECONDS:
                self._die(f"the encoder process made no progress for {STALL_SECONDS:.0f} s")
                self.proc.kill()

    _seen = 0

    def _dispatch(self, msg: tuple[Any, ...]) -> None:
        self._seen += 1
        op = msg[0]
        if op == "ready":
            self.ready = True
        elif op == "closed":
            writer = self._writers.pop(msg[1], None)
            if writer is not None:
                writer._closed_by_worker(int(msg[2]), msg[3])
        elif op == "fatal":
            self._die(str(msg[1]))

    def _die(self, reason: str) -> None:
        if self.dead is None:
            self.dead = reason
        writers, self._writers = self._writers, {}
        for writer in writers.values():
            writer._closed_by_worker(writer.encoded, reason)

    def wait_ready(self) -> None:
        """Wait until the process has imported PyAV (or died), so no frame waits on start-up."""
        with self.lock:
            self.wait_until(lambda: self.ready)

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the process to exit (finishing open files), wait, kill if it will not."""
        try:
            if self.dead is None:
                self._out.send(("exit",))
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        finally:
            self._die("the encoder process was stopped")
            self._out.close()
            self._in.close()


class VideoWriter:
    """One camera's MP4 for one episode; frames go to the encoder process through a ring (REC-6).

    Args:
        path: Where the MP4 goes (its directory is created).
        spec: The encoder (:func:`encoder_spec`).
        fps: Nominal frame rate; the time base is ``1/fps``.
        encoder: The shared :class:`EncoderProcess`.
        queue_frames: Ring slots: frames in flight between the run and the encoder.
        drop_frames_ok: Drop a frame instead of waiting when every slot is in flight.
    """

    def __init__(
        self,
        path: Path,
        spec: EncoderSpec,
        *,
        fps: int,
        encoder: EncoderProcess,
        queue_frames: int = 8,
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
        self._encoder = encoder
        self._slots = max(1, queue_frames)
        self._counters: np.ndarray[Any, Any] | None = None
        self._pts: np.ndarray[Any, Any] | None = None
        self._ring: np.ndarray[Any, Any] | None = None
        self._ring_path = ""
        self._map: mmap.mmap | None = None
        self._wid = 0
        self._last_pts = -1
        self._started = False
        self._closing = False
        self._done = False

    # -- run thread -----------------------------------------------------------------------

    def push(self, frame: np.ndarray[Any, Any], pts: int) -> bool:
        """Queue one ``uint8[H, W, 3]`` frame shown from step ``pts`` on; ``False`` when dropped.

        Raises:
            ValueError: the frame's (even-cropped) size differs from the first frame's,
                or ``pts`` does not increase.
            RuntimeError: the encoder failed (see :attr:`error`).
        """
        h, w = frame.shape[0] & ~1, frame.shape[1] & ~1
        if h == 0 or w == 0:
            raise ValueError(
                f"frame of {frame.shape[1]}x{frame.shape[0]} is too small to encode (needs >= 2x2)"
            )
        if self.error is not None:
            raise self.error
        if not self._started:
            self._open(h, w)
        elif (w, h) != (self.width, self.height):
            raise ValueError(
                f"camera changed resolution mid-episode: {self.width}x{self.height} -> {w}x{h}"
            )
        if pts <= self._last_pts:
            raise ValueError(f"frame pts must increase: {pts} after {self._last_pts}")
        k = self.pushed
        counters = self._counters
        if counters is None or self._ring is None or self._pts is None:
            raise self.error or RuntimeError("the encoder closed this video")
        if k - int(counters[1]) >= self._slots:  # every slot in flight
            if self.drop_frames_ok:
                self.dropped += 1
                return False
            self._wait_for_slot(k)
            if self.error is not None or self._ring is None:
                raise self.error or RuntimeError("the encoder closed this video")
        slot = k % self._slots
        np.copyto(self._ring[slot], frame[:h, :w])
        self._pts[slot] = pts
        fence()
        counters[0] = k + 1
        self._last_pts = int(pts)
        self.pushed = k + 1
        return True

    def _wait_for_slot(self, k: int) -> None:
        counters = self._counters
        assert counters is not None
        enc = self._encoder
        last_seen, last_move = int(counters[1]), time.monotonic()
        naps = 0
        while counters is not None and k - int(counters[1]) >= self._slots and not self._done:
            time.sleep(WAIT_SECONDS)
            naps += 1
            if naps % 64 == 0:  # every ~30 ms: is the worker alive and moving?
                with enc.lock:
                    enc.pump(0)
                if enc.proc.poll() is not None:
                    with enc.lock:
                        enc._die(f"the encoder process exited (code {enc.proc.returncode})")
                consumed = int(counters[1]) if self._counters is not None else last_seen
                if consumed != last_seen:
                    last_seen, last_move = consumed, time.monotonic()
                elif time.monotonic() - last_move > STALL_SECONDS:
                    with enc.lock:
                        enc._die(f"the encoder process made no progress for {STALL_SECONDS:.0f} s")
                    enc.proc.kill()
            counters = self._counters

    def _open(self, h: int, w: int) -> None:
        self.width, self.height = w, h
        self.path.parent.mkdir(parents=True, exist_ok=True)
        offset, size = ring_layout(self._slots, h, w)
        self._ring_path, self._map = _create_ring(size)
        self._counters = np.ndarray((2,), np.int64, buffer=self._map)
        self._pts = np.ndarray((self._slots,), np.int64, buffer=self._map, offset=64)
        self._ring = np.ndarray((self._slots, h, w, 3), np.uint8, buffer=self._map, offset=offset)
        self._started = True
        spec = self.spec
        with self._encoder.lock:
            self._wid = self._encoder.register(self)
            try:
                self._encoder.send(
                    (
                        "open",
                        self._wid,
                        self._ring_path,
                        self._slots,
                        h,
                        w,
                        str(self.path),
                        spec.encoder,
                        spec.pix_fmt,
                        dict(spec.options),
                        self.fps,
                        KEYFRAME_INTERVAL,
                    )
                )
            except RuntimeError as exc:
                self._closed_by_worker(0, str(exc))
                raise

    # -- from the encoder process -----------------------------------------------------------

    def _closed_by_worker(self, encoded: int, error: str | None) -> None:
        self.encoded = encoded
        if error is not None and self.error is None:
            self.error = RuntimeError(f"encoding {self.path.name} failed: {error}")
        self._done = True
        self._unlink_ring()
        self._ring = self._pts = self._counters = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view is still alive somewhere; the mapping goes with it
                pass
            self._map = None

    def _unlink_ring(self) -> None:
        if self._ring_path:
            try:
                os.unlink(self._ring_path)
            except OSError:
                pass
            self._ring_path = ""

    # -- finishing --------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether any frame was pushed (the file exists only then)."""
        return self._started

    @property
    def busy(self) -> bool:
        """Whether the encoder is still working on this file."""
        return self._started and not self._done

    def start_finish(self) -> None:
        """Ask the encoder to flush and close the file, without waiting (:meth:`finish` joins)."""
        if self._started and not self._closing and not self._done:
            self._closing = True
            with self._encoder.lock:
                try:
                    self._encoder.send(("close", self._wid))
                except RuntimeError:
                    pass

    def finish(self) -> bool:
        """Flush, close and wait for the file. ``True`` when the MP4 is complete. Idempotent."""
        if not self._started:
            return False
        self.start_finish()
        with self._encoder.lock:
            self._encoder.wait_until(lambda: self._done)
        return self.error is None and self.encoded > 0

    def discard(self) -> None:
        """Finish and delete the file (an episode not selected for recording)."""
        self.finish()
        try:
            self.path.unlink()
        except OSError:
            pass
