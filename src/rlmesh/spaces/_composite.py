"""``Dict`` and ``Tuple``: composite spaces (SPC-60..SPC-63, SMP-3/SMP-4).

Children are wrappers bound to the parent's bridge (SPC-72). The parent samples
the whole tree from its own generator in declared order; each child keeps its
own generator, so seeding the parent does not seed ``parent["k"]`` (SMP-4).
Dict keys keep the order they were declared in, end to end (OPP-12).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from types import MappingProxyType
from typing import Any

from ._space import Space, adopt_spec, space_from_spec
from ._spec import SpaceSpec

__all__ = ["Dict", "Tuple"]


def _child_spec(value: Any, where: str) -> SpaceSpec:
    if isinstance(value, Space):
        return value.spec
    if isinstance(value, SpaceSpec):
        return value
    raise TypeError(
        f"{where} must be an rlmesh space or SpaceSpec, got {type(value).__name__}; "
        "convert Gymnasium spaces with rlmesh.spaces.from_gymnasium_space(...)"
    )


def _child(value: Any, spec: SpaceSpec, parent: Space) -> Space:
    # Keep a wrapper the caller gave us when it already uses the parent's bridge.
    if isinstance(value, Space) and value._bridge is parent._bridge:
        return value
    return space_from_spec(spec, bridge=parent._bridge)


class Dict(Space):
    """A mapping of named child spaces, in declared key order.

    Args:
        spaces: A mapping of non-empty ``str`` keys to spaces (wrappers or
            :class:`SpaceSpec`), or a :class:`SpaceSpec` of kind ``dict``.

    Read-only mapping access (SPC-60): ``space["k"]``, iteration over keys,
    ``"k" in space``, ``len``, ``keys()``, ``values()``, ``items()`` and the
    immutable ``spaces`` mapping. Note that ``in`` tests *keys*; use
    :meth:`contains` for values.

    Raises:
        ValueError: an empty or non-string key, or a spec of another kind.
        TypeError: a child that is not a space.

    >>> from rlmesh.spaces import Discrete, Text
    >>> d = Dict({"z": Discrete(2), "a": Text(4)})
    >>> list(d), "z" in d, d["z"], len(d)
    (['z', 'a'], True, Discrete(2), 2)
    >>> d.contains({"a": "hi", "z": 1})
    True
    """

    __slots__ = ("_children",)
    kind_name = "dict"

    _children: dict[str, Space]

    def __init__(self, spaces: Mapping[str, Any] | SpaceSpec | Space) -> None:
        spec = adopt_spec(spaces, "dict", "Dict")
        if spec is not None:
            self._init(spec)
            return
        if isinstance(spaces, SpaceSpec):  # pragma: no cover - adopt_spec handles it
            raise ValueError("Dict needs a dict space spec")
        if not isinstance(spaces, Mapping):
            raise TypeError(f"Dict expects a mapping of spaces, got {type(spaces).__name__}")
        for k in spaces:
            if not isinstance(k, str) or not k:
                raise ValueError(f"Dict keys must be non-empty strings, got {k!r}")
        specs = {k: _child_spec(v, f"Dict child {k!r}") for k, v in spaces.items()}
        self._init(SpaceSpec._dict(specs))
        self._children = {k: _child(v, specs[k], self) for k, v in spaces.items()}

    def _setup(self) -> None:
        self._children = {
            str(k): space_from_spec(v, bridge=self._bridge) for k, v in self._spec._children()
        }

    @property
    def spaces(self) -> Mapping[str, Space]:
        """The children as an immutable mapping, in declared order."""
        return MappingProxyType(self._children)

    def __getitem__(self, key: str) -> Space:
        return self._children[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._children)

    def __contains__(self, key: Any) -> bool:  # SPC-60: key membership
        return key in self._children

    def __len__(self) -> int:
        return len(self._children)

    def keys(self) -> KeysView[str]:
        return self._children.keys()

    def values(self) -> ValuesView[Space]:
        return self._children.values()

    def items(self) -> ItemsView[str, Space]:
        return self._children.items()


class Tuple(Space):
    """An ordered sequence of child spaces.

    Args:
        spaces: An iterable of spaces (wrappers or :class:`SpaceSpec`), or a
            :class:`SpaceSpec` of kind ``tuple``.

    Values are tuples (lists are accepted too) of the right arity.

    >>> from rlmesh.spaces import Discrete
    >>> t = Tuple([Discrete(2), Discrete(3)])
    >>> t, t[1], len(t), t.contains([1, 2]), t.contains((1,))
    (Tuple(Discrete(2), Discrete(3)), Discrete(3), 2, True, False)
    """

    __slots__ = ("_children",)
    kind_name = "tuple"

    _children: tuple[Space, ...]

    def __init__(self, spaces: Iterable[Any] | SpaceSpec | Space) -> None:
        spec = adopt_spec(spaces, "tuple", "Tuple")
        if spec is not None:
            self._init(spec)
            return
        if isinstance(spaces, (str, bytes, Mapping)) or not isinstance(spaces, Iterable):
            raise TypeError(f"Tuple expects an iterable of spaces, got {type(spaces).__name__}")
        given = list(spaces)
        specs = [_child_spec(v, f"Tuple child {i}") for i, v in enumerate(given)]
        self._init(SpaceSpec._tuple(specs))
        self._children = tuple(_child(v, s, self) for v, s in zip(given, specs, strict=True))

    def _setup(self) -> None:
        self._children = tuple(
            space_from_spec(v, bridge=self._bridge) for _, v in self._spec._children()
        )

    @property
    def spaces(self) -> tuple[Space, ...]:
        """The children, in order."""
        return self._children

    def __getitem__(self, index: int) -> Space:
        return self._children[index]

    def __iter__(self) -> Iterator[Space]:
        return iter(self._children)

    def __len__(self) -> int:
        return len(self._children)
