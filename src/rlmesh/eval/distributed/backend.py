"""The seam between a distributed run's driver and where its workers live.

A :class:`WorkerBackend` owns worker *slots* (``0..n-1``); each slot holds at most one
worker (a local process, a Ray actor). The driver (:mod:`.driver`) and a warm pool
(:class:`~.workers.WorkerPool`) talk to a backend through these methods only, so the
``processes`` backend (:mod:`.processes`) and the ``ray`` backend (:mod:`.ray_actors`)
are interchangeable; both are checked against this Protocol by mypy (they are assigned
to ``WorkerBackend``-typed names) and by ``tests/unit/eval/test_worker_backend.py``.

A worker's life on a slot: :meth:`~WorkerBackend.spawn` (no job yet),
:meth:`~WorkerBackend.assign` (build the run's env and model: an ``("ready", slot,
info)`` or ``("setup_failed", slot, error)`` event follows), :meth:`~WorkerBackend.submit`
episodes (each answered by ``("done", slot, outcome)`` or ``("failed", slot, index,
error)``), then :meth:`~WorkerBackend.release` (a pool: drop the run's env and model,
``("released", slot)``) or :meth:`~WorkerBackend.close`. A worker that dies is reported as
``("lost", slot, reason)`` -- ``reason`` one line saying how it ended.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

__all__ = ["EVENTS", "Event", "Task", "WorkerBackend"]

#: One episode for a worker: ``(index, seed, trial index)``.
Task = tuple[int, int | None, int]
#: ``(kind, slot, *details)``; ``kind`` is one of :data:`EVENTS`.
Event = tuple[Any, ...]
#: The event kinds a backend's :meth:`~WorkerBackend.poll` returns.
EVENTS = ("ready", "setup_failed", "done", "failed", "released", "lost")


class WorkerBackend(Protocol):
    """Where a distributed run's workers live (see the module docstring)."""

    #: ``"processes"`` or ``"ray"``.
    name: str

    def set_job(self, job_bytes: bytes, journal_path: str | None) -> None:
        """Name the run's pickled job (and its journal) for the :meth:`assign` calls to come."""
        ...

    def spawn(self, slot: int, label: str) -> None:
        """Start a worker in ``slot`` (replacing a dead one); it holds no job yet."""
        ...

    def has_worker(self, slot: int) -> bool:
        """A live worker sits in ``slot``."""
        ...

    def assign(self, slot: int, label: str) -> bool:
        """Send the run's job to ``slot``'s worker (``False``: no live worker there)."""
        ...

    def submit(self, slot: int, task: Task) -> bool:
        """Hand ``slot``'s worker one episode (``False``: no live worker there)."""
        ...

    def alive(self, slots: Iterable[int] | None = None) -> int:
        """Live workers (of ``slots`` only, when given)."""
        ...

    def poll(self, timeout: float) -> list[Event]:
        """Wait up to ``timeout`` seconds; the events that arrived."""
        ...

    def wait_started(self, slots: list[int], timeout: float) -> None:
        """Block until every worker in ``slots`` runs (a pool's start-up).

        Raises:
            TimeoutError: not within ``timeout`` seconds.
            RuntimeError: a worker died while starting.
        """
        ...

    def release(self, slots: list[int], grace: float) -> None:
        """Have the workers in ``slots`` drop their run's env and model; stop one that does
        not answer within ``grace`` seconds."""
        ...

    def kill(self, slot: int) -> None:
        """Stop ``slot``'s worker now (lost, stuck, or no longer needed)."""
        ...

    def stop(self, slot: int) -> list[Event]:
        """Stop ``slot``'s worker now, however stuck it is (an episode past its deadline), and
        return what it had reported before it stopped (the episodes it finished), in order.

        No ``("lost", ...)`` event follows: the driver stopped it and knows why.
        """
        ...

    def close(self, *, force: bool) -> None:
        """Stop every worker: politely (each closes its env and model) unless ``force``."""
        ...
