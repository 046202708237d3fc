"""Checks of plain keyword values (counts, seconds) shared by serve, eval and ray.

Each caller keeps its own wording: the checks take the pieces of their messages.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check_count", "positive_seconds"]


def check_count(name: str, value: Any, minimum: int) -> int:
    """``value``, an ``int`` (not a ``bool``) of at least ``minimum``.

    >>> check_count("episodes", 3, 0)
    3
    >>> check_count("n", 0, 1)
    Traceback (most recent call last):
    ...
    ValueError: n must be >= 1, got 0
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def positive_seconds(
    name: str, value: Any, *, kind: str = "a number", positive: str = "positive"
) -> float | None:
    """``None``, or ``value`` (a finite number > 0, not a ``bool``) as a ``float``.

    The errors read ``"{name} must be {kind} or None, got {type}"`` (``TypeError``) and
    ``"{name} must be {positive}"`` (``ValueError``; ``{value!r}`` in ``positive`` is the value).

    >>> positive_seconds("idle_timeout_seconds", 2)
    2.0
    >>> positive_seconds("t", -1, kind="a number of seconds", positive="above 0, got {value!r}")
    Traceback (most recent call last):
    ...
    ValueError: t must be above 0, got -1
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be {kind} or None, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be " + positive.format(value=value))
    return float(value)
