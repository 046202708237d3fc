"""The startup marks of a serving process (DELTA-12): when imports, the env, the model and
the listener were ready, measured from process start.

The command lines that print them (``rlmesh serve``, ``rlmesh serve-model``,
``python -m rlmesh.serve``) live in :mod:`rlmesh._cli`. Env targets (``module:attr``, a
file target or a Gymnasium id) are built by :mod:`rlmesh._spawn.recipe`.
"""

from __future__ import annotations

import os
import time

__all__ = ["mark_startup", "startup_marks", "startup_text"]

_T0 = time.monotonic()
_MARKS: dict[str, float] = {}


def mark_startup(phase: str) -> None:
    """Record that startup ``phase`` (``imports``, ``env``, ``model``, ``listen``) ended now."""
    _MARKS[phase] = time.monotonic()


def _process_age_seconds() -> float | None:
    """Seconds since this process started, from /proc (None where unreadable)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def startup_marks() -> dict[str, str]:
    """``rlmesh.startup.<phase>_ms`` strings measured from process start (DELTA-12)."""
    age = _process_age_seconds()
    base = time.monotonic() - age if age is not None else _T0
    out = {f"rlmesh.startup.{k}_ms": f"{(v - base) * 1e3:.1f}" for k, v in _MARKS.items()}
    if age is not None:
        out["rlmesh.startup.process_ms"] = f"{(_T0 - base) * 1e3:.1f}"
    return out


def startup_text() -> str:
    """`` (startup: process 0.1s, imports 0.4s, ...)`` for the serving line, or ``""``."""
    marks = startup_marks()
    parts = []
    for phase in ("process", "imports", "env", "model", "listen"):
        v = marks.get(f"rlmesh.startup.{phase}_ms")
        if v is not None:
            parts.append(f"{phase} {float(v) / 1e3:.1f}s")
    return f" (startup: {', '.join(parts)})" if parts else ""
