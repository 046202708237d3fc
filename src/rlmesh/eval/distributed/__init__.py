"""Distributed evaluation: ``rlmesh.run(..., workers=...)`` over worker processes or Ray actors.

The single-host drive (``rlmesh.eval``'s other modules) runs one episode after another in
this process; this package spreads a run's episodes over workers that each run that same
drive, and merges what they report:

- :mod:`.workers`: ``rlmesh.Workers`` (the configuration) and ``rlmesh.WorkerPool`` (warm
  workers reused by many runs);
- :mod:`.run`: check a run, build its job, plan and journal; :mod:`.driver`: dispatch,
  retry, journal, merge;
- :mod:`.backend`: :class:`~.backend.WorkerBackend`, the seam both backends implement:
  :mod:`.processes` (local processes started by :mod:`rlmesh._spawn.process`) and
  :mod:`.ray_actors` (Ray actors);
- :mod:`.job` (what travels to the workers) and :mod:`.host` (what a worker does with it);
- :mod:`.journal` (resume after a crash), :mod:`.hooks` (hooks that run inside the
  workers, such as a recorder's capture); the live progress line is every run's
  (:mod:`rlmesh.eval._progress`).
"""

from __future__ import annotations

from .backend import WorkerBackend as WorkerBackend
from .hooks import register_worker_hooks as register_worker_hooks
from .run import run_distributed as run_distributed, run_grouped as run_grouped
from .workers import (
    WorkerPool as WorkerPool,
    Workers as Workers,
    normalize_workers as normalize_workers,
)

__all__ = [
    "WorkerBackend",
    "WorkerPool",
    "Workers",
    "normalize_workers",
    "register_worker_hooks",
    "run_distributed",
    "run_grouped",
]
