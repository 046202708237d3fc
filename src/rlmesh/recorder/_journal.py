"""What survives a crash: the staging journal, ``recover`` and ``orphans`` (issue 28).

A recording ``Recorder`` stages its bundle in a temp dir ``rlmesh-recorder-*`` laid out
as the bundle will be (``media/...``). Beside the media it appends ``journal.jsonl``:
one JSON line per event, written (one ``write`` call, flushed) the moment it happens:

- a header: ``{"journal": "rlmesh.recorder.journal.v1", "resultSetId", "pid", "host",
  "boot", "start", "createdAt"}`` (the owner, so a dead owner's dir can be told apart);
- ``{"op": "workload", "ordinal", "model", "env", "task", "config"}`` per workload;
- ``{"op": "episode", "workload", "record": {...}}`` per finished episode: its
  ``result.json`` row, media rows included;
- ``{"op": "drop", "workload", "index", "path"}`` when a video failed to encode.

So after a ``kill -9`` the staging dir holds every finished episode's record beside its
media. :func:`recover` rebuilds a bundle from it (a torn last line is ignored; a media
row whose file is missing or not a complete video container is dropped), and
:func:`orphans` lists the staging dirs whose owner process is gone. A journal is not a
bundle: ``ResultSet.load`` on a staging dir says to run :func:`recover`. Both also remove
the frame rings (``/dev/shm/rlmesh-rec-*``) of recording processes that are gone.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from .._spawn.host import pid_alive
from ._bundle import archive_mode, write_bundle
from ._capture import warn
from ._encode import remove_dead_rings
from ._reader import UnsafeBundle, open_inside, video_file_ok
from ._records import EpisodeRecord, ResultSet, WorkloadRecord, json_safe

__all__ = [
    "JOURNAL",
    "JOURNAL_SCHEMA",
    "STAGING_PREFIX",
    "Journal",
    "finished_episodes",
    "orphans",
    "recover",
]

#: The journal's file name inside a staging dir.
JOURNAL = "journal.jsonl"
#: The header's ``journal`` tag.
JOURNAL_SCHEMA = "rlmesh.recorder.journal.v1"
#: Staging dirs are ``<tempdir>/rlmesh-recorder-*`` (REC-7).
STAGING_PREFIX = "rlmesh-recorder-"


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22), or ``""``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        return data[data.rindex(b")") + 2 :].split()[19].decode()
    except (OSError, ValueError, IndexError):
        return ""


def owner_alive(header: dict[str, Any]) -> bool | None:
    """Whether the journal's owner process still runs: ``None`` when that cannot be told (another host)."""
    if header.get("host") != socket.gethostname():
        return None
    boot = _boot_id()
    if boot and header.get("boot") and header["boot"] != boot:
        return False  # the machine rebooted since
    try:
        pid = int(header.get("pid", -1))
    except (TypeError, ValueError):
        return None
    if pid <= 0:
        return None
    if not pid_alive(pid):
        return False
    start = _start_time(pid)
    return not (
        start and header.get("start") and header["start"] != start
    )  # else: the pid was reused


class Journal:
    """The append-only record of a recorder's finished episodes in its staging dir."""

    def __init__(self, staging: Path, result_set_id: str) -> None:
        self.path = staging / JOURNAL
        self._fh: IO[bytes] | None = open(self.path, "ab")  # noqa: SIM115 - kept open, appended per episode
        pid = os.getpid()
        self.write(
            {
                "journal": JOURNAL_SCHEMA,
                "resultSetId": result_set_id,
                "pid": pid,
                "host": socket.gethostname(),
                "boot": _boot_id(),
                "start": _start_time(pid),
                "createdAt": datetime.now(timezone.utc).isoformat(),
            }
        )

    def write(self, entry: dict[str, Any]) -> None:
        """Append one line (a failure to write disables the journal with one warning)."""
        if self._fh is None:
            return
        try:
            line = json.dumps(json_safe(entry), allow_nan=False, default=str, separators=(",", ":"))
            self._fh.write(line.encode("utf-8") + b"\n")
            self._fh.flush()
        except (OSError, ValueError, TypeError) as exc:
            warn(
                f"recorder: the crash journal {self.path} could not be written ({exc}); it is no longer kept"
            )
            self.close()

    def workload(self, ordinal: int, w: WorkloadRecord) -> None:
        self.write(
            {
                "op": "workload",
                "ordinal": ordinal,
                "model": w.model,
                "env": w.env,
                "task": w.task,
                "config": w.config,
            }
        )

    def episode(self, ordinal: int, record: EpisodeRecord) -> None:
        self.write({"op": "episode", "workload": ordinal, "record": record.to_dict()})

    def drop(self, ordinal: int, index: int, rel: str) -> None:
        self.write({"op": "drop", "workload": ordinal, "index": index, "path": rel})

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.close()
            except OSError:
                pass


def _lines(staging: Path) -> Iterator[dict[str, Any]]:
    """The journal's entries; a torn or unreadable line is skipped (the last one after a kill)."""
    with open_inside(staging, JOURNAL) as fh:
        bad = 0
        torn_last = False
        for raw in fh:
            try:
                entry = json.loads(raw)
            except ValueError:
                bad += 1
                torn_last = not raw.endswith(b"\n")
                continue
            if isinstance(entry, dict):
                yield entry
        if bad and not (bad == 1 and torn_last):
            warn(f"recorder: {bad} unreadable line(s) in {staging / JOURNAL} skipped")


