"""The recorder's one way to warn: a ``UserWarning`` that can never raise (REC-4)."""

from __future__ import annotations

import warnings

__all__ = ["warn"]


def warn(message: str) -> None:
    """Issue a ``UserWarning`` that can never raise, even under ``-W error`` (REC-4)."""
    try:
        warnings.warn(message, UserWarning, stacklevel=3)
    except Exception:
        pass
