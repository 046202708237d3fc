"""What this host says about its processes and files: ``usable_cpus``, ``pid_alive``, ``tree_size``."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pid_alive", "tree_size", "usable_cpus"]


def usable_cpus() -> int:
    """CPUs this process may run on at once: its affinity mask, capped by a cgroup v2 quota.

    The default worker count of a distributed run, and how many busy sessions a
    multi-session endpoint lets poll.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:  # "max 100000" or "<quota> <period>"
            quota, period = f.read().split()[:2]
        if quota != "max":
            cpus = min(cpus, int(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (one of another user's counts as running).

    Example:
        >>> pid_alive(os.getpid())
        True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tree_size(path: str | os.PathLike[str]) -> int:
    """The bytes of the files below directory ``path`` (links not followed; vanished files count 0)."""
    total = 0
    for root, _dirs, names in os.walk(Path(path)):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total
