"""Ray, started in one place: the one import (naming the extra) and the one ``init``.

Distributed evaluation (``rlmesh.Workers(backend="ray")``) and env fleets
(``rlmesh.ray.EnvFleet``) both start Ray here. Ray is imported on first use only, with
``importlib`` (the package ``rlmesh.ray`` must never shadow the real one).

:func:`init_ray` uses a Ray this process already initialized; connects to ``address``
(``"auto"``, ``"ray://..."``, ``host:port``) or to the cluster ``RAY_ADDRESS`` names; and
otherwise starts a new local Ray on 127.0.0.1 (``address="local"``: never one that
``ray start`` or another program left recorded in ``/tmp/ray``). Ray's own implicit start
would advertise the host's network address and the workers' endpoints would bind it;
a Ray started here has nothing to reach beyond this machine.

What Ray ships to its actors is checked before any actor starts, by the same check as
for worker processes (:func:`rlmesh._spawn.pickling.dumps`): Ray's ``cloudpickle`` is the
same library.
"""

from __future__ import annotations

import importlib
import os
import time
from typing import Any

from ..errors import DependencyMissing
from .process import usable_cpus

__all__ = ["cluster_cpus", "import_ray", "init_ray"]


def import_ray(who: str = "this", alternative: str = "") -> Any:
    """``import ray``, or a :class:`~rlmesh.errors.DependencyMissing` naming the extra.

    Args:
        who: What needs Ray, for the message (``"EnvFleet"``, ``"workers= with backend='ray'"``).
        alternative: What to use without Ray, appended to the message.
    """
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        tail = f", or {alternative}" if alternative else ""
        raise DependencyMissing(
            f'{who} needs Ray ({exc}): pip install ray (the "ray" extra of rlmesh-py){tail}',
            name="ray",
        ) from exc


def init_ray(address: str | None = None, *, log_to_driver: bool = True) -> tuple[bool, float]:
    """Make sure Ray is initialized: ``(started or connected here, seconds it took)``.

    Args:
        address: A cluster to connect to (``"auto"``, ``"ray://host:10001"``, ``host:port``);
            ``None``: ``RAY_ADDRESS`` when set, else a new local Ray on loopback.
        log_to_driver: Forward the workers' stdout/stderr to this process.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False, 0.0
    quiet: dict[str, Any] = {"include_dashboard": False}
    if not log_to_driver:
        quiet.update(log_to_driver=False, configure_logging=False)
    t0 = time.perf_counter()
    if address is not None:
        ray.init(address=address, **quiet)
    elif os.environ.get("RAY_ADDRESS"):
        ray.init(**quiet)  # Ray reads the cluster's address from the environment
    else:
        ray.init(address="local", _node_ip_address="127.0.0.1", **quiet)
    return True, time.perf_counter() - t0


def cluster_cpus() -> int:
    """CPUs of the Ray cluster this process is connected to (this machine's when none)."""
    ray = import_ray()
    if not ray.is_initialized():
        return usable_cpus()
    return max(1, int(ray.cluster_resources().get("CPU", 1)))
