"""Routes: how a session turns an env observation into an env-ready action (EVAL-13, EVAL-50/51).

A *route* is bound to an opened env once (corner choice, adapter resolution,
instruction placements, effective horizon) and then called every step. The local
route applies, in order: the adapter's observation transform, the model bridge,
the instruction, the corner (with its context if declared), then -- per frame of
a chunk -- the bridge back, the adapter's action transform and the cast to the
env's Box dtype/shape (DELTA-48). ``RandomRoute`` samples the action space, and
``ServedRoute`` asks a model server (it adapts the client's ``RemoteRoute``).

Every route speaks the one :class:`Route` protocol, so the drive (``rlmesh.eval``)
never tells them apart: bind once, begin/end episodes per lane, predict one
observation or all lanes of a batch, a read-only chunk position, close.

Here: the protocol and the two small routes. The local route lives in
:mod:`rlmesh.models._local`, the stages it binds in :mod:`rlmesh.models._pipeline`
and the MOD-37 probe in :mod:`rlmesh.models._probe`; their public names are
re-exported here, where the drive and the servers import them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from ._local import LocalRoute as LocalRoute
from ._pipeline import (
    ENV_TAGS_KEY as ENV_TAGS_KEY,
    input_signature as input_signature,
    resolve_adapter as resolve_adapter,
)
from ._probe import probe_hidden_state as probe_hidden_state
from ._values import get_bridge, to_numpy_tree

__all__ = [
    "ENV_TAGS_KEY",
    "LocalRoute",
    "RandomRoute",
    "Route",
    "ServedRoute",
    "as_route",
    "input_signature",
    "probe_hidden_state",
    "resolve_adapter",
]

_NP = get_bridge("numpy")


@runtime_checkable
class Route(Protocol):
    """How a session turns env observations into env-ready actions (local, served or random).

    ``bind`` once against the opened env side (its ``contract``, ``action_space``,
    ``single_action_space`` and whether its observations are already canonical);
    then per lane ``begin_episode`` / ``end_episode``; ``predict`` for one
    observation (a single env) or ``predict_lanes`` for a whole batch (a vector env:
    ``rolling[i]`` marks a lane whose action the env ignores this step; the route
    writes each lane's action into ``last_action`` and returns the batched action).
    ``chunk_pos`` / ``chunk_len`` are read only (the viewer's HUD).
    """

    @property
    def horizon(self) -> int:
        """Env steps one forward covers (the effective execution horizon)."""
        ...

    @property
    def spec_less(self) -> bool:
        """Whether the model sees the raw env values (no adapter)."""
        ...

    def bind(self, env: Any, *, lanes: int = 1) -> None: ...

    def begin_episode(self, episode_id: str, seed: int | None, lane: int = 0) -> None: ...

    def end_episode(self, episode_id: str, lane: int = 0) -> None: ...

    def predict(self, observation: Any) -> Any: ...

    def predict_lanes(
        self, observation: Any, rolling: Sequence[bool], last_action: list[Any]
    ) -> Any: ...

    @property
    def chunk_pos(self) -> int:
        """1-based position in the chunk being replayed (0: none; the viewer's HUD reads it)."""
        ...

    @property
    def chunk_len(self) -> int:
        """Frames of the chunk being replayed (0: none)."""
        ...

    def advisories(self) -> tuple[Any, ...]: ...

    def close(self) -> None: ...


def _sample_lanes(
    space: Any, n: int, last_action: list[Any], rolling: Sequence[bool] | None
) -> Any:
    """Fill ``last_action`` with a sample for every lane (or only the rolling lanes still without one)."""
    for lane in range(n):
        if rolling is None or (rolling[lane] and last_action[lane] is None):
            last_action[lane] = space.sample()
    return _NP.tree_stack(last_action)


class RandomRoute:
    """``RANDOM_SAMPLE``: every predict samples the env's action space (MOD-29)."""

    horizon = 1
    spec_less = True
    chunk_pos = 0
    chunk_len = 0

    def __init__(self) -> None:
        self._sample: Callable[[], Any] | None = None
        self._space: Any = None
        self._single: Any = None
        self._vector = False

    def bind(self, env: Any, *, lanes: int = 1) -> None:
        space = env.action_space
        if space is None or not callable(getattr(space, "sample", None)):
            raise TypeError("RANDOM_SAMPLE needs an env whose action_space has sample()")
        self._space = space
        self._sample = space.sample
        self._vector = bool(getattr(env, "is_vector", False))
        self._single = getattr(env, "single_action_space", space) if self._vector else space

    def begin_episode(self, episode_id: str, seed: int | None, lane: int = 0) -> None:
        # A seeded episode samples reproducibly: the action space is seeded with it too
        # (a vector env's lanes sample the per-lane space unseeded).
        if not self._vector and seed is not None and callable(getattr(self._space, "seed", None)):
            self._space.seed(seed)

    def end_episode(self, episode_id: str, lane: int = 0) -> None:
        pass

    def predict(self, observation: Any) -> Any:
        assert self._sample is not None
        return self._sample()

    def predict_lanes(
        self, observation: Any, rolling: Sequence[bool], last_action: list[Any]
    ) -> Any:
        """One sample of the per-lane action space per lane."""
        return _sample_lanes(self._single, len(last_action), last_action, None)

    def advisories(self) -> tuple[Any, ...]:
        return ()

    def close(self) -> None:
        pass


class ServedRoute:
    """A served model's route (``client.RemoteRoute``: one model lane per env lane) in the :class:`Route` shape."""

    chunk_pos = 0
    chunk_len = 0

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model = inner  # what a Session's repr names
        self._single: Any = None

    @property
    def horizon(self) -> int:
        return int(self.inner.horizon)

    @property
    def spec_less(self) -> bool:
        return bool(self.inner.spec_less)

    def bind(self, env: Any, *, lanes: int = 1) -> None:
        self._single = getattr(env, "single_action_space", None)
        self.inner.bind(env, lanes=lanes)

    def begin_episode(self, episode_id: str, seed: int | None, lane: int = 0) -> None:
        self.inner.begin_episode(episode_id, seed, lane)

    def end_episode(self, episode_id: str, lane: int = 0) -> None:
        self.inner.end_episode(episode_id, lane)

    def predict(self, observation: Any) -> Any:
        return self.inner.predict(observation)

    def predict_lanes(
        self, observation: Any, rolling: Sequence[bool], last_action: list[Any]
    ) -> Any:
        """One request per lane that needs an action; a rolling lane repeats its last one."""
        n = len(last_action)
        per_obs = _NP.tree_unstack(to_numpy_tree(observation), n)
        predict_lane = self.inner.predict_lane
        for lane in range(n):
            if not rolling[lane]:
                last_action[lane] = predict_lane(per_obs[lane], lane)
        return _sample_lanes(self._single, n, last_action, rolling)

    def advisories(self) -> tuple[Any, ...]:
        return ()

    def close(self) -> None:
        self.inner.close()


def as_route(route: Any) -> Route:
    """``route`` in the :class:`Route` shape, as is when it has every member of the protocol.

    The client's ``RemoteRoute`` (one model lane per env lane: ``predict_lane``) is
    wrapped once in a :class:`ServedRoute`.
    """
    return route if isinstance(route, Route) else ServedRoute(route)
