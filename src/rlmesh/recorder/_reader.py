"""Reading an exported bundle back (a folder or a zip), and the path rule both directions share.

``ResultSet.load``, ``merge`` and ``recover`` read through :func:`open_bundle`; ``write_bundle``
keeps every bundle-relative path inside the bundle with :func:`safe_rel`.

A bundle is untrusted input (issue 28):

- **Folders**: a file is opened one path component at a time from the bundle's root
  directory, never following a symlink (``O_NOFOLLOW`` on every component), and only a
  regular file is read (a FIFO, device or directory is refused without blocking). So a
  bundle cannot make ``merge`` or ``ResultSet.load`` read or copy a file outside it.
- **Zips**: an entry's declared inflated size is checked *before* inflating: the document
  may inflate to at most :data:`MAX_DOCUMENT_BYTES`, and a deflated entry larger than
  :data:`INFLATE_FLOOR` may not inflate more than :data:`MAX_INFLATE_RATIO` times its
  compressed size (a zip bomb); ``zipfile`` stops at the declared size, so a lying header
  cannot inflate further.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO, Any

from ..errors import RLMeshException
from ._warn import warn

__all__ = [
    "INFLATE_FLOOR",
    "MAX_DOCUMENT_BYTES",
    "MAX_INFLATE_RATIO",
    "Bundle",
    "UnsafeBundle",
    "open_bundle",
    "open_inside",
    "read_document",
    "safe_rel",
    "sniff_video",
]

#: The largest ``result.json`` read into memory (bytes, inflated).
MAX_DOCUMENT_BYTES = 256 << 20
#: A deflated zip entry may inflate to at most this many times its compressed size ...
MAX_INFLATE_RATIO = 200
#: ... once it inflates to more than this many bytes (small entries are never refused).
INFLATE_FLOOR = 4 << 20

_COPY_CHUNK = 1 << 20


class UnsafeBundle(RLMeshException, ValueError):
    """A bundle (or staging dir) asked for something unsafe: a path outside it, a symlink,
    a file that is not regular, or an entry that would inflate beyond the limits."""


def safe_rel(rel: str) -> PurePosixPath:
    """A bundle-relative path that stays inside the bundle."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts or "\x00" in rel:
        raise UnsafeBundle(f"bundle path {rel!r} escapes the bundle")
    return p


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def open_inside(root: Path, rel: str) -> IO[bytes]:
    """Open the regular file ``rel`` under ``root`` for reading, following no symlink.

    Every component of ``rel`` is opened relative to its parent's descriptor with
    ``O_NOFOLLOW``; the file itself must be a regular file (checked on the open
    descriptor, so a swap after the check changes nothing).

    Raises:
        FileNotFoundError: no such file.
        UnsafeBundle: a component is a symlink, or the file is not a regular file.
    """
    parts = safe_rel(rel).parts
    if (
        os.open not in getattr(os, "supports_dir_fd", set()) or not _NOFOLLOW
    ):  # pragma: no cover - not POSIX
        path = Path(root, *parts)
        real, base = os.path.realpath(path), os.path.realpath(root)
        if (
            os.path.commonpath([real, base]) != base
            or os.path.islink(path)
            or not os.path.isfile(path)
        ):
            raise UnsafeBundle(f"{rel!r} is not a regular file inside {root}")
        return open(path, "rb")
    fd = os.open(root, os.O_RDONLY | _DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafeBundle(
                        f"{rel!r}: {part!r} is a symlink or not a directory; not followed"
                    ) from None
                raise
            os.close(fd)
            fd = nxt
        try:
            leaf = os.open(parts[-1], os.O_RDONLY | _NOFOLLOW | _NONBLOCK, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeBundle(f"{rel!r} is a symlink; not followed") from None
            raise
    finally:
        os.close(fd)
    try:
        st = os.fstat(leaf)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeBundle(f"{rel!r} is not a regular file")
        if _NONBLOCK:
            os.set_blocking(leaf, True)
        return os.fdopen(leaf, "rb")
    except BaseException:
        os.close(leaf)
        raise


def _check_inflate(info: zipfile.ZipInfo, limit: int | None) -> None:
    """Refuse a zip entry whose declared inflated size is over ``limit`` or a bomb's ratio."""
    if limit is not None and info.file_size > limit:
        raise UnsafeBundle(
            f"zip entry {info.filename!r} inflates to {info.file_size} bytes, over the {limit}-byte limit"
        )
    if (
        info.compress_type != zipfile.ZIP_STORED
        and info.file_size > INFLATE_FLOOR
        and info.file_size > MAX_INFLATE_RATIO * max(1, info.compress_size)
    ):
        raise UnsafeBundle(
            f"zip entry {info.filename!r} inflates {info.compress_size} bytes to {info.file_size} "
            f"(over {MAX_INFLATE_RATIO}x): refusing a zip bomb"
        )


class Bundle:
    """An exported bundle opened for reading (a folder or a zip)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        if path.is_dir():
            if not (path / "result.json").is_file():
                hint = ""
                if (path / "journal.jsonl").is_file():
                    hint = (
                        " (it holds a recorder journal: a run that did not finish; "
                        "rebuild the bundle with rlmesh.recorder.recover(path, out))"
                    )
                raise FileNotFoundError(f"{path} is not an rlmesh bundle: no result.json{hint}")
        elif zipfile.is_zipfile(path):
            self._zip = zipfile.ZipFile(path)
        else:
            raise FileNotFoundError(f"{path} is neither a bundle folder nor a zip bundle")

    def _zinfo(self, rel: str, limit: int | None) -> zipfile.ZipInfo:
        assert self._zip is not None
        info = self._zip.getinfo(str(safe_rel(rel)))
        _check_inflate(info, limit)
        return info

    def read(self, rel: str, limit: int = MAX_DOCUMENT_BYTES) -> bytes:
        """The bytes of a bundle-relative file (at most ``limit`` of them, else :class:`UnsafeBundle`)."""
        if self._zip is not None:
            info = self._zinfo(rel, limit)
            with self._zip.open(info) as fh:
                data = fh.read(limit + 1)
        else:
            with open_inside(self.path, rel) as fh:
                data = fh.read(limit + 1)
        if len(data) > limit:
            raise UnsafeBundle(f"{self.path}: {rel} is larger than {limit} bytes")
        return data

    def document(self) -> dict[str, Any]:
        """The parsed ``result.json``."""
        return read_document(self.read("result.json"), self.path)

    def copy_to(self, rel: str, dest: Path) -> bool:
        """Copy a bundle file to ``dest``; ``False`` when the bundle lacks it or it is unsafe."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            if self._zip is not None:
                info = self._zinfo(rel, None)
                with self._zip.open(info) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, _COPY_CHUNK)
            else:
                with open_inside(self.path, rel) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, _COPY_CHUNK)
        except UnsafeBundle as exc:
            warn(f"recorder: {self.path}: {exc}; skipped")
            _unlink(dest)
            return False
        except (KeyError, OSError, zipfile.BadZipFile):
            _unlink(dest)
            return False
        return True

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def read_document(data: bytes, where: Any) -> dict[str, Any]:
    """Parse a ``result.json`` (an older bundle's ``NaN`` literals are still read)."""
    doc = json.loads(data)
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: result.json is not a JSON object")
    return doc


