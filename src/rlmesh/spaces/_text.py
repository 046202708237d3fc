"""``Text``: a string with bounded length over an optional charset (SPC-50/51)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._space import Space, adopt_spec
from ._spec import SpaceSpec

__all__ = ["Text"]


class Text(Space):
    """A ``str`` of ``min_length..max_length`` characters (Unicode code points).

    Args:
        max_length: The longest allowed length (> 0), or a :class:`SpaceSpec` of
            kind ``text``.
        min_length: The shortest allowed length; ``0`` (the empty string) is
            allowed here, unlike the reference (DESIGN "Decisions").
        charset: The allowed characters (a ``str`` or an iterable of characters;
            a set is sorted). ``None`` or ``""`` means unrestricted.

    >>> t = Text(8, min_length=0, charset="ab")
    >>> t, t.contains(""), t.contains("abba"), t.contains("abc")
    (Text(0, 8, charset="ab"), True, True, False)
    """

    __slots__ = ()
    kind_name = "text"

    def __init__(
        self, max_length: Any, min_length: int = 1, charset: str | Iterable[str] | None = None
    ) -> None:
        spec = adopt_spec(max_length, "text", "Text")
        self._init(spec if spec is not None else SpaceSpec._text(max_length, min_length, charset))

    @property
    def min_length(self) -> int:
        return int(self._spec._d["min_length"])

    @property
    def max_length(self) -> int:
        return int(self._spec._d["max_length"])

    @property
    def charset(self) -> str:
        """The allowed characters; ``""`` means unrestricted."""
        return str(self._spec._d["charset"])
