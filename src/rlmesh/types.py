"""Public structural protocols and shared value aliases (seed 000 "Types", api-surface A.6).

The protocols are structural: any object with the right members satisfies
them, nothing needs to subclass anything. They are ``runtime_checkable``, so
``isinstance(env, EnvLike)`` checks that the members exist (not their
signatures), exactly like the runtime's own env-target checks::

    >>> import gymnasium as gym  # doctest: +SKIP
    >>> isinstance(gym.make("CartPole-v1"), EnvLike)  # doctest: +SKIP
    True

Value aliases: :data:`InfoDict` is the user-owned grab-bag (values ``Any``);
:data:`Metadata` is SDK-validated (values ``object``, so consumers narrow).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import (
    TYPE_CHECKING,
    Any,
    Protocol,
    SupportsFloat,
    TypeAlias,
    TypedDict,
    TypeVar,
    Union,
    runtime_checkable,
)

from .tensor import Tensor

if TYPE_CHECKING:
    from ._contract import EnvContract as _EnvContract
    from .adapters import ModelSpec as _ModelSpec
    from .eval._view import View as _View
    from .models._sentinels import _NoAdapter

__all__ = [
    "BatchPredictContext",
    "EnvLike",
    "EnvTarget",
    "HasAddress",
    "HasEnvContract",
    "InfoDict",
    "LocalEnvTarget",
    "Metadata",
    "PredictContext",
    "PrimitiveValue",
    "SpaceLike",
    "SpecArg",
    "SupportsMake",
    "SupportsResetStep",
    "Value",
    "VectorEnvLike",
    "ViewArg",
]

SpaceT = TypeVar("SpaceT", covariant=True)
EnvObsT = TypeVar("EnvObsT", covariant=True)
EnvActT = TypeVar("EnvActT")
BatchActionT = TypeVar("BatchActionT", contravariant=True)
VectorObsT = TypeVar("VectorObsT", covariant=True)
VectorActT = TypeVar("VectorActT", covariant=True)


# -- value aliases ---------------------------------------------------------------------------

#: A leaf that travels as a plain scalar: ``None | bool | int | float | str | bytes``.
PrimitiveValue: TypeAlias = bool | int | float | str | bytes | None
#: A native value tree: primitives and :class:`~rlmesh.Tensor` leaves inside dicts, lists and tuples.
Value: TypeAlias = Union[
    PrimitiveValue, Tensor, "list[Value]", "tuple[Value, ...]", "dict[str, Value]"
]
#: User-owned diagnostic grab-bag returned by env reset/step (the Gymnasium info norm).
#: Values are ``Any`` on purpose: the env author owns them, the SDK never validates them.
InfoDict: TypeAlias = dict[str, Any]
#: SDK-validated metadata mapping (adapter tags, describe envelopes); values are ``object``
#: so consumers narrow explicitly instead of trusting an ``Any``.
Metadata: TypeAlias = Mapping[str, object]


class PredictContext(TypedDict):
    """What a context-declaring model corner receives (DELTA-30); every key is present.

    Attributes:
        episode_id: The episode's id.
        episode_seed: The episode's explicit reset seed, or ``None``.
        predict_index: Predicts (re-plans) this episode had before this one; 0 first.
        predict_seed: ``rlmesh.predict_seed(episode_seed, predict_index)``, or ``None``.
        state: A per-episode mutable dict, dropped when the episode ends.
    """

    episode_id: str
    episode_seed: int | None
    predict_index: int
    predict_seed: int | None
    state: dict[str, Any]


#: Per-row contexts for the batched corners, in row order (DELTA-32).
BatchPredictContext: TypeAlias = list[PredictContext]


# -- protocols --------------------------------------------------------------------------------


@runtime_checkable
class SpaceLike(Protocol[SpaceT]):
    """Structural protocol for RLMesh-compatible spaces (rlmesh or Gymnasium)."""

    def sample(self) -> SpaceT:
        """Return one valid sample from the space."""
        ...

    def contains(self, value: Any, /) -> bool:
        """Return whether ``value`` belongs to the space."""
        ...

    def seed(self, seed: int | None = None) -> int | list[int] | dict[str, int] | None:
        """Seed the space sampler."""
        ...


@runtime_checkable
class EnvLike(Protocol[EnvObsT, EnvActT]):
    """Structural protocol for a single environment (what ``EnvServer`` serves)."""

    @property
    def observation_space(self) -> SpaceLike[EnvObsT]:
        """Space describing reset and step observations."""
        ...

    @property
    def action_space(self) -> SpaceLike[EnvActT]:
        """Space describing accepted actions."""
        ...

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[EnvObsT, dict[str, Any]]:
        """Reset the environment and return the initial observation."""
        ...

    def step(self, action: EnvActT) -> tuple[EnvObsT, SupportsFloat, bool, bool, dict[str, Any]]:
        """Apply one action and return the Gymnasium-style step tuple."""
        ...

    def close(self) -> None:
        """Release environment resources."""
        ...


@runtime_checkable
class VectorEnvLike(Protocol[BatchActionT, VectorObsT, VectorActT]):
    """Structural protocol for vectorized environments (Gymnasium ``VectorEnv`` shape)."""

    @property
    def num_envs(self) -> int:
        """Number of environment instances in the vector."""
        ...

    @property
    def single_observation_space(self) -> SpaceLike[VectorObsT]:
        """Observation space for one environment in the vector."""
        ...

    @property
    def single_action_space(self) -> SpaceLike[VectorActT]:
        """Action space for one environment in the vector."""
        ...

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[object, dict[str, Any]]:
        """Reset all environments and return batched observations."""
        ...

    def step(self, actions: BatchActionT) -> tuple[object, object, object, object, dict[str, Any]]:
        """Apply a batch of actions and return batched step values."""
        ...

    def close(self) -> None:
        """Release vector environment resources."""
        ...


@runtime_checkable
class SupportsResetStep(Protocol):
    """A live env object: anything with ``reset`` and ``step`` callables."""

    @property
    def reset(self) -> Callable[..., Any]:
        """The env's reset callable."""
        ...

    @property
    def step(self) -> Callable[..., Any]:
        """The env's step callable."""
        ...


