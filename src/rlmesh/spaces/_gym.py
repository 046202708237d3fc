"""Gymnasium conversion (GYM-1..GYM-7), with full fidelity.

Where the reference loses information, we keep it (DESIGN "Decisions",
OPP-10/11/12): rank-0 Box, the dtype of Discrete / MultiBinary / MultiDiscrete,
MultiDiscrete ``start``, ``Text(min_length=0)``, exact Box bounds (int64/uint64
extremes included) and declared Dict key order (never re-sorted). For every
supported Gymnasium space ``g``: ``to_gymnasium_space(from_gymnasium_space(g))``
equals ``g`` with the same dtype, bounds, start and key order.

Two mappings need a convention:

- Text: an unrestricted rlmesh charset (``""``) maps to a Gymnasium Text over
  Python's ``string.printable`` (GYM-7, CNF2-A2), so it accepts strings such as
  "pick up the object!". The reverse direction maps only Gymnasium's default
  alphanumeric charset to ``""`` (GYM-5); any other charset is kept.
- MultiBinary: Gymnasium's class is always int8; a uint8/bool rlmesh
  MultiBinary converts to a Gymnasium MultiBinary whose ``dtype`` is set to the
  real dtype, so its ``sample()``/``contains()`` agree with the env's values.

>>> import gymnasium as gym, numpy as np
>>> g = gym.spaces.MultiDiscrete([3, 4], dtype=np.int32, start=[1, -2])
>>> s = from_gymnasium_space(g)
>>> s, to_gymnasium_space(s) == g
(MultiDiscrete([3, 4], start=[1, -2], dtype=int32), True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._dtypes import FLOAT_DTYPES, dtype_name
from ..errors import UnsupportedSpace
from ._peers import LocalPeer
from ._space import Space, space_from_spec
from ._spec import SpaceSpec
from ._to_gym import _gym_from_spec, _gym_spaces

__all__ = ["as_spec", "from_gymnasium_space", "to_gymnasium_space"]


def _alphanumeric() -> frozenset[str]:
    import string

    return frozenset(string.ascii_letters + string.digits)


# -- Gymnasium -> rlmesh ----------------------------------------------------------------


#: What rlmesh carries, for the refusal message (subclasses of these travel as these).
SUPPORTED = "Box, Discrete, MultiBinary, MultiDiscrete, Text, Dict and Tuple"


def _unsupported(space: Any, gs: Any, path: str) -> UnsupportedSpace:
    name = type(space).__name__
    where = f" at {path}" if path else ""
    module = type(space).__module__ or ""
    custom = not module.startswith("gymnasium.") and not module.startswith("gym.")
    if not isinstance(space, gs.Space):
        return UnsupportedSpace(
            f"Unsupported space type: {name}{where} (not a gymnasium.Space); a space must be a "
            f"gymnasium.spaces {SUPPORTED} (or a subclass), or an rlmesh.spaces space",
            space_type=name,
            path=path,
        )
    kind = "a custom gymnasium.Space subclass" if custom else "a Gymnasium space kind"
    advice = (
        f"make {name} subclass the gymnasium space its values are (e.g. gymnasium.spaces.Text for strings)"
        if custom
        else "pad a Sequence to a fixed-shape Box, or split a OneOf/Graph into Dict/Box leaves"
    )
    return UnsupportedSpace(
        f"Unsupported space type: {name}{where} ({kind}). rlmesh carries {SUPPORTED}, "
        f"and any subclass of them. Convert it before serving: wrap the env in a "
        f"gymnasium.ObservationWrapper (or ActionWrapper) whose space uses those kinds "
        f"(gymnasium.wrappers.FilterObservation drops a key), or {advice}",
        space_type=name,
        path=path,
    )


def _spec_from_gym(space: Any, gs: Any, path: str = "", opaque: bool = False) -> SpaceSpec:
    # isinstance (not class names), so subclasses convert too (GYM-1): a custom
    # `class MissionSpace(gym.spaces.Text)` travels as the Text it is.
    carried = getattr(space, "rlmesh_opaque_spec", None)  # a client's stand-in for an opaque space
    if isinstance(carried, SpaceSpec):
        return carried
    if isinstance(space, gs.Box):
        return _box_from_gym(space)
    if isinstance(space, gs.Discrete):
        return SpaceSpec._discrete(int(space.n), int(space.start), dtype_name(space.dtype))
    if isinstance(space, gs.MultiBinary):
        return SpaceSpec._multi_binary(tuple(space.shape), dtype_name(space.dtype))
    if isinstance(space, gs.MultiDiscrete):
        nvec = np.asarray(space.nvec)
        start = np.asarray(getattr(space, "start", np.zeros_like(nvec)))
        return SpaceSpec._multi_discrete(nvec.tolist(), dtype_name(space.dtype), start.tolist())
    if isinstance(space, gs.Text):
        return SpaceSpec._text(space.max_length, space.min_length, _gym_charset(space))
    if isinstance(space, gs.Dict):
        return SpaceSpec._dict(
            {
                str(k): _spec_from_gym(v, gs, f"{path}[{str(k)!r}]", opaque)
                for k, v in space.spaces.items()
            }
        )
    if isinstance(space, gs.Tuple):
        return SpaceSpec._tuple(
            _spec_from_gym(v, gs, f"{path}[{i}]", opaque) for i, v in enumerate(space.spaces)
        )
    if opaque and _custom(space, gs):  # served as it is: plain values, the env's own space answers
        spec = SpaceSpec._opaque(f"{type(space).__module__}.{type(space).__qualname__}")
        spec._peer = LocalPeer(space)
        return spec
    raise _unsupported(space, gs, path)


def _custom(space: Any, gs: Any) -> bool:
    """A ``gymnasium.Space`` subclass of the env's own (not Graph, Sequence, OneOf ...)."""
    module = type(space).__module__ or ""
    own = module.startswith("gymnasium.") or module.startswith("gym.")
    return isinstance(space, gs.Space) and not own


