"""``MultiBinary``: an array of 0/1 flags (SPC-30..SPC-32, OPP-25)."""

from __future__ import annotations

from typing import Any

from ._space import Space, adopt_spec
from ._spec import SpaceSpec

__all__ = ["MultiBinary"]


class MultiBinary(Space):
    """An array of ``shape`` whose elements are 0 or 1.

    Args:
        shape: An int (rank 1) or a sequence of positive ints, or a
            :class:`SpaceSpec` of kind ``multi_binary``.
        dtype: Keyword-only extension: ``"uint8"`` (default), ``"int8"`` or
            ``"bool"``; kept end to end (Gymnasium's MultiBinary is int8).

    Unlike the reference, values other than 0 and 1 are rejected (OPP-25).

    >>> m = MultiBinary((2, 3))
    >>> m, m.size, m.dims
    (MultiBinary((2, 3)), None, [2, 3])
    >>> m.contains([[0, 1, 1], [1, 0, 0]]), m.contains([[0, 2, 1], [1, 0, 0]])
    (True, False)
    """

    __slots__ = ()
    kind_name = "multi_binary"

    def __init__(self, shape: Any, *, dtype: Any = "uint8") -> None:
        spec = adopt_spec(shape, "multi_binary", "MultiBinary")
        self._init(spec if spec is not None else SpaceSpec._multi_binary(shape, dtype))

    @property
    def size(self) -> int | None:
        """The length of a rank-1 space, else ``None`` (SPC-30)."""
        dims = self._spec._shape
        return dims[0] if len(dims) == 1 else None

    @property
    def dims(self) -> list[int] | None:
        """The shape of a rank >= 2 space, else ``None`` (SPC-30)."""
        dims = self._spec._shape
        return list(dims) if len(dims) >= 2 else None