def read_journal(staging: Path) -> tuple[dict[str, Any], ResultSet]:
    """The header and the document a staging dir's journal describes (media not yet checked)."""
    entries = _lines(staging)
    header = next(entries, None)
    if header is None or header.get("journal") != JOURNAL_SCHEMA:
        raise UnsafeBundle(f"{staging / JOURNAL} is not an rlmesh recorder journal")
    doc = ResultSet(str(header.get("resultSetId") or ""))
    by_ordinal: dict[int, WorkloadRecord] = {}
    for entry in entries:
        op = entry.get("op")
        try:
            if op == "workload":
                w = WorkloadRecord(
                    model=str(entry.get("model", "")),
                    env=str(entry.get("env", "")),
                    task=str(entry.get("task", "")),
                    config=dict(entry.get("config") or {}),
                )
                by_ordinal[int(entry["ordinal"])] = w
                doc.workloads.append(w)
            elif op == "episode":
                by_ordinal[int(entry["workload"])].episodes.append(
                    EpisodeRecord.from_dict(entry["record"])
                )
            elif op == "drop":
                w = by_ordinal[int(entry["workload"])]
                index, rel = int(entry["index"]), str(entry["path"])
                for i, ep in enumerate(w.episodes):
                    if ep.index == index:
                        w.episodes[i] = _without(ep, {rel})
        except (KeyError, TypeError, ValueError) as exc:
            warn(
                f"recorder: journal entry {str(entry)[:120]} skipped ({type(exc).__name__}: {exc})"
            )
    return header, doc


def _without(ep: EpisodeRecord, paths: set[str]) -> EpisodeRecord:
    import dataclasses

    media = tuple(m for m in ep.media if m.path not in paths)
    step_log = None if ep.step_log in paths else ep.step_log
    return dataclasses.replace(ep, media=media, step_log=step_log)


def _check_media(staging: Path, doc: ResultSet) -> int:
    """Drop media rows whose file is missing or not a complete video; return how many."""
    dropped = 0
    for w in doc.workloads:
        for i, ep in enumerate(w.episodes):
            bad = set()
            for m in ep.media:
                try:
                    ok = m.kind != "video" or video_file_ok(staging / m.path)
                    if m.kind != "video":
                        open_inside(staging, m.path).close()
                except (OSError, ValueError):
                    ok = False
                if not ok:
                    bad.add(m.path)
            if ep.step_log:
                try:
                    open_inside(staging, ep.step_log).close()
                except (OSError, ValueError):
                    bad.add(ep.step_log)
            if bad:
                dropped += len(bad)
                w.episodes[i] = _without(ep, bad)
    return dropped


def recover(
    staging: str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    archive: bool | str | None = None,
    remove: bool = True,
    recorded_at: str | None = None,
) -> Path:
    """Rebuild the bundle of a recorder that never exported (a killed or crashed run).

    Reads the staging dir's journal (every episode that finished before the end, with
    its media), drops media whose file is missing or was cut short, and exports the
    bundle to ``path`` like :meth:`Recorder.export` (folder or zip). The document gets
    ``"partial": true``. Then, with ``remove=True``, the staging dir is deleted (never
    while its owner process still runs). Frame rings left in ``/dev/shm`` by recording
    processes that are gone are removed too.

    Args:
        staging: A ``rlmesh-recorder-*`` staging dir (see :func:`orphans`), or a
            Recorder's staging dir kept after an exception.
        path: Where the bundle goes.
        archive: As in :meth:`Recorder.export`.
        remove: Delete the staging dir once the bundle is written.
        recorded_at: The ``recordedAt`` stamp (default: now).

    Raises:
        FileNotFoundError: ``staging`` has no journal.
        UnsafeBundle: the journal is not a recorder journal, or is a symlink.
    """
    src = Path(staging)
    target = Path(path)
    as_zip = archive_mode(archive, target)
    remove_dead_rings()
    header, doc = read_journal(src)
    dropped = _check_media(src, doc)
    if dropped:
        warn(
            f"recorder.recover: {dropped} media file(s) were missing or incomplete in {src}; recovered without them"
        )
    out = write_bundle(
        target, doc.to_dict(recorded_at=recorded_at), src, as_zip=as_zip, extra={"partial": True}
    )
    if remove:
        if owner_alive(header):
            warn(
                f"recorder.recover: {src} belongs to a running process (pid {header.get('pid')}); not removed"
            )
        else:
            shutil.rmtree(src, ignore_errors=True)
    return out


def orphans(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """The recorder staging dirs under ``directory`` (default: the temp dir) left by a dead process.

    Only dirs of the current user with a recorder journal are listed, oldest first;
    :func:`recover` turns one into a bundle. A dir whose owner ran on another host is
    not listed (its owner cannot be checked from here). The frame rings
    (``/dev/shm/rlmesh-rec-*``) of recording processes that are gone are removed on the way.
    """
    remove_dead_rings()
    base = Path(directory) if directory is not None else Path(tempfile.gettempdir())
    found: list[tuple[float, Path]] = []
    try:
        candidates = list(base.glob(STAGING_PREFIX + "*"))
    except OSError:
        return []
    uid = os.getuid() if hasattr(os, "getuid") else None
    for d in candidates:
        try:
            st = os.lstat(d)
            if not os.path.isdir(d) or os.path.islink(d) or (uid is not None and st.st_uid != uid):
                continue
            header = next(_lines(d), None)
        except (OSError, ValueError):
            continue
        if header is None or header.get("journal") != JOURNAL_SCHEMA:
            continue
        if owner_alive(header) is False:
            found.append((st.st_mtime, d))
    return [d for _, d in sorted(found)]


def finished_episodes(staging: Path) -> int:
    """How many finished episodes a staging dir's journal records (0 when unreadable)."""
    try:
        return sum(1 for entry in _lines(staging) if entry.get("op") == "episode")
    except (OSError, ValueError):
        return 0
