"""``MultiDiscrete``: an array of independent Discrete values (SPC-40/41)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from ._space import Space, adopt_spec
from ._spec import SpaceSpec

__all__ = ["MultiDiscrete"]


class MultiDiscrete(Space):
    """Element ``i`` is an integer in ``[start[i], start[i] + nvec[i])``.

    Args:
        nvec: The number of values per element: a list (rank 1) or nested rows
            (rank >= 2, as Gymnasium allows), or a :class:`SpaceSpec` of kind
            ``multi_discrete``.
        dtype: An integer dtype (default ``"int64"``), kept end to end.
        start: Keyword-only extension: per-element offsets (an int or the shape
            of ``nvec``); ``None`` means all zeros. Kept end to end.

    Raises:
        ValueError: a non-positive ``nvec`` entry, ragged rows, a non-integer
            dtype, or a range that does not fit the dtype.

    >>> md = MultiDiscrete([2, 3], start=[1, -1])
    >>> md, md.nvec, md.start, md.contains([2, 1]), md.contains([0, 0])
    (MultiDiscrete([2, 3], start=[1, -1]), [2, 3], [1, -1], True, False)
    """

    __slots__ = ()
    kind_name = "multi_discrete"

    def __init__(self, nvec: Any, dtype: Any = "int64", *, start: Any = None) -> None:
        spec = adopt_spec(nvec, "multi_discrete", "MultiDiscrete")
        self._init(spec if spec is not None else SpaceSpec._multi_discrete(nvec, dtype, start))

    @property
    def nvec(self) -> list[Any]:
        """``nvec`` as a flat list (rank 1) or nested rows (SPC-40)."""
        return copy.deepcopy(self._spec._d["nvec"])

    @property
    def start(self) -> list[Any]:
        """The per-element offsets in the form of :attr:`nvec` (zeros when none were given)."""
        d = self._spec._d
        if "start" in d:
            offsets: list[Any] = copy.deepcopy(d["start"])
            return offsets
        zeros: list[Any] = np.zeros(self._spec._shape, dtype=np.int64).tolist()
        return zeros
