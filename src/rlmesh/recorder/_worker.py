"""The encoder process: reads frames from memory-mapped rings, writes MP4s with PyAV (REC-6).

Run as a plain script (``python _worker.py FD_IN FD_OUT``) by :class:`EncoderProcess`, so
it imports only the standard library, numpy and PyAV -- never the ``rlmesh`` package (a
fast start) and never the user's ``__main__`` (unlike ``multiprocessing`` spawn).

Why a process: PyAV holds the GIL while FFmpeg encodes, so an encoder thread would stall
a Python-heavy run for the whole encode time. Here the run's thread only copies each
frame into a ring slot and bumps a counter: no system call per frame.

A ring (one memory-mapped file per writer, see :func:`ring_layout`)::

    offset 0    written  (i64, bumped by the run after a frame and its pts are in place)
    offset 8    consumed (i64, bumped here once a slot's frame is copied out)
    offset 64   pts[slots] (i64)
    then        frames[slots] (uint8[H, W, 3])

Frame ``k`` lives in slot ``k % slots``; the run may write frame ``k`` once
``k - consumed < slots``. A fence (an uncontended lock round trip) orders the data
stores before the counter store on both sides.

A ring is named ``rlmesh-rec-<pid of the recording process>-<random>`` and unlinked here
once mapped. A recording process killed before this process got to a ring (it was busy
finishing the previous video) leaves the file behind: when this process then finds its
owner gone it unlinks the owner's rings, and :func:`remove_stale_rings` (called by
``rlmesh.recorder.orphans`` and ``recover``) unlinks those of any dead recorder, for the
case where both processes died together.

Control messages in (pickled tuples on FD_IN): ``("open", wid, ring_path, slots, height,
width, path, encoder, pix_fmt, options, fps, gop)``, ``("close", wid)`` (drain the ring,
flush, close the MP4) and ``("exit",)``. Out (FD_OUT): ``("closed", wid, encoded,
error_or_None)``, ``("ready",)`` once PyAV is imported, and ``("fatal", message)`` when
it cannot be. While any
writer is open the loop polls the rings every ``POLL_SECONDS``.
"""

from __future__ import annotations

import mmap
import os
import stat
import sys
import tempfile
import threading
from fractions import Fraction
from typing import Any

import numpy as np

#: How often open rings are checked for new frames (a frame waits at most this long).
POLL_SECONDS = 0.002

_FENCE = threading.Lock()


def fence() -> None:
    """A full memory barrier: an uncontended lock round trip (a locked instruction)."""
    _FENCE.acquire()
    _FENCE.release()


#: Frame rings are files named ``rlmesh-rec-<recording pid>-<random>``.
RING_PREFIX = "rlmesh-rec-"


def ring_dirs() -> list[str]:
    """Where frame rings may live, in order: ``/dev/shm`` (memory) when present, the temp dir."""
    shm = "/dev/shm"
    dirs = [shm] if os.path.isdir(shm) and os.access(shm, os.W_OK) else []
    return [*dirs, tempfile.gettempdir()]


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # another user's process: alive
        return False
    return False


