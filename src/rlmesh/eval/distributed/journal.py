"""The run journal: every finished episode on disk before the run moves on (``journal=PATH``).

Format: SQLite (standard library) in WAL mode with ``synchronous=FULL``. Each finished
episode is one ``INSERT OR IGNORE`` committed on its own, so a commit is durable when it
returns (the WAL is fsync'd) and a crash leaves either the whole row or none of it: no torn
last line to repair, as an append-only JSONL file would have after a kill mid-write. The
primary key is the episode index, so an episode is recorded at most once even when two
workers race on a retried episode; readers and writers in several processes are serialized
by SQLite's own locking.

Who writes: a worker on the driver's host (every processes worker, a Ray actor there)
records its own episodes right after they finish, so an episode that finished is journaled
even if the driver is killed a moment later; the driver records what Ray actors on other
hosts report.

The lock file ``PATH.lock``: every worker holds a shared ``flock`` on it while it lives and
the driver takes it exclusively before it reads the journal. After ``kill -9`` of a driver
its processes workers finish the episode they are running, record it and exit; a re-run
waits for them, so it never starts an episode a worker of the killed run is still
finishing. (Ray ends the actors of a dead driver at once: an episode finished in the
instant before and not yet committed runs again.)

The ``run`` table holds the run's identity (seeds, caps, model and env descriptions): a
journal is resumed only by the same run; another run is refused with the difference named.

No row is trusted blindly: on resume every row must decode into an ``EpisodeResult`` (types
checked field by field) whose index, seed and trial index are the ones the run's plan gives
that episode (and the row's own ``idx``/``seed`` columns agree). A row that does not is
refused with :class:`~rlmesh.errors.CorruptJournal`, naming the journal, the row and what
is wrong, before anything runs; so the resumed run's episodes are exactly ``0..n-1``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NoReturn

import msgspec

from ...errors import CorruptJournal
from .._results import EpisodeResult

__all__ = ["Journal", "JournalSpec", "RunLock"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS run (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (
    idx INTEGER PRIMARY KEY,
    seed INTEGER,
    result TEXT NOT NULL,
    worker TEXT NOT NULL,
    finished REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS timeouts (idx INTEGER PRIMARY KEY);
"""

#: How long a resumed run waits for the workers of a killed run to finish their episodes.
ORPHAN_WAIT_SECONDS = 600.0


def _connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=60.0, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db


def _encode(result: EpisodeResult) -> str:
    return json.dumps(asdict(result), allow_nan=True)


def _decode(text: Any) -> EpisodeResult:
    """A row's result, every field type-checked (``msgspec``: the error names the field).

    Raises:
        ValueError / TypeError: it does not decode into an ``EpisodeResult``.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected JSON text, got {type(text).__name__}")
    return msgspec.convert(json.loads(text), EpisodeResult)  # json: NaN rewards round-trip


@dataclass(frozen=True)
class JournalSpec:
    """Where a worker writes (picklable: sent to the processes backend's workers)."""

    path: str

    def open(self) -> Journal:
        lock = RunLock(self.path)
        lock.acquire_shared()
        return Journal(self.path, lock=lock)


class RunLock:
    """The ``PATH.lock`` flock (shared: a live worker; exclusive: a driver about to read)."""

    def __init__(self, path: str) -> None:
        self.path = f"{path}.lock"
        self.fd: int | None = None

    def _open(self) -> int:
        if self.fd is None:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self.fd

    def acquire_shared(self) -> None:
        if sys.platform == "win32":  # pragma: no cover - no flock there: no orphan protection
            return
        import fcntl

        fcntl.flock(self._open(), fcntl.LOCK_SH)

    def acquire_exclusive(self, timeout: float = ORPHAN_WAIT_SECONDS) -> None:
        """Wait (bounded) until no worker of an earlier run holds the journal, then hold it shared.

        Raises:
            TimeoutError: workers still hold it after ``timeout`` seconds.
        """
        if sys.platform == "win32":  # pragma: no cover
            return
        import fcntl

        fd = self._open()
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"journal {self.path[:-5]} is still in use after {timeout:.0f}s (another run, or workers of "
                        "an interrupted run finishing their episodes); wait for it or use another journal path"
                    ) from None
                if not told:
                    told = True
                    print(
                        f"rlmesh: journal {self.path[:-5]} is in use (workers of an interrupted run finishing "
                        "their episodes?); waiting",
                        file=sys.stderr,
                        flush=True,
                    )
                time.sleep(0.05)
        fcntl.flock(fd, fcntl.LOCK_SH)  # a shared hold: our workers join it, another driver waits

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)


