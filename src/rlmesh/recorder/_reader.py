"""Reading an exported bundle back (a folder or a zip), and the path rule both directions share.

``ResultSet.load`` and ``merge`` read through :func:`open_bundle`; ``write_bundle`` keeps every
bundle-relative path inside the bundle with :func:`safe_rel`.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["Bundle", "open_bundle", "safe_rel"]


def safe_rel(rel: str) -> PurePosixPath:
    """A bundle-relative path that stays inside the bundle."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts or "\x00" in rel:
        raise ValueError(f"bundle path {rel!r} escapes the bundle")
    return p


class Bundle:
    """An exported bundle opened for reading (a folder or a zip)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip: zipfile.ZipFile | None = None
        if path.is_dir():
            if not (path / "result.json").is_file():
                raise FileNotFoundError(f"{path} is not an rlmesh bundle: no result.json")
        elif zipfile.is_zipfile(path):
            self._zip = zipfile.ZipFile(path)
        else:
            raise FileNotFoundError(f"{path} is neither a bundle folder nor a zip bundle")

    def read(self, rel: str) -> bytes:
        """The bytes of a bundle-relative file."""
        p = safe_rel(rel)
        if self._zip is not None:
            return self._zip.read(str(p))
        return (self.path / p).read_bytes()

    def document(self) -> dict[str, Any]:
        """The parsed ``result.json``."""
        doc = json.loads(self.read("result.json"))
        if not isinstance(doc, dict):
            raise ValueError(f"{self.path}: result.json is not a JSON object")
        return doc

    def copy_to(self, rel: str, dest: Path) -> bool:
        """Copy a bundle file to ``dest``; ``False`` when the bundle lacks it."""
        p = safe_rel(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            if self._zip is not None:
                with self._zip.open(str(p)) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
            else:
                shutil.copyfile(self.path / p, dest)
        except (KeyError, OSError):
            return False
        return True

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()


@contextmanager
def open_bundle(path: Any) -> Iterator[Bundle]:
    """Open an exported bundle (folder or zip) for reading."""
    bundle = Bundle(Path(path))
    try:
        yield bundle
    finally:
        bundle.close()
