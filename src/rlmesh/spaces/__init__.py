"""Spaces: immutable specs, sampling/containment wrappers and Gymnasium conversion.

A space is a :class:`SpaceSpec` (pure, validated data: what travels in an env
contract) wrapped by a :class:`Space` subclass that samples and checks values.
Wrappers return values through a *bridge*: ``rlmesh.Tensor`` leaves by default,
ndarrays from ``rlmesh.numpy.space_from_spec`` (SPC-70..73).

>>> from rlmesh.spaces import Box, Dict, Discrete
>>> space = Dict({"pos": Box(-1.0, 1.0, (2,)), "mode": Discrete(3)})
>>> space
Dict("pos": Box(-1.0, 1.0, (2,), float32), "mode": Discrete(3))
>>> _ = space.seed(0)
>>> space.contains(space.sample())
True
"""

from . import _opaque  # noqa: F401  # the opaque kind registers itself (an env's own spaces)
from ._box import Box as Box
from ._composite import Dict as Dict, Tuple as Tuple
from ._discrete import Discrete as Discrete
from ._gym import (
    from_gymnasium_space as from_gymnasium_space,
    to_gymnasium_space as to_gymnasium_space,
)
from ._multi_binary import MultiBinary as MultiBinary
from ._multi_discrete import MultiDiscrete as MultiDiscrete
from ._space import Space as Space, space_from_spec as space_from_spec
from ._spec import SpaceSpec as SpaceSpec
from ._text import Text as Text

__all__ = [
    "Box",
    "Dict",
    "Discrete",
    "MultiBinary",
    "MultiDiscrete",
    "Space",
    "SpaceSpec",
    "Text",
    "Tuple",
    "from_gymnasium_space",
    "space_from_spec",
    "to_gymnasium_space",
]
