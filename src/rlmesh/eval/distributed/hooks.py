"""Hooks that know how to run inside workers (the recorder's capture registers here).

Ordinary :class:`~rlmesh.RunHooks` stay on the driver and hear about episodes as they
finish. A hooks type that needs the env's frames (a recorder) registers a *driver side*
with :func:`register_worker_hooks`; a distributed run then ships its picklable ``plan``
to every worker, where ``plan.open(core)`` returns a *worker side* whose per-episode
hooks run beside the episode and whose ``collect`` returns a picklable product (e.g.
the episode's videos). The driver hands every product back to ``absorb`` in episode
(seed) order, so what the hooks build looks as if one process had run the episodes.

The registry keeps ``eval`` free of imports from the packages above it: they call in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["DriverSide", "WorkerSide", "driver_side_for", "register_worker_hooks"]


class WorkerSide(Protocol):
    """Inside a worker: hooks per episode, then the episode's product."""

    def hooks_for(self, index: int, seed: int | None) -> Any: ...

    def collect(self, index: int, result: Any) -> Any: ...

    def close(self) -> None: ...


class DriverSide(Protocol):
    """On the driver: the plan to ship, and where the products go (in episode order)."""

    plan: Any

    def absorb(self, result: Any, payload: Any) -> None: ...

    def end(self, result: Any) -> None: ...


_REGISTRY: dict[type, Callable[[Any], DriverSide]] = {}


def register_worker_hooks(hooks_type: type, make: Callable[[Any], DriverSide]) -> None:
    """Register ``make(hooks) -> DriverSide`` for instances of ``hooks_type`` (and subclasses)."""
    _REGISTRY[hooks_type] = make


def driver_side_for(hooks: Any) -> DriverSide | None:
    """The registered driver side of ``hooks``, or ``None`` for ordinary hooks."""
    for klass in type(hooks).__mro__:
        make = _REGISTRY.get(klass)
        if make is not None:
            return make(hooks)
    return None