class Journal:
    """One open journal (the driver's or a worker's connection)."""

    def __init__(self, path: str | os.PathLike[str], *, lock: RunLock | None = None) -> None:
        self.path = os.fspath(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.lock = lock
        self.db = _connect(self.path)
        self.db.executescript(_SCHEMA)

    @classmethod
    def open_for_run(cls, path: str | os.PathLike[str], identity: dict[str, Any]) -> Journal:
        """The driver's journal: waits out a previous run's workers, checks the identity.

        Raises:
            ValueError: the journal belongs to another run (the differing fields are named).
            TimeoutError: the journal stays in use.
        """
        if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"journal= takes a file path, got {type(path).__name__}")
        lock = RunLock(os.fspath(path))
        lock.acquire_exclusive()
        try:
            self = cls(path, lock=lock)
            wanted = json.dumps(identity, sort_keys=True)
            row = self.db.execute("SELECT value FROM run WHERE key='identity'").fetchone()
            if row is None:
                self.db.execute("INSERT INTO run VALUES ('identity', ?)", (wanted,))
            elif row[0] != wanted:
                old = json.loads(row[0])
                diff = sorted(k for k in set(old) | set(identity) if old.get(k) != identity.get(k))
                raise ValueError(
                    f"journal {self.path} was written by a different run (differs in: {', '.join(diff)}); "
                    "resume only the same run (same seeds, caps, model and env), or pass a new journal path"
                )
        except BaseException:
            lock.release()
            raise
        return self

    def record(self, result: EpisodeResult, worker: str, *, timed_out: bool = False) -> None:
        """Append one finished episode (committed and fsync'd when this returns); ``timed_out``:
        one stopped at its deadline and kept as timed out (so a resumed run says so too)."""
        row = (result.index, result.seed, _encode(result), worker, time.time())
        if not timed_out:
            self.db.execute("INSERT OR IGNORE INTO episodes VALUES (?, ?, ?, ?, ?)", row)
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.execute("INSERT OR IGNORE INTO episodes VALUES (?, ?, ?, ?, ?)", row)
            self.db.execute("INSERT OR IGNORE INTO timeouts VALUES (?)", (result.index,))
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def recorded(self, task: tuple[int, int | None, int]) -> EpisodeResult | None:
        """Episode ``task`` as a worker recorded it (checked as :meth:`done` checks a row), or
        ``None``: a worker lost right after it finished an episode may have journaled it."""
        index, seed, trial = task
        row = self.db.execute(
            "SELECT rowid, idx, seed, result FROM episodes WHERE idx = ?", (index,)
        ).fetchone()
        if row is None:
            return None
        rowid, idx, seed_column, text = row
        return self._checked(rowid, idx, seed_column, text, {index: (seed, trial)})

    def timed_out(self) -> frozenset[int]:
        """The episodes recorded as timed out."""
        return frozenset(int(i) for (i,) in self.db.execute("SELECT idx FROM timeouts"))

    def done(self, plan: Iterable[tuple[int, int | None, int]]) -> dict[int, EpisodeResult]:
        """The episodes already recorded, by index, each checked against the run's ``plan``
        (``(index, seed, trial)`` per episode).

        Raises:
            CorruptJournal: a row does not decode, or names an episode, a seed or a trial
                index the plan does not give it (the journal and the row are named).
        """
        planned = {index: (seed, trial) for index, seed, trial in plan}
        try:
            rows = self.db.execute(
                "SELECT rowid, idx, seed, result FROM episodes ORDER BY rowid"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise CorruptJournal(
                f"journal {self.path} cannot be read ({exc}); move it aside and run again "
                "(every episode runs again)",
                path=self.path,
            ) from exc
        out: dict[int, EpisodeResult] = {}
        for rowid, idx, seed, text in rows:
            out[idx] = self._checked(rowid, idx, seed, text, planned)
        return out

    def _checked(
        self, rowid: int, idx: Any, seed: Any, text: Any, planned: dict[int, tuple[Any, int]]
    ) -> EpisodeResult:
        """One row's result, or :class:`CorruptJournal` saying what is wrong with it."""
        try:
            result = _decode(text)
        except (TypeError, ValueError) as exc:  # msgspec.ValidationError is a ValueError
            self._refuse(rowid, idx, f"its result does not decode ({exc})", exc)
        if isinstance(idx, bool) or not isinstance(idx, int) or idx not in planned:
            self._refuse(
                rowid, idx, f"the run has no episode {idx!r} (it has 0..{len(planned) - 1})"
            )
        want_seed, want_trial = planned[idx]
        if result.index != idx:
            self._refuse(rowid, idx, f"its result is episode {result.index}'s")
        if seed != result.seed:
            self._refuse(
                rowid, idx, f"its seed column says {seed!r} but its result says {result.seed!r}"
            )
        if result.seed != want_seed:
            self._refuse(
                rowid,
                idx,
                f"it ran seed {result.seed!r}, but this run's episode {idx} has seed {want_seed!r}",
            )
        if result.trial != want_trial:
            self._refuse(
                rowid,
                idx,
                f"it has trial index {result.trial!r}, but this run's episode {idx} has {want_trial}",
            )
        return result

    def _refuse(
        self, rowid: int, idx: Any, what: str, cause: BaseException | None = None
    ) -> NoReturn:
        raise CorruptJournal(
            f"journal {self.path}, the row of episode {idx!r}: {what}. The journal was edited, "
            "damaged or written by something else: move it aside and run again (every episode runs "
            f"again), or delete that row (sqlite3 {self.path} 'DELETE FROM episodes WHERE "
            f"idx={idx!r}') to run only that episode again",
            path=self.path,
            row=rowid,
            index=idx,
        ) from cause

    def close(self) -> None:
        try:
            self.db.close()
        finally:
            if self.lock is not None:
                self.lock.release()
                self.lock = None