@contextmanager
def open_bundle(path: Any) -> Iterator[Bundle]:
    """Open an exported bundle (folder or zip) for reading."""
    bundle = Bundle(Path(path))
    try:
        yield bundle
    finally:
        bundle.close()


# -- video containers, recognised by content ------------------------------------------------

_EBML_MAGIC = b"\x1a\x45\xdf\xa3"


def sniff_video(fh: IO[bytes], size: int) -> str | None:
    """The container of an open video file by content: ``"mp4"``, ``"mov"``, ``"webm"``, ``"mkv"``, or ``None``.

    An ISO-BMFF file (MP4/MOV) must be a well-formed sequence of top-level boxes covering
    the whole file, the first an ``ftyp`` and one of them a ``moov`` (a file cut short
    while being written has no ``moov`` and is refused). A Matroska/WebM file must start
    with an EBML header naming its doc type.
    """
    head = fh.read(64)
    if head[:4] == _EBML_MAGIC:
        if b"webm" in head:
            return "webm"
        return "mkv" if b"matroska" in head else None
    if len(head) < 16 or head[4:8] != b"ftyp":
        return None
    brand = head[8:12]
    pos, seen_moov, boxes = 0, False, 0
    while pos < size:
        fh.seek(pos)
        hdr = fh.read(16)
        if len(hdr) < 8:
            return None
        box_size = int.from_bytes(hdr[:4], "big")
        kind = hdr[4:8]
        if not all(32 <= b < 127 for b in kind):
            return None
        if box_size == 1:
            if len(hdr) < 16:
                return None
            box_size = int.from_bytes(hdr[8:16], "big")
            if box_size < 16:
                return None
        elif box_size == 0:
            box_size = size - pos
        elif box_size < 8:
            return None
        seen_moov = seen_moov or kind == b"moov"
        pos += box_size
        boxes += 1
        if boxes > 100_000:
            return None
    if pos != size or not seen_moov:
        return None
    return "mov" if brand == b"qt  " else "mp4"


def video_file_ok(path: Path) -> bool:
    """Whether ``path`` (not followed if a symlink) is a complete video container."""
    try:
        with open_inside(path.parent, path.name) as fh:
            return sniff_video(fh, os.fstat(fh.fileno()).st_size) is not None
    except (OSError, ValueError):
        return False
