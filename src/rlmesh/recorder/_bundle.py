"""Bundles on disk: write (folder or zip), read back, merge (REC-9).

A bundle is ``result.json`` (``rlmesh.result.v1``) plus the files its rows name
(``media/...``) and an ``index.html`` to browse it. A zip stores ``result.json`` and
the text files deflated and the videos uncompressed (already compressed).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from ._capture import warn
from ._html import build_index
from ._reader import Bundle, open_bundle, safe_rel
from ._records import ResultSet, sanitize_name

__all__ = ["Bundle", "archive_mode", "bundle_files", "merge", "open_bundle", "write_bundle"]

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


def write_bundle(target: Path, document: dict[str, Any], staging: Path | None, *, as_zip: bool) -> Path:
    """Write ``document`` and the staged files it names to ``target`` (a folder or a zip)."""
    files = bundle_files(document)

    def local(rel: str) -> Path | None:
        if staging is None:
            return None
        path = staging / safe_rel(rel)
        return path if path.is_file() else None

    missing = [rel for rel in files if local(rel) is None]
    if missing:
        warn(f"recorder: {len(missing)} media file(s) are missing from staging (first: {missing[0]}); exported without them")

    def read_text(rel: str) -> str | None:
        path = local(rel)
        return path.read_text("utf-8") if path is not None else None

    result_json = json.dumps(document, indent=2)
    index_html = build_index(document, read_text)
    if as_zip:
        if target.is_dir():
            raise FileExistsError(f"{target} is a directory; pass archive='folder' or export to a .zip file path")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            with zipfile.ZipFile(tmp, "w") as zf:
                zf.writestr("result.json", result_json, compress_type=zipfile.ZIP_DEFLATED)
                for rel in files:
                    path = local(rel)
                    if path is None:
                        continue
                    kind = zipfile.ZIP_DEFLATED if rel.endswith(_TEXT_SUFFIXES) else zipfile.ZIP_STORED
                    zf.write(path, rel, compress_type=kind)
                zf.writestr("index.html", index_html, compress_type=zipfile.ZIP_DEFLATED)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                tmp.unlink()
        return target
    if target.exists() and not target.is_dir():
        raise FileExistsError(
            f"{target} exists and is not a directory; pass archive='zip' to overwrite a zip bundle, "
            "or export to a different path"
        )
    media = target / "media"
    if media.exists() and not (target / "result.json").is_file():
        raise FileExistsError(
            f"refusing to overwrite {media}: {target} is not an rlmesh bundle (no result.json); "
            "export to a different path"
        )
    target.mkdir(parents=True, exist_ok=True)
    if media.is_dir() and not media.is_symlink():
        shutil.rmtree(media)  # stale media of the previous export
    elif media.exists() or media.is_symlink():
        media.unlink()
    for rel in files:
        path = local(rel)
        if path is None:
            continue
        dest = target / safe_rel(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    (target / "result.json").write_text(result_json, "utf-8")
    (target / "index.html").write_text(index_html, "utf-8")
    return target


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
                    key = (w.model, w.env, w.task, json.dumps(w.config, sort_keys=True, default=str))
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
                        if ep.step_log and bundle.copy_to(ep.step_log, staging / safe_rel(f"{ep_dir}/steps.jsonl")):
                            step_log = f"{ep_dir}/steps.jsonl"
                        into.episodes.append(_replace(ep, index=index, media=tuple(media), step_log=step_log))
        return write_bundle(target, merged.to_dict(recorded_at=recorded_at), staging, as_zip=as_zip)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)
