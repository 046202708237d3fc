"""The server's answers to ``SpaceQuery``: the env's own space samples and checks (opaque spaces).

:mod:`rlmesh.spaces._opaque` describes opaque spaces; here the env service finds the
leaf a client names and hands the question to its peer, the env's own
``gymnasium.Space`` (:class:`rlmesh.spaces._opaque.LocalPeer`, bound when the env's
spaces were read). A question the server cannot answer (no such leaf, an unknown
operation, a sample that is not plain data) fails that request only.
"""

from __future__ import annotations

from typing import Any

from .._contract import EnvContract
from ..spaces._peers import leaf_at, peer_of, plain
from ..wire.space_query import SpaceQuery, SpaceReply
from ._driver import RequestFailed

__all__ = ["answer_space_query"]


def answer_space_query(contract: EnvContract, msg: SpaceQuery) -> tuple[SpaceReply, list[Any]]:
    """``SpaceReply`` for ``msg`` (``RequestFailed``, recoverable, when it cannot be answered)."""
    spaces = {"observation": contract.observation_space, "action": contract.action_space}
    root = spaces.get(msg.space)
    if root is None:
        raise _refused(f"space must be 'observation' or 'action', got {msg.space!r}")
    try:
        leaf = leaf_at(root, list(msg.path))
    except KeyError as exc:
        raise _refused(
            f"{msg.space}_space has no opaque space at {list(msg.path)!r}: {exc}"
        ) from None
    peer = peer_of(leaf)
    if peer is None:  # pragma: no cover - every served opaque leaf has its env's space
        raise _refused(f"the opaque space at {list(msg.path)!r} has nothing to answer for it")
    if msg.op == "contains":
        try:
            value = plain(msg.value)
        except TypeError:
            return SpaceReply(member=False), []
        return SpaceReply(member=bool(peer.contains(value))), []
    if msg.op == "sample":
        try:
            return SpaceReply(value=peer.sample(msg.seed)), []
        except Exception as exc:
            raise RequestFailed(
                "INTERNAL",
                f"sample of {leaf!r} failed: {type(exc).__name__}: {exc}",
                op="sample",
                recoverable=True,
            ) from None
    raise _refused(f"op must be 'sample' or 'contains', got {msg.op!r}")


def _refused(message: str) -> RequestFailed:
    return RequestFailed("INVALID_ACTION", message, op="space", recoverable=True)
