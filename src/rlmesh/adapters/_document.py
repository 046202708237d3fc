"""What ``EnvTags`` and ``ModelSpec`` share: JSON and metadata forms (ADP-47..49),
immutable value semantics (equality and hash over ``_key()``, ADP-27), and their two
parts (a tree and an action layout) with the unchecked door the codec and pickle use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ._check import fail
from ._codec import dumps, loads

if TYPE_CHECKING:
    from ._action import Action

__all__ = ["JsonDocument", "TreeAndAction"]

_D = TypeVar("_D", bound="JsonDocument")
_T = TypeVar("_T", bound="TreeAndAction")


class JsonDocument:
    """``to_json``/``from_json`` and ``to_metadata``/``from_metadata`` over ``to_dict``/``from_dict``.

    Subclasses define ``to_dict``, ``from_dict``, the metadata key they live under, a
    ``_hash`` slot and ``_key()``: the hashable rendering equality and hashing use.
    Instances are immutable.
    """

    __slots__ = ()
    _METADATA_KEY: ClassVar[str]
    _METADATA_NOUN: ClassVar[str] = "metadata"
    _hash: int | None

    def _key(self) -> Any:  # pragma: no cover - defined by subclasses
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return bool(self._key() == other._key())

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(self._key()))
        return self._hash  # type: ignore[return-value]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def to_dict(self) -> dict[str, Any]:  # pragma: no cover - defined by subclasses
        raise NotImplementedError

    @classmethod
    def from_dict(cls: type[_D], data: Mapping[str, Any]) -> _D:  # pragma: no cover
        raise NotImplementedError

    def to_json(self) -> str:
        """JSON of :meth:`to_dict` with sorted keys; NaN/Infinity refused (ADP-47)."""
        return dumps(self.to_dict())

    @classmethod
    def from_json(cls: type[_D], text: str | bytes) -> _D:
        """``from_dict(json.loads(text))``."""
        return cls.from_dict(loads(text))

    def to_metadata(self) -> dict[str, Any]:
        """``{KEY: self.to_dict()}``, ready to merge into metadata (ADP-49)."""
        return {self._METADATA_KEY: self.to_dict()}

    @classmethod
    def from_metadata(cls: type[_D], metadata: Mapping[str, Any] | None) -> _D | None:
        """The document stored in metadata, or ``None`` when absent (ADP-49)."""
        key = cls._METADATA_KEY
        if metadata is None or key not in metadata:
            return None
        value = metadata[key]
        if not isinstance(value, Mapping):
            raise fail(
                "invalid_tag",
                f"{cls._METADATA_NOUN} {key!r} must hold a mapping, got {type(value).__name__}",
            )
        return cls.from_dict(value)


class TreeAndAction(JsonDocument):
    """A document of two parts: a tree (``EnvTags``' observation tags, ``ModelSpec``'s input)
    and the :class:`Action` layout (the env's, or the one the model emits).

    The subclass checks both in ``__init__`` and stores them with :meth:`_set`;
    :meth:`_unchecked` builds one from parts already checked (the codec's tolerant door,
    and unpickling).
    """

    __slots__ = ("_action", "_hash", "_tree")
    _tree: Any
    _action: Action
    _hash: int | None

    def _set(self, tree: Any, action: Action) -> None:
        object.__setattr__(self, "_tree", tree)
        object.__setattr__(self, "_action", action)
        object.__setattr__(self, "_hash", None)

    @classmethod
    def _unchecked(cls: type[_T], tree: Any, action: Action) -> _T:
        self = object.__new__(cls)
        self._set(tree, action)
        return self

    def __reduce__(self) -> Any:
        return (type(self)._unchecked, (self._tree, self._action))
