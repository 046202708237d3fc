"""``Opaque``: a space rlmesh does not know, served as it is (MiniGrid's ``MissionSpace``).

An env may declare a ``gymnasium.Space`` subclass of its own (MiniGrid's mission space:
strings produced by a function). rlmesh cannot describe such a space, but it can carry
its values when they are plain data, and let the env's own space answer for them:

- **the spec** is ``kind="opaque"`` with the space's type name (``details={"type":
  "minigrid.core.mission.MissionSpace"}``); two opaque specs are equal when they name
  the same type;
- **values** are plain data: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``,
  lists and ``str``-keyed dicts of them. On the way in they are unwrapped as the
  metadata codec unwraps info values (numpy scalars with ``item()``, arrays with
  ``tolist()``, namedtuples with ``_asdict()``, enums to their value, tuples to lists);
  anything else is a ``TypeError`` naming the path. They travel in the frame header,
  like ``Text`` strings, and come back exactly as sent (every flavour: no tensors);
- **sample and contains** are the env's own: the spec's *peer* answers them. Where the
  env lives (the server, or in-process) the peer is the env's space itself
  (:class:`LocalPeer`); a client binds a peer that asks the server
  (``SpaceQuery``/``SpaceReply`` on the wire). ``sample()`` draws a seed from the
  space's own generator and sends it, so ``space.seed(k)`` makes samples repeatable.
  A spec with no peer (read from a file, or pickled) cannot sample or check: it says so.

Range checks never call the peer (a served step pays nothing for an opaque leaf);
``Space.contains`` does. Adapters treat an opaque leaf as an unspecified one: it passes
through untouched.

>>> from rlmesh.spaces import Dict, Discrete
>>> space = Dict({"direction": Discrete(4), "mission": Opaque("MissionSpace")})
>>> space
Dict("direction": Discrete(4), "mission": Opaque(MissionSpace))
>>> plain({"pos": (1, 2), "n": __import__("numpy").int64(3)})
{'pos': [1, 2], 'n': 3}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import _repr, _sample, _values
from ._peers import LocalPeer, _no_peer, bind_peers, plain
from ._space import Space, adopt_spec
from ._spec import SpaceSpec

# The peers and the plain-data rules live in ._peers (their one list of names); this
# module adds the space, and names what a client and an env's side take from here.
__all__ = ["LocalPeer", "Opaque", "bind_peers", "plain"]


class Opaque(Space):
    """A space of an env's own kind, whose values are plain data (module docstring).

    Args:
        type_name: The space's type, as the env declared it (``"MissionSpace"``), or a
            :class:`SpaceSpec` of kind ``opaque``.

    >>> space = Opaque("MissionSpace")
    >>> space, space.type_name
    (Opaque(MissionSpace), 'MissionSpace')
    """

    __slots__ = ()
    kind_name = "opaque"

    def __init__(self, type_name: Any) -> None:
        spec = adopt_spec(type_name, "opaque", "Opaque")
        self._init(spec if spec is not None else SpaceSpec._opaque(type_name))

    @property
    def type_name(self) -> str:
        """The type of the env's space (``"minigrid.core.mission.MissionSpace"``)."""
        return str(self._spec._d["type"])


# -- one registration per table (STYLE: "a new space is one registration") ------------------------


def _sampler(spec: SpaceSpec) -> Callable[[np.random.Generator], Any]:
    def sample(rng: np.random.Generator) -> Any:
        peer = spec._peer
        if peer is None:
            raise _no_peer(spec)
        return peer.sample(int(rng.integers(0, 2**31 - 1)))

    return sample


def _encoder(spec: SpaceSpec, path: str, lanes: int | None) -> Callable[[Any], Any]:
    if lanes is None:
        return lambda v: plain(v, path)

    def encode(v: Any) -> list[Any]:
        if not isinstance(v, (list, tuple)) or len(v) != lanes:
            raise ValueError(f"{path}: expected {lanes} batched values (a list)")
        return [plain(x, f"{path}[lane {i}]") for i, x in enumerate(v)]

    return encode


_sample._COMPILERS["opaque"] = _sampler
_repr._RENDERERS["opaque"] = lambda spec: f"Opaque({spec._d['type']})"
_values._COMPILERS["opaque"] = _encoder