def _box_from_gym(space: Any) -> SpaceSpec:
    dt = dtype_name(space.dtype)
    shape = tuple(space.shape)
    low = np.broadcast_to(np.asarray(space.low), shape)
    high = np.broadcast_to(np.asarray(space.high), shape)
    if dt in FLOAT_DTYPES:
        lo64, hi64 = low.astype(np.float64), high.astype(np.float64)
        if lo64.size and np.all(lo64 == lo64.flat[0]) and np.all(hi64 == hi64.flat[0]):
            return SpaceSpec._box(shape, dt, float(lo64.flat[0]), float(hi64.flat[0]))
        return SpaceSpec._box(shape, dt, lo64, hi64)
    # Integer / bool: exact Python values, never through float (GYM-2, DELTA-27).
    lo_list, hi_list = low.reshape(-1).tolist(), high.reshape(-1).tolist()
    if len(set(lo_list)) == 1 and len(set(hi_list)) == 1:
        return SpaceSpec._box(shape, dt, lo_list[0], hi_list[0])
    return SpaceSpec._box(
        shape, dt, np.asarray(lo_list, dtype=object), np.asarray(hi_list, dtype=object)
    )


def _gym_charset(space: Any) -> str:
    chars: Any = None
    for attr in ("characters", "character_list", "character_set", "charset"):
        chars = getattr(space, attr, None)
        if chars is not None:
            break
    if chars is None:
        return ""
    text = "".join(sorted(chars)) if isinstance(chars, (set, frozenset)) else "".join(chars)
    if frozenset(text) == _alphanumeric():
        return ""  # Gymnasium's default charset means "unrestricted" (GYM-5)
    return text


def from_gymnasium_space(
    space: Any, *, bridge: Any = None, path: str = "", opaque: bool = False
) -> Space:
    """Convert a Gymnasium (or gym) space to an rlmesh space (GYM-1..GYM-6).

    Args:
        space: A ``gymnasium.spaces`` Box, Discrete, MultiBinary, MultiDiscrete,
            Text, Dict or Tuple (subclasses too), nested freely. An rlmesh space or
            :class:`SpaceSpec` is accepted and rewrapped.
        bridge: The value bridge of the returned wrapper (default plain).
        path: Where ``space`` sits, for error messages (``"observation_space"``).
        opaque: Convert a ``gymnasium.Space`` subclass of the env's own (MiniGrid's
            ``MissionSpace``) to an :class:`~rlmesh.spaces.Opaque` space answered by it,
            instead of refusing it (what serving does).

    Returns:
        The rlmesh wrapper; ``.spec`` is its :class:`SpaceSpec`.

    Raises:
        UnsupportedSpace: (a ``TypeError``) ``"Unsupported space type: <Name> ..."`` for
            Graph, Sequence, OneOf and (unless ``opaque``) any other ``gymnasium.Space``
            that is not a subclass of the kinds above (no silent substitution, GYM-6);
            the message says where it sits and how to convert it.
        ImportError: (``DependencyMissing``) gymnasium is not installed.

    >>> import gymnasium as gym
    >>> from_gymnasium_space(gym.spaces.Box(-1, 1, (2,)))
    Box(-1.0, 1.0, (2,), float32)
    """
    if isinstance(space, (Space, SpaceSpec)):
        return space_from_spec(space, bridge=bridge)
    return space_from_spec(_spec_from_gym(space, _gym_spaces(), path, opaque), bridge=bridge)


# -- rlmesh -> Gymnasium ----------------------------------------------------------------


def to_gymnasium_space(space: Any) -> Any:
    """Convert an rlmesh space (wrapper or :class:`SpaceSpec`) to a Gymnasium space (GYM-7).

    Box bounds arrive as full arrays in the Box dtype (int64/uint64 extremes exact),
    Discrete and MultiDiscrete keep ``start`` and dtype, Dict keeps its declared
    key order. A Gymnasium space is returned unchanged.

    Raises:
        TypeError: ``space`` is not a space.
        ImportError: (``DependencyMissing``) gymnasium is not installed.

    >>> from rlmesh.spaces import Discrete
    >>> to_gymnasium_space(Discrete(3, start=1))
    Discrete(3, start=1)
    """
    gs = _gym_spaces()
    if isinstance(space, Space):
        return _gym_from_spec(space.spec, gs)
    if isinstance(space, SpaceSpec):
        return _gym_from_spec(space, gs)
    if isinstance(space, gs.Space):
        return space
    raise TypeError(
        f"to_gymnasium_space expects an rlmesh space or SpaceSpec, got {type(space).__name__}"
    )


def as_spec(space: Any, what: str = "space", *, opaque: bool = False) -> SpaceSpec:
    """A SpaceSpec from a SpaceSpec, an rlmesh space wrapper, or a Gymnasium space.

    ``opaque``: an env's own ``gymnasium.Space`` subclass becomes an opaque leaf (serving).

    Raises:
        UnsupportedSpace: (a ``TypeError``) a space kind rlmesh cannot carry; the message
            names where it sits in ``what`` (``observation_space['mission']``).
        TypeError: ``space`` is not a space at all; the message starts with ``what``.
    """
    if isinstance(space, SpaceSpec):
        return space
    spec = getattr(space, "spec", None)
    if isinstance(spec, SpaceSpec):
        return spec
    try:
        return from_gymnasium_space(space, path=what, opaque=opaque).spec
    except UnsupportedSpace:
        raise
    except TypeError as exc:
        raise TypeError(f"{what}: {exc}") from None
