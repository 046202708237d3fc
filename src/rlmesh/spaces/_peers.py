"""The peers of opaque spaces and plain data: what :mod:`rlmesh.spaces._opaque` stands on.

Here, below the space wrappers, so that ``Space.contains`` can ask an opaque leaf's peer.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from ._spec import SpaceSpec

__all__ = [
    "MAX_DEPTH",
    "LocalPeer",
    "Peer",
    "bind_peers",
    "compile_opaque_check",
    "is_plain",
    "leaf_at",
    "opaque_leaves",
    "peer_of",
    "plain",
    "scalar_base",
]

#: Deepest nesting of lists and dicts inside one opaque value (as for metadata).
MAX_DEPTH = 64
_I64_MIN, _U64_MAX = -(2**63), 2**64 - 1
_SCALARS = (str, bool, float, bytes, type(None))
_SCALAR_BASES: tuple[type, ...] = (bool, int, float, str, bytes)


class Peer(Protocol):
    """Who answers for an opaque space: the env's own space, here or on a server."""

    def sample(self, seed: int | None) -> Any:
        """One value of the space (plain data); ``seed`` reseeds the sampler first."""

    def contains(self, value: Any) -> bool:
        """Whether the (plain) ``value`` belongs to the space."""


class LocalPeer:
    """The env's own ``gymnasium.Space``, answering in this process.

    ``sample`` draws from a copy of the space, reseeded per call, so sampling never moves
    the generator of the env's own space.
    """

    def __init__(self, space: Any) -> None:
        self.space = space
        self._sampler: Any = None

    def sample(self, seed: int | None) -> Any:
        if self._sampler is None:
            self._sampler = copy.deepcopy(self.space)
        if seed is not None:
            self._sampler.seed(int(seed))
        return plain(self._sampler.sample(), "$")

    def contains(self, value: Any) -> bool:
        try:
            return bool(self.space.contains(value))
        except Exception:
            return False


def _no_peer(spec: SpaceSpec) -> RuntimeError:
    return RuntimeError(
        f"{spec!r} is a space rlmesh does not know; only the env that declared it can sample "
        "or check its values, and this space is not connected to one (sample it through the "
        "env's client, e.g. RemoteEnv(...).observation_space)"
    )


# -- plain data ---------------------------------------------------------------------------------


def plain(value: Any, path: str = "$", depth: int = 0) -> Any:
    """``value`` as plain data (module docstring), or ``TypeError`` naming where it is not.

    >>> plain([1.5, "a", None])
    [1.5, 'a', None]
    >>> plain({"x": object()})
    Traceback (most recent call last):
    ...
    TypeError: $.x: a value of an opaque space must be plain data (str, numbers, lists, dicts), got object
    """
    tp = type(value)
    if tp in _SCALARS:
        return value
    if tp is int:
        if _I64_MIN <= value <= _U64_MAX:
            return value
        raise TypeError(f"{path}: the int {value} does not fit 64 bits")
    if depth >= MAX_DEPTH:
        raise TypeError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, (np.generic, np.ndarray)):
        return plain(value.tolist() if isinstance(value, np.ndarray) else value.item(), path, depth)
    if isinstance(value, enum.Enum):
        return plain(value.value, path, depth)
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return plain(dict(value._asdict()), path, depth)
    if isinstance(value, (list, tuple)):
        return [plain(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{path}: dict keys of an opaque value must be str, got {k!r}")
            out[k] = plain(v, f"{path}.{k}", depth + 1)
        return out
    base = scalar_base(value)  # subclasses of the scalars (enums were above)
    if base is not None:
        return plain(base(value), path, depth)
    raise TypeError(
        f"{path}: a value of an opaque space must be plain data (str, numbers, lists, dicts), "
        f"got {tp.__name__}"
    )


def scalar_base(value: Any) -> type | None:
    """The builtin scalar type (``bool``, ``int``, ``float``, ``str``, ``bytes``) ``value`` is
    an instance of, else ``None``: ``base(value)`` unwraps a subclass (plain data, metadata).

    >>> scalar_base(True), scalar_base(3), scalar_base([])
    (<class 'bool'>, <class 'int'>, None)
    """
    for base in _SCALAR_BASES:
        if isinstance(value, base):
            return base
    return None


def is_plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is plain data as decoded from a frame header (exact types only)."""
    tp = type(value)
    if tp in _SCALARS or tp is int:
        return True
    if depth >= MAX_DEPTH:
        return False
    if tp is list:
        return all(is_plain(v, depth + 1) for v in value)
    if tp is dict:
        return all(type(k) is str and is_plain(v, depth + 1) for k, v in value.items())
    return False


# -- peers and the space tree ---------------------------------------------------------------------


def opaque_leaves(
    spec: SpaceSpec, path: tuple[str | int, ...] = ()
) -> list[tuple[tuple[str | int, ...], SpaceSpec]]:
    """Every opaque leaf of ``spec`` with its path of keys and indices from the root."""
    if spec._kind == "opaque":
        return [(path, spec)]
    out = []
    for key, child in spec._children():
        out.extend(opaque_leaves(child, (*path, key)))
    return out


def leaf_at(spec: SpaceSpec, path: list[Any]) -> SpaceSpec:
    """The opaque leaf at ``path`` (``KeyError`` when there is none)."""
    node = spec
    for key in path:
        children = dict(node._children())
        if key not in children:
            raise KeyError(f"no space at {path!r}")
        node = children[key]
    if node._kind != "opaque":
        raise KeyError(f"the space at {path!r} is not opaque")
    return node


def peer_of(spec: SpaceSpec) -> Any:
    """The peer answering for the opaque leaf ``spec`` (``None`` when nothing can)."""
    return spec._peer


def bind_peers(
    spec: SpaceSpec, make_peer: Callable[[tuple[str | int, ...], SpaceSpec], Any]
) -> None:
    """Give every opaque leaf of ``spec`` the peer ``make_peer(path, leaf)`` returns."""
    for path, leaf in opaque_leaves(spec):
        leaf._peer = make_peer(path, leaf)


def compile_opaque_check(spec: SpaceSpec) -> Callable[[Any], bool] | None:
    """``f(canonical value) -> bool`` asking each opaque leaf's peer; ``None`` when none.

    Raises (from ``f``):
        RuntimeError: a leaf with no peer (nothing can answer for it).
    """
    leaves = opaque_leaves(spec)
    if not leaves:
        return None

    def check(tree: Any) -> bool:
        for path, leaf in leaves:
            value = tree
            for key in path:
                value = value[key]
            peer = leaf._peer
            if peer is None:
                raise _no_peer(leaf)
            if not peer.contains(value):
                return False
        return True

    return check
