"""Bundles on disk: write (folder or zip), read back, merge (REC-9).

A bundle is ``result.json`` (``rlmesh.result.v1``) plus the files its rows name
(``media/...``) and an ``index.html`` to browse it. A zip stores ``result.json`` and
the text files deflated and the videos uncompressed (already compressed).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from ._capture import warn
from ._html import build_index
from ._reader import MAX_DOCUMENT_BYTES, Bundle, open_bundle, open_inside, read_document, safe_rel
from ._records import SCHEMA, ResultSet, json_safe, sanitize_name

__all__ = [
    "Bundle",
    "archive_mode",
    "bundle_files",
    "dumps_document",
    "json_safe",
    "merge",
    "open_bundle",
    "write_bundle",
]

_TEXT_SUFFIXES = (".json", ".jsonl", ".html")


def bundle_files(document: Mapping[str, Any]) -> list[str]:
    """Every bundle-relative file a document names (media rows and step logs), in order."""
    out: list[str] = []
    for w in document.get("workloads") or ():
        for ep in w.get("episodes") or ():
            out.extend(str(m["path"]) for m in ep.get("media") or ())
            if ep.get("stepLog"):
                out.append(str(ep["stepLog"]))
    return out


def dumps_document(document: Mapping[str, Any]) -> str:
    """The text of ``result.json``: indented, RFC 8259 (no NaN/Infinity literals)."""
    return json.dumps(json_safe(document), indent=2, allow_nan=False, default=str)


def _read_bundle_schema(target: Path, *, as_zip: bool) -> dict[str, Any] | None:
    """The document of an existing bundle at ``target``, or ``None`` when it is not one."""
    try:
        if as_zip:
            if not zipfile.is_zipfile(target):
                return None
            with open_bundle(target) as bundle:
                doc = bundle.document()
        else:
            with open_inside(target, "result.json") as fh:
                data = fh.read(MAX_DOCUMENT_BYTES + 1)
            if len(data) > MAX_DOCUMENT_BYTES:
                return None
            doc = read_document(data, target)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None
    return doc if doc.get("schema") == SCHEMA else None


def _check_folder_target(target: Path) -> None:
    """Refuse to write into anything but a fresh folder or an ``rlmesh.result.v1`` bundle folder."""
    if target.exists() and not target.is_dir():
        raise FileExistsError(
            f"{target} exists and is not a directory; pass archive='zip' to overwrite a zip bundle, "
            "or export to a different path"
        )
    if not target.is_dir():
        return
    media, result = target / "media", target / "result.json"
    if os.path.lexists(result):
        old = _read_bundle_schema(target, as_zip=False)
        if old is None:
            raise FileExistsError(
                f"refusing to replace {target}: its result.json is not an {SCHEMA} document; "
                "export to a different path"
            )
        if os.path.lexists(media):
            if media.is_symlink() or not media.is_dir():
                raise FileExistsError(f"refusing to replace {media}: it is not a plain directory")
            named = set(bundle_files(old))
            for root, dirs, names in os.walk(media):
                for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
                    rel = Path(root, name).relative_to(target).as_posix()
                    if rel not in named:
                        raise FileExistsError(
                            f"refusing to replace {media}: it holds {rel}, which the bundle does not name "
                            "(a file of yours?); move it or export to a different path"
                        )
        return
    for name in ("media", "index.html"):
        if os.path.lexists(target / name):
            raise FileExistsError(
                f"refusing to overwrite {target / name}: {target} is not an rlmesh bundle (no result.json); "
                "export to a different path"
            )


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass


def write_bundle(
    target: Path,
    document: dict[str, Any],
    staging: Path | None,
    *,
    as_zip: bool,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``document`` and the staged files it names to ``target`` (a folder or a zip).

    Nothing at ``target`` is touched until the new bundle is complete beside it: a zip is
    written to a temp file then renamed over the old one; a folder's new ``media/``,
    ``result.json`` and ``index.html`` are written into a hidden temp dir inside it,
    then swapped in by renames (the old ones are deleted last). A failure on the way
    (a full disk) leaves the previous bundle as it was. Only an ``rlmesh.result.v1``
    bundle is replaced; a ``media/`` file its document does not name is never deleted
    (the export is refused instead). Staged files are read without following symlinks.
    """
    files = bundle_files(document)

    def local(rel: str) -> Any:
        if staging is None:
            return None
        try:
            return open_inside(staging, rel)
        except (OSError, ValueError):
            return None

    present: list[str] = []
    missing: list[str] = []
    for rel in files:
        fh = local(rel)
        if fh is None:
            missing.append(rel)
        else:
            fh.close()
            present.append(rel)
    if missing:
        warn(
            f"recorder: {len(missing)} media file(s) are missing from staging (first: {missing[0]}); exported without them"
        )

    def read_text(rel: str) -> str | None:
        fh = local(rel)
        if fh is None:
            return None
        with fh:
            text: str = fh.read().decode("utf-8", "replace")
            return text

    if extra:
        document = {**document, **extra}
    result_json = dumps_document(document)
    index_html = build_index(json_safe(document), read_text)
    if as_zip:
        if target.is_dir():
            raise FileExistsError(
                f"{target} is a directory; pass archive='folder' or export to a .zip file path"
            )
        if os.path.lexists(target) and _read_bundle_schema(target, as_zip=True) is None:
            raise FileExistsError(
                f"refusing to overwrite {target}: it is not an {SCHEMA} zip bundle; export to a different path"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            with zipfile.ZipFile(tmp, "w") as zf:
                zf.writestr("result.json", result_json, compress_type=zipfile.ZIP_DEFLATED)
                for rel in present:
                    fh = local(rel)
                    if fh is None:
                        continue
                    kind = (
                        zipfile.ZIP_DEFLATED if rel.endswith(_TEXT_SUFFIXES) else zipfile.ZIP_STORED
                    )
                    info = zipfile.ZipInfo(rel, time.localtime()[:6])
                    info.compress_type = kind
                    info.external_attr = 0o644 << 16
                    with fh, zf.open(info, "w", force_zip64=True) as out:
                        shutil.copyfileobj(fh, out, 1 << 20)
                zf.writestr("index.html", index_html, compress_type=zipfile.ZIP_DEFLATED)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                tmp.unlink()
        return target
    _check_folder_target(target)
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob(".rlmesh-export-*"):  # a killed export's unfinished copy
        _remove(stale)
    new = Path(tempfile.mkdtemp(prefix=".rlmesh-export-", dir=target))
    try:
        for rel in present:
            fh = local(rel)
            if fh is None:
                continue
            dest = new / safe_rel(rel)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with fh, open(dest, "wb") as out:
                shutil.copyfileobj(fh, out, 1 << 20)
        (new / "result.json").write_text(result_json, "utf-8")
        (new / "index.html").write_text(index_html, "utf-8")
        _swap_in(target, new)
    finally:
        _remove(new)
    return target


def _swap_in(target: Path, new: Path) -> None:
    """Rename ``new``'s media/index.html/result.json over ``target``'s; roll back on failure."""
    old = Path(tempfile.mkdtemp(prefix=".rlmesh-old-", dir=target))
    moved: list[str] = []
    placed: list[str] = []
    try:
        for name in ("media", "index.html"):
            if os.path.lexists(target / name):
                os.rename(target / name, old / name)
                moved.append(name)
        for name in ("media", "index.html"):
            if os.path.lexists(new / name):
                os.rename(new / name, target / name)
                placed.append(name)
        os.replace(new / "result.json", target / "result.json")  # the new bundle is complete here
    except BaseException:
        for name in placed:
            _remove(target / name)
        for name in moved:
            try:
                os.rename(old / name, target / name)
            except OSError:
                warn(f"recorder: could not restore {target / name}; the previous copy is in {old}")
                raise
        _remove(old)
        raise
    _remove(old)


def archive_mode(archive: bool | str | None, path: Path) -> bool:
    """Whether ``archive`` (``Recorder.export`` / ``merge``) means a zip for ``path`` (REC-9)."""
    if archive is None:
        return path.suffix.lower() == ".zip"
    if archive is True or archive is False:
        return archive
    if isinstance(archive, str):
        mode = archive.strip().lower()
        if mode == "zip":
            return True
        if mode in ("folder", "dir"):
            return False
    raise ValueError(f"archive must be True/'zip', False/'folder'/'dir' or None; got {archive!r}")


def merge(
    bundles: Iterable[str | os.PathLike[str]],
    path: str | os.PathLike[str],
    *,
    archive: bool | str | None = None,
    result_set_id: str | None = None,
    combine: bool = True,
    recorded_at: str | None = None,
) -> Path:
    """Merge exported bundles (from several runs or workers) into one bundle at ``path``.

    Workloads keep their order of first appearance. With ``combine=True`` (default)
    workloads with the same model, env, task and config are joined into one, their
    episodes re-numbered ``0..`` in bundle order (the workers-of-one-eval case);
    ``combine=False`` keeps every workload apart. Media are copied and re-laid out
    (REC-7) so paths stay unique; every metric is recomputed.

    Args:
        bundles: Bundle folders and/or ``.zip`` files written by ``Recorder.export``.
        path: The merged bundle (folder or zip, as in ``Recorder.export``).
        archive: As in :meth:`Recorder.export`.
        result_set_id: The merged document's id (default: the first bundle's).
        combine: Join workloads with identical keys.
        recorded_at: The ``recordedAt`` stamp (default: now).

    Raises:
        ValueError: no bundles, or one is not an ``rlmesh.result.v1`` bundle.
    """
    sources = [Path(b) for b in bundles]
    if not sources:
        raise ValueError("merge() needs at least one bundle")
    target = Path(path)
    as_zip = archive_mode(archive, target)
    merged = ResultSet(result_set_id or "")
    keyed: dict[tuple[str, str, str, str], int] = {}
    staging = Path(tempfile.mkdtemp(prefix="rlmesh-recorder-merge-"))
    try:
        for src in sources:
            with open_bundle(src) as bundle:
                doc = ResultSet.from_dict(bundle.document())
                if not merged.result_set_id:
                    merged.result_set_id = doc.result_set_id
                for w in doc.workloads:
                    key = (
                        w.model,
                        w.env,
                        w.task,
                        json.dumps(w.config, sort_keys=True, default=str),
                    )
                    if combine and key in keyed:
                        ordinal = keyed[key]
                        into = merged.workloads[ordinal]
                    else:
                        ordinal = len(merged.workloads)
                        into = type(w)(model=w.model, env=w.env, task=w.task, config=dict(w.config))
                        merged.workloads.append(into)
                        keyed.setdefault(key, ordinal)
                    base = f"media/w{ordinal:03d}-{sanitize_name(w.model)}/{sanitize_name(w.task)}"
                    for ep in w.episodes:
                        index = len(into.episodes)
                        ep_dir = f"{base}/ep{index:05d}"
                        media = []
                        for m in ep.media:
                            rel = f"{ep_dir}/{PurePosixPath(m.path).name}"
                            if bundle.copy_to(m.path, staging / safe_rel(rel)):
                                media.append(_replace(m, path=rel))
                            else:
                                warn(f"recorder.merge: {src}: {m.path} is missing; dropped")
                        step_log = None
                        if ep.step_log and bundle.copy_to(
                            ep.step_log, staging / safe_rel(f"{ep_dir}/steps.jsonl")
                        ):
                            step_log = f"{ep_dir}/steps.jsonl"
                        into.episodes.append(
                            _replace(ep, index=index, media=tuple(media), step_log=step_log)
                        )
        return write_bundle(target, merged.to_dict(recorded_at=recorded_at), staging, as_zip=as_zip)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)
