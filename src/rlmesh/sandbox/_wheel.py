"""A wheel of the running rlmesh, built in-process and byte-for-byte reproducible (SBX-9, O-10).

rlmesh is pure Python, so one ``py3-none-any`` wheel installs into any sandbox
(any Python >= 3.10, glibc or musl) without network and without a build
backend. The archive is deterministic (sorted entries, fixed timestamps and
modes), so its sha256 names the code exactly: the image tag / venv hash changes
when, and only when, the code does. Compiled extension modules, if any, are left
out (they are platform-specific accelerators).
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from importlib import metadata
from pathlib import Path

from .._build import VERSION

__all__ = ["build_wheel", "wheel_name"]

_EPOCH = (1980, 1, 1, 0, 0, 0)
_SKIP_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dylib")


def _version() -> str:
    return VERSION  # == rlmesh.__version__


def wheel_name() -> str:
    return f"rlmesh-{_version()}-py3-none-any.whl"


def _requires() -> list[str]:
    try:
        reqs = metadata.requires("rlmesh")
    except metadata.PackageNotFoundError:
        reqs = None
    core = [
        r for r in reqs or () if "extra ==" not in r
    ]  # extras are installed explicitly, by name
    return core or ["numpy>=1.24", "msgspec>=0.18"]


def _package_files(root: Path) -> list[Path]:
    files = [
        p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(_SKIP_SUFFIXES)
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _metadata_text(version: str) -> str:
    lines = [
        "Metadata-Version: 2.1",
        "Name: rlmesh",
        f"Version: {version}",
        "Requires-Python: >=3.10",
    ]
    lines += [f"Requires-Dist: {r}" for r in _requires()]
    return "\n".join(lines) + "\n"


def build_wheel(dest_dir: Path) -> Path:
    """Write ``rlmesh-<version>-py3-none-any.whl`` of the running package into ``dest_dir``."""
    root = Path(__file__).resolve().parent.parent  # the rlmesh package directory
    version = _version()
    dist_info = f"rlmesh-{version}.dist-info"
    entries: list[tuple[str, bytes]] = []
    for path in _package_files(root):
        entries.append((f"rlmesh/{path.relative_to(root).as_posix()}", path.read_bytes()))
    entries.append((f"{dist_info}/METADATA", _metadata_text(version).encode()))
    entries.append(
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: rlmesh.sandbox\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
    )
    entries.append(
        (f"{dist_info}/entry_points.txt", b"[console_scripts]\nrlmesh = rlmesh.cli:main\n")
    )
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    record += f"{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode()))
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / wheel_name()
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    tmp.replace(out)
    return out
