"""``Discrete``: one integer in ``[start, start + n)`` (SPC-20/21)."""

from __future__ import annotations

from typing import Any

from ._space import Space, adopt_spec
from ._spec import SpaceSpec

__all__ = ["Discrete"]


class Discrete(Space):
    """One integer in ``[start, start + n)``.

    Args:
        n: The number of values (> 0), or a :class:`SpaceSpec` of kind ``discrete``.
        start: The smallest value (may be negative).
        dtype: An integer dtype (default ``"int64"``); the whole range must fit it.
            It is kept end to end, Gymnasium conversion included.

    Raises:
        ValueError: ``n <= 0``, a non-integer dtype, or a range that overflows it.
        TypeError: ``n`` or ``start`` not an integer.

    >>> d = Discrete(3, start=-1)
    >>> d, d.n, d.start, d.contains(1), d.contains(2)
    (Discrete(3, start=-1), 3, -1, True, False)
    """

    __slots__ = ()
    kind_name = "discrete"

    def __init__(self, n: Any, start: Any = 0, dtype: Any = "int64") -> None:
        spec = adopt_spec(n, "discrete", "Discrete")
        self._init(spec if spec is not None else SpaceSpec._discrete(n, start, dtype))

    @property
    def n(self) -> int:
        """The number of values."""
        return int(self._spec._d["n"])

    @property
    def start(self) -> int:
        """The smallest value."""
        return int(self._spec._d["start"])
