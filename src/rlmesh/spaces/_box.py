"""``Box``: a (possibly bounded) array of numbers (SPC-10..SPC-14, DELTA-27)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._space import Space, adopt_spec
from ._spec import SpaceSpec

__all__ = ["Box"]


class Box(Space):
    """An array of ``shape`` with elements of ``dtype`` within ``[low, high]``.

    Args:
        low: The lower bound: a number, ``"-inf"``, ``None`` (open), an array-like
            of ``shape`` (an extension: the reference takes scalars only), or a
            :class:`SpaceSpec` of kind ``box`` to adopt.
        high: The upper bound, like ``low``; required unless ``low`` is a spec.
        shape: The shape; required unless ``low`` is a spec or an array bound
            fixes it. ``()`` makes a rank-0 Box (DESIGN "Decisions").
        dtype: One of the twelve dtypes (default ``"float32"``).

    Float dtypes keep float bounds (``bounds_kind`` ``uniform``, ``elementwise``
    or ``unbounded``). Integer and bool dtypes keep exact bounds (``typed_uniform``
    / ``typed_elementwise``): Python ints are never rounded through a float
    (DELTA-27), float bounds are truncated toward zero, and a bound outside the
    dtype raises ``ValueError``.

    Raises:
        TypeError: ``shape`` or ``high`` missing.
        ValueError: NaN bound, ``low > high``, a bound outside an integer dtype,
            an unknown dtype.

    >>> Box(-1.0, 1.0, (3,))
    Box(-1.0, 1.0, (3,), float32)
    >>> b = Box(0, 2**63 - 1, (2,), "int64")
    >>> b.bounds_kind, b.high
    ('typed_uniform', [9223372036854775807])
    >>> Box("-inf", "inf", (), "float64").sample().shape
    []
    """

    __slots__ = ()
    kind_name = "box"

    def __init__(
        self, low: Any, high: Any = None, shape: Any = None, dtype: Any = "float32"
    ) -> None:
        spec = adopt_spec(low, "box", "Box")
        if spec is None:
            if high is None:
                raise TypeError("Box: high is required (give a number, 'inf' or an array-like)")
            if shape is None:
                shape = _shape_from_bounds(low, high)
                if shape is None:
                    raise TypeError("Box: shape is required, e.g. Box(-1.0, 1.0, shape=(3,))")
            spec = SpaceSpec._box(shape, dtype, low, high)
        self._init(spec)

    @property
    def bounds_kind(self) -> str:
        """``unbounded``, ``uniform``, ``elementwise``, ``typed_uniform`` or ``typed_elementwise``."""
        return str(self._spec._d["bounds_kind"])

    @property
    def low(self) -> Any:
        """The lower bound in upstream form (SPC-12): ``None``, a float, or a flat list."""
        return _bound(self._spec._d["low"])

    @property
    def high(self) -> Any:
        """The upper bound in upstream form (SPC-12): ``None``, a float, or a flat list."""
        return _bound(self._spec._d["high"])


def _bound(b: Any) -> Any:
    return list(b) if isinstance(b, list) else b


def _shape_from_bounds(low: Any, high: Any) -> tuple[int, ...] | None:
    for b in (low, high):
        if isinstance(b, (list, tuple, np.ndarray)):
            return tuple(np.shape(b))
    return None
