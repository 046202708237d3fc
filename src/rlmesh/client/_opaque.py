"""A client's peers for opaque spaces: ``sample``/``contains`` asked of the server's env.

An endpoint serves a space rlmesh does not know (MiniGrid's ``MissionSpace``) as an
opaque space (:mod:`rlmesh.spaces._opaque`). When a client reads the contract, every
opaque leaf of its observation and action spaces gets a :class:`RemotePeer`, so
``env.observation_space.sample()`` and ``.contains(x)`` (and the Gymnasium client's
spaces, made from the same specs) send a ``SpaceQuery`` on this client's session and
return the server's answer. Observations and actions never need it: their opaque
values are plain data and travel as they are.
"""

from __future__ import annotations

import functools
from typing import Any

from .._contract import EnvContract
from ..spaces._opaque import bind_peers, plain
from ..wire.space_query import SpaceQuery

__all__ = ["RemotePeer", "bind_remote_peers"]


class RemotePeer:
    """Answers for one opaque leaf by asking the env behind ``client``.

    Args:
        client: The env client (its session carries the query).
        space: ``"observation"`` or ``"action"``.
        path: The leaf's Dict keys / Tuple indices from the root.
    """

    def __init__(self, client: Any, space: str, path: tuple[str | int, ...]) -> None:
        self._client = client
        self._space = space
        self._path = list(path)

    def sample(self, seed: int | None) -> Any:
        reply = self._client._space_query(
            SpaceQuery(space=self._space, path=self._path, op="sample", seed=seed)
        )
        return reply.value

    def contains(self, value: Any) -> bool:
        try:
            value = plain(value)
        except TypeError:
            return False  # not plain data: it could never travel, so it is no member
        reply = self._client._space_query(
            SpaceQuery(space=self._space, path=self._path, op="contains", value=value)
        )
        return bool(reply.member)


def bind_remote_peers(client: Any, contract: EnvContract) -> None:
    """Bind a :class:`RemotePeer` to every opaque leaf of ``contract``'s two spaces."""
    for name, spec in (
        ("observation", contract.observation_space),
        ("action", contract.action_space),
    ):
        bind_peers(spec, functools.partial(_remote_peer, client, name))


def _remote_peer(client: Any, space: str, path: tuple[str | int, ...], leaf: Any) -> RemotePeer:
    return RemotePeer(client, space, path)
