"""One home for "run it in another process" (below ``serve``, ``eval``, ``ray`` and ``sandbox``).

- :mod:`.recipe`: :class:`EnvRecipe`, how an env is described and built in a worker;
- :mod:`.pickling`: what travels to a worker, and the one check that it can;
- :mod:`.process`: the worker start policy (a clean fork server, never the user's
  ``__main__``), the exit description, the stop routine, the exit guard;
- :mod:`.host`: ``usable_cpus``, ``pid_alive`` and ``tree_size``, what this host says;
- :mod:`.ray`: the one ``import_ray`` and ``init_ray``.
"""

from __future__ import annotations

from .pickling import dumps as dumps, loads as loads, portable_error as portable_error
from .process import (
    Spawner as Spawner,
    WorkerProcess as WorkerProcess,
    describe_exit as describe_exit,
    guard_at_exit as guard_at_exit,
    stop_processes as stop_processes,
    usable_cpus as usable_cpus,
)
from .recipe import Built as Built, EnvRecipe as EnvRecipe

__all__ = [
    "Built",
    "EnvRecipe",
    "Spawner",
    "WorkerProcess",
    "describe_exit",
    "dumps",
    "guard_at_exit",
    "loads",
    "portable_error",
    "stop_processes",
    "usable_cpus",
]