def remove_stale_rings(dirs: list[str], owner: int | None = None) -> int:
    """Unlink the frame rings (this user's) of recording processes that are gone (only
    ``owner``'s, when given); how many were removed. A ring of a live process is kept."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    removed = 0
    for directory in dirs:
        try:
            names = [n for n in os.listdir(directory) if n.startswith(RING_PREFIX)]
        except OSError:
            continue
        for name in names:
            try:
                pid = int(name[len(RING_PREFIX) :].split("-", 1)[0])
            except ValueError:
                continue
            if (owner is not None and pid != owner) or not _process_gone(pid):
                continue
            path = os.path.join(directory, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid):
                    continue
                os.unlink(path)
                removed += 1
            except OSError:
                continue
    return removed


def ring_layout(slots: int, height: int, width: int) -> tuple[int, int]:
    """``(frames_offset, total_bytes)`` of a ring (header, pts table, frames; 64-byte aligned)."""
    frames_offset = (64 + 8 * slots + 63) // 64 * 64
    return frames_offset, frames_offset + slots * height * width * 3


class _Writer:
    def __init__(self, msg: tuple[Any, ...]) -> None:
        (
            _,
            self.wid,
            ring_path,
            slots,
            h,
            w,
            self.path,
            self.encoder,
            self.pix_fmt,
            self.options,
            self.fps,
            self.gop,
        ) = msg
        self.h, self.w = h, w
        self.encoded = 0
        self.error: str | None = None
        self.container: Any = None
        self.stream: Any = None
        offset, size = ring_layout(slots, h, w)
        with open(ring_path, "r+b") as fh:
            self.map = mmap.mmap(fh.fileno(), size)
        try:
            os.unlink(ring_path)  # mapped on both sides: the name is no longer needed
        except OSError:
            pass
        self.slots = slots
        self.counters = np.ndarray((2,), np.int64, buffer=self.map)
        self.pts = np.ndarray((slots,), np.int64, buffer=self.map, offset=64)
        self.ring = np.ndarray((slots, h, w, 3), np.uint8, buffer=self.map, offset=offset)
        self.consumed = 0

    def drain(self, av: Any) -> bool:
        """Encode every frame written so far; ``True`` when there was any."""
        written = int(self.counters[0])
        if written <= self.consumed:
            return False
        fence()
        while self.consumed < written:
            slot = self.consumed % self.slots
            vf = None
            if self.error is None:
                try:
                    if self.container is None:
                        self.open(av)
                    vf = av.VideoFrame.from_ndarray(
                        self.ring[slot], format="rgb24"
                    )  # copies the slot out
                    vf.pts = int(self.pts[slot])
                except Exception as exc:
                    self.error = f"{type(exc).__name__}: {exc}"
            self.consumed += 1
            fence()
            self.counters[1] = self.consumed  # the slot is free again
            if vf is not None:
                try:
                    for packet in self.stream.encode(vf):
                        self.container.mux(packet)
                    self.encoded += 1
                except Exception as exc:
                    self.error = f"{type(exc).__name__}: {exc}"
        return True

    def open(self, av: Any) -> None:
        container = av.open(self.path, mode="w", format="mp4")
        try:
            stream = container.add_stream(self.encoder, rate=self.fps, options=dict(self.options))
            stream.width, stream.height, stream.pix_fmt = self.w, self.h, self.pix_fmt
            stream.time_base = Fraction(1, self.fps)
            stream.codec_context.time_base = Fraction(1, self.fps)
            stream.codec_context.gop_size = self.gop
        except BaseException:
            container.close()
            raise
        self.container, self.stream = container, stream

    def close(self) -> None:
        try:
            if self.container is not None and self.error is None:
                for packet in self.stream.encode(None):
                    self.container.mux(packet)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            if self.container is not None:
                try:
                    self.container.close()
                except Exception as exc:
                    self.error = self.error or f"{type(exc).__name__}: {exc}"
            del self.ring, self.pts, self.counters
            self.map.close()


def main(fd_in: int, fd_out: int) -> None:
    from multiprocessing.connection import Connection

    cin = Connection(fd_in, writable=False)
    cout = Connection(fd_out, readable=False)
    owner = os.getppid()  # the recording process
    try:
        import av
    except ImportError as exc:
        cout.send(("fatal", f"PyAV is not importable in the encoder process: {exc}"))
        return
    cout.send(("ready",))
    writers: dict[int, _Writer] = {}
    while True:
        try:
            if not cin.poll(POLL_SECONDS if writers else None):
                for writer in list(writers.values()):
                    writer.drain(av)
                continue
            msg = cin.recv()
        except (EOFError, OSError):  # the run's process went away
            if os.getppid() != owner:  # it died: the rings it made that were not opened yet
                remove_stale_rings(ring_dirs(), owner)
            break
        op = msg[0]
        if op == "open":
            try:
                writers[msg[1]] = _Writer(msg)
            except Exception as exc:
                cout.send(("closed", msg[1], 0, f"{type(exc).__name__}: {exc}"))
        elif op == "close":
            closing: _Writer | None = writers.pop(msg[1], None)
            if closing is None:
                continue  # already reported closed (open failed)
            closing.drain(av)
            closing.close()
            cout.send(("closed", closing.wid, closing.encoded, closing.error))
        elif op == "exit":
            break
    for writer in writers.values():
        writer.close()


if __name__ == "__main__":
    os.environ.setdefault("SVT_LOG", "1")
    main(int(sys.argv[1]), int(sys.argv[2]))
