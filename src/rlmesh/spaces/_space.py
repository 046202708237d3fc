"""``Space``: a spec plus a value bridge and a sampler (SPC-70..SPC-73, SMP-1).

Every wrapper (``Box``, ``Discrete`` ...) is a thin :class:`Space` subclass: the
public constructor validates its arguments into a :class:`SpaceSpec`, and all
behaviour (sampling, containment, equality, repr, pickling) lives here, driven
by functions compiled once from the spec. :func:`space_from_spec` builds the
right wrapper for any spec without going through the public constructors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from .._bridge import Bridge, resolve_bridge
from ._peers import compile_opaque_check
from ._sample import check_seed, compile_sampler, new_seed
from ._spec import WRAPPERS, SpaceSpec, wrapper_class
from ._to_gym import gym_space_of
from ._values import compile_encoder, compile_range_check

__all__ = ["Space", "space_from_spec"]


class Space:
    """Base of the space wrappers: a :class:`SpaceSpec` plus a value bridge.

    ``sample()`` returns values in the bridge's representation (``rlmesh.Tensor``
    leaves for the default plain bridge, ndarrays for ``rlmesh.numpy`` ...), and
    ``contains(value)`` accepts anything the bridge and the encoder accept.

    Attributes:
        spec: The immutable :class:`SpaceSpec`.
        kind: ``"box"``, ``"discrete"``, ``"multi_binary"``, ``"multi_discrete"``,
            ``"text"``, ``"dict"`` or ``"tuple"``.
        shape: The shape as a fresh ``list[int]`` equal to ``spec.shape`` (SPC-2,
            CNF2-A1; ``[]`` for Discrete, Text, Dict and Tuple).
        dtype: The element dtype name (composites report ``"float32"``, SPC-5).
    """

    __slots__ = ("_bridge", "_decode", "_encode", "_opaque", "_range", "_rng", "_sampler", "_spec")

    kind_name: ClassVar[str] = ""

    _spec: SpaceSpec
    _bridge: Bridge
    _rng: np.random.Generator | None
    _sampler: Callable[[np.random.Generator], Any] | None
    _decode: Callable[[Any], Any] | None
    _encode: Callable[[Any], Any] | None
    _range: Callable[[Any], list[tuple[str, str]]] | bool | None
    _opaque: Callable[[Any], bool] | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind_name:
            WRAPPERS[cls.kind_name] = cls

    def _init(self, spec: SpaceSpec, bridge: Any = None) -> None:
        self._spec = spec
        self._bridge = resolve_bridge(bridge)
        self._rng = None
        self._sampler = None
        self._decode = None
        self._encode = None
        self._range = False  # False: not compiled yet; None: nothing to check
        self._opaque = None
        self._setup()

    def _setup(self) -> None:
        """Per-kind extra state built from the spec (composite children)."""

    @classmethod
    def _from_spec(cls, spec: SpaceSpec, bridge: Any = None) -> Space:
        self = object.__new__(cls)
        self._init(spec, bridge)
        return self

    # -- description ------------------------------------------------------------------

    @property
    def spec(self) -> SpaceSpec:
        return self._spec

    @property
    def kind(self) -> str:
        return self._spec.kind

    @property
    def shape(self) -> list[int]:
        """The space's shape as a fresh ``list[int]``, equal to ``spec.shape`` (SPC-2, CNF2-A1)."""
        return list(self._spec._shape)

    @property
    def dtype(self) -> str:
        return self._spec.dtype

    # -- sampling ---------------------------------------------------------------------

    def seed(self, seed: int | None = None) -> int:
        """Reseed the sampler and return the seed (SMP-1).

        ``seed(k)`` makes the following samples deterministic; ``seed(None)`` draws
        a fresh seed from OS entropy, uses it and returns it. Children of a
        Dict/Tuple keep their own generators (SMP-4).
        """
        value = new_seed() if seed is None else check_seed(seed)
        self._rng = np.random.default_rng(value)
        return value

    def sample(self) -> Any:
        """One random value of the space, in the bridge's representation (SPC-73)."""
        if self._sampler is None:
            self._sampler = compile_sampler(self._spec)
            self._decode = self._bridge.compile_decoder(self._spec)
        if self._rng is None:
            self._rng = np.random.default_rng()  # OS entropy (SMP-1)
        tree = self._sampler(self._rng)
        assert self._decode is not None
        return self._decode(tree)

    # -- membership -------------------------------------------------------------------

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is a member: it encodes, is well-formed and within range (SPC-73)."""
        if self._encode is None:
            self._encode = compile_encoder(self._spec)
            self._range = compile_range_check(self._spec)
            self._opaque = compile_opaque_check(self._spec)
        try:
            tree = self._encode(self._bridge.encode(value))
        except Exception:  # any encode failure means "not a member" (SPC-73)
            return False
        check = self._range
        if check is not None and check(tree):  # type: ignore[operator]
            return False
        # an opaque leaf's membership is its env's to say (spaces._opaque)
        return self._opaque is None or self._opaque(tree)

    def __contains__(self, value: Any) -> bool:
        return self.contains(value)

    # -- conversion -------------------------------------------------------------------

    def to_gymnasium_space(self) -> Any:
        """The equivalent Gymnasium space (needs the ``gymnasium`` extra)."""
        return gym_space_of(self._spec)

    # -- identity ---------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Space):
            return self._spec == other._spec
        if isinstance(other, SpaceSpec):
            return self._spec == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._spec)

    def __repr__(self) -> str:
        return repr(self._spec)

    def __reduce__(self) -> Any:
        return (_restore, (type(self), self._spec, self._bridge, self._rng))

    def __getattr__(self, name: str) -> Any:
        # Only reached when normal lookup fails (SPC-71).
        if name.startswith("_"):
            raise AttributeError(name)
        raise AttributeError(
            f"{type(self).__name__} space has no attribute {name!r}; for the full Gymnasium API "
            f"convert it with rlmesh.spaces.to_gymnasium_space(space)"
        )


def _restore(
    cls: type[Space], spec: SpaceSpec, bridge: Bridge, rng: np.random.Generator | None
) -> Space:
    space = cls._from_spec(spec, bridge)
    space._rng = rng
    return space


def space_from_spec(spec: SpaceSpec | Mapping[str, Any] | Space, *, bridge: Any = None) -> Space:
    """The kind-specific wrapper for a spec (SPC-72).

    Args:
        spec: A :class:`SpaceSpec` (or its ``_to_dict()`` form, or a wrapper to rebind).
        bridge: The value bridge: ``None`` (plain ``rlmesh.Tensor`` values),
            ``"numpy"``, ``"torch"``, ``"jax"`` or a bridge object. Dict/Tuple
            children get the same bridge.

    Raises:
        ValueError: an unknown space kind (``"unsupported RLMesh space kind: ..."``).

    >>> from rlmesh.spaces import Discrete
    >>> space_from_spec(Discrete(3).spec, bridge="numpy")
    Discrete(3)
    """
    if isinstance(spec, Space):
        spec = spec.spec
    elif isinstance(spec, Mapping):
        spec = SpaceSpec._from_dict(spec)
    elif not isinstance(spec, SpaceSpec):
        raise TypeError(f"space_from_spec expects a SpaceSpec, got {type(spec).__name__}")
    cls: type[Space] = wrapper_class(spec.kind)
    return cls._from_spec(spec, bridge)


def adopt_spec(value: Any, kind: str, cls_name: str) -> SpaceSpec | None:
    """``value`` as a spec of ``kind`` when it is a SpaceSpec/Space, else None."""
    if isinstance(value, Space):
        value = value.spec
    if isinstance(value, SpaceSpec):
        if value.kind != kind:
            raise ValueError(
                f"{cls_name} cannot adopt a {value.kind!r} space spec; expected kind {kind!r}"
            )
        return value
    return None
