"""Point warnings at the user's call site, not at rlmesh internals (EVAL-4)."""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["user_stacklevel"]

_PKG = str(Path(__file__).resolve().parent.parent)


def user_stacklevel() -> int:
    """``stacklevel`` (for a ``warnings.warn`` in the caller) of the first frame outside rlmesh."""
    level = 1
    frame = sys._getframe(1)
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_PKG):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level