@runtime_checkable
class SupportsMake(Protocol):
    """An env factory: anything with a ``make`` callable (e.g. ``EnvFactory``)."""

    @property
    def make(self) -> Callable[..., Any]:
        """The factory's make callable."""
        ...


@runtime_checkable
class HasAddress(Protocol):
    """Anything exposing a dialable endpoint address (e.g. a server handle)."""

    @property
    def address(self) -> str:
        """The dialable endpoint address."""
        ...


@runtime_checkable
class HasEnvContract(Protocol):
    """An env client exposing a published ``env_contract`` (e.g. a served-env handle)."""

    @property
    def env_contract(self) -> _EnvContract:
        """The env's published ``EnvContract``."""
        ...


# -- target and argument aliases ----------------------------------------------------------------

#: What the local drive paths (``run``/``session``/``Model.run``) accept as an env: a live
#: env, an ``EnvFactory``, an object exposing an address, or an address string to dial.
LocalEnvTarget: TypeAlias = SupportsResetStep | SupportsMake | HasAddress | str
#: What a served-model ``session()`` accepts: a :data:`LocalEnvTarget` or an env client
#: exposing a published ``env_contract``.
EnvTarget: TypeAlias = LocalEnvTarget | HasEnvContract
#: A model's adapter spec argument: a ``ModelSpec``, ``rlmesh.NO_ADAPTER`` or ``None``.
SpecArg: TypeAlias = Union["_ModelSpec", "_NoAdapter", None]
#: The ``view=`` argument: a ``View``, a shorthand (``"terminal"``, ``"http:9000"``),
#: ``True`` for the default viewer, or ``None``.
ViewArg: TypeAlias = Union["_View", str, bool, None]
