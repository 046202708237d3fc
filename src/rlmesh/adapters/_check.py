"""Value validators shared by the spec constructors and the JSON codec.

Messages are author-facing and never leak Python type names where the spec
pins wording (ADP-50..ADP-53). Constructors raise ``ValueError``/``TypeError``;
the codec re-raises them as :class:`~rlmesh.errors.AdapterResolutionError`
with the location prepended.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import AdapterResolutionError
from ._roles import ROTATION_DIMS

__all__ = [
    "MAX_COUNT",
    "check_choice",
    "check_count",
    "check_encoding_set",
    "check_labels",
    "check_number",
    "check_pair",
    "check_reshape",
    "check_role",
    "check_scale",
    "check_width",
    "fail",
]

#: Upper bound for count fields (ADP-50): 2**24.
MAX_COUNT = 16777216


def fail(code: str, message: str) -> AdapterResolutionError:
    """Build an :class:`AdapterResolutionError` with its stable ``code`` (ADP-2)."""
    return AdapterResolutionError(message, code=code)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(
        x, (bool, np.bool_)
    )


def check_role(role: Any, what: str = "role") -> str:
    """A role is a non-empty string."""
    if not isinstance(role, str):
        raise TypeError(
            f"{what} must be a string (a role constant or any agreed string), got {role!r}"
        )
    if not role:
        raise ValueError(f"{what} must be a non-empty string")
    return role


def check_count(value: Any, name: str, *, minimum: int = 0) -> int:
    """A non-negative integer no larger than 2**24 (ADP-50)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    v = int(value)
    if v < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {v}")
    if v > MAX_COUNT:
        raise ValueError(f"{name} must be no larger than {MAX_COUNT}, got {v}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


def check_width(dim: Any, labels: tuple[str, ...] | None, where: str, *, too_small: str) -> int:
    """A slice width (an ``Actuator``'s or a ``Field``'s ``dim``): ``dim``, or the number of
    ``labels`` when only they are given; an integer >= 1 that the labels, if any, match.

    ``where`` starts the messages (``"actuator 'gripper'"``); ``too_small`` is the
    ``dim must be >= 1`` message, worded by the caller (ADP-25 names no role for a field).
    """
    if dim is None and labels is not None:
        dim = len(labels)
    if dim is None:
        raise ValueError(f"{where}: dim is required (the slice width)")
    try:
        width = check_count(dim, f"{where}: dim")
    except ValueError:
        raise ValueError(f"{too_small}, got {dim!r}") from None
    if width < 1:
        raise ValueError(f"{too_small}, got {width}")
    if labels is not None and len(labels) != width:
        raise ValueError(f"{where}: {len(labels)} labels do not match dim {width}")
    return width


def check_number(value: Any, name: str) -> float:
    """A finite real number (bools are refused)."""
    if not _is_number(value):
        raise ValueError(f"{name}: expected a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}; omit it to mean unbounded")
    return v


def check_pair(value: Any, name: str = "range") -> tuple[float, float]:
    """A finite ``(min, max)`` pair with ``min <= max`` (ADP-51)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise ValueError(f"{name} must be a pair of numbers [min, max], got {value!r}")
    items = list(value)
    if len(items) != 2:
        raise ValueError(f"{name} must be a pair of numbers [min, max], got {len(items)}")
    lo, hi = (check_number(x, name) for x in items)
    if lo > hi:
        raise ValueError(f"{name} [{lo}, {hi}] must have min <= max (min must be <= max)")
    return lo, hi


def check_scale(value: Any, name: str) -> float | tuple[float, ...]:
    """A scalar or a non-empty per-axis sequence of finite numbers (DELTA-65)."""
    if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (str, bytes)):
        items = tuple(check_number(x, name) for x in value)
        if not items:
            raise ValueError(f"{name} must be a number or a non-empty sequence of numbers")
        return items
    return check_number(value, name)


def check_choice(value: Any, choices: Sequence[str], name: str) -> str:
    """One of a closed vocabulary."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_reshape(value: Any) -> tuple[int, ...]:
    """Reshape sizes: whole numbers >= -1 with at most one -1 to infer (ADP-52)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise ValueError(f"reshape must be a list of sizes, got {value!r}")
    out: list[int] = []
    for x in value:
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise ValueError(f"reshape sizes must each be a whole number, got {x!r}")
        if int(x) < -1:
            raise ValueError(f"reshape sizes must be >= 0, or -1 to infer one axis, got {int(x)}")
        out.append(int(x))
    if out.count(-1) > 1:
        raise ValueError(f"reshape may contain at most one -1 (the axis to infer), got {out}")
    return tuple(out)


def check_encoding_set(value: Any, name: str = "encoding") -> str | tuple[str, ...] | None:
    """A rotation accept-set: a name or an ordered list of names (ADP-13).

    A one-element list canonicalizes to the bare string; duplicates are dropped
    keeping the first; an empty list is an error. Unknown names are kept (they
    are ignored, or refused when bare, at resolve).
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, bytes):
        items: list[str] = []
        for x in value:
            if type(x).__name__ == "CustomEncoding":  # CNF2-B4: a value error, not a type error
                raise ValueError(
                    f"{name} accept-set may hold only encoding names, got a CustomEncoding; a custom "
                    "encoding is declared alone (encoding=CustomEncoding(...)), never inside an accept-set"
                )
            if not isinstance(x, str):
                raise TypeError(f"{name} accept-set members must be encoding names, got {x!r}")
            if x not in items:
                items.append(x)
        if not items:
            raise ValueError(f"{name} accept-set must name at least one encoding")
        return items[0] if len(items) == 1 else tuple(items)
    raise TypeError(
        f"{name} must be an encoding name or a list of names "
        f"(one of {sorted(ROTATION_DIMS)}), got {value!r}"
    )


def check_labels(value: Any, name: str = "labels") -> tuple[str, ...] | None:
    """Axis labels: a non-empty sequence of distinct strings (DELTA-64)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a sequence of strings, got {value!r}")
    items = tuple(value)
    if not items:
        raise ValueError(f"{name} must not be empty")
    for x in items:
        if not isinstance(x, str):
            raise TypeError(f"{name} entries must be strings, got {x!r}")
    if len(set(items)) != len(items):
        raise ValueError(f"{name} must not repeat a label, got {list(items)}")
    return items


def check_optional_str(value: Any, choices: Sequence[str], name: str) -> str | None:
    """``None`` or one of a closed vocabulary."""
    return None if value is None else check_choice(value, choices, name)
