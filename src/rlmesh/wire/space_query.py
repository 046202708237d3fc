"""``SpaceQuery`` / ``SpaceReply``: a client asks the env's own space (opaque spaces, sans-IO).

An env may declare a space rlmesh does not know (MiniGrid's ``MissionSpace``); it is
served as an opaque space (:mod:`rlmesh.spaces._opaque`) whose ``sample()`` and
``contains()`` only the env's own space can answer. A client asks with a
``SpaceQuery`` naming the space (``"observation"`` or ``"action"``, per lane on a
vector endpoint), the opaque leaf's path of Dict keys and Tuple indices from the
root, and the operation:

- ``"sample"`` with ``seed``: the server reseeds its copy of the space and answers
  ``SpaceReply(value=<one plain value>)``;
- ``"contains"`` with ``value`` (plain data): ``SpaceReply(member=<bool>)``.

Legal in ``READY``, one reply per request, like every request; an unknown path or
operation is a recoverable ``Error`` (``INVALID_ACTION``). Kinds ``0x0C`` / ``0x8C``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .messages import _Base, register

__all__ = ["SpaceQuery", "SpaceReply"]


class SpaceQuery(_Base, frozen=True):
    """Ask the env's own space at ``path`` of the ``space`` to ``sample`` or check ``contains``."""

    KIND: ClassVar[int] = 0x0C
    space: str  # "observation" or "action"
    path: list[str | int]
    op: str  # "sample" or "contains"
    value: Any = None
    seed: int | None = None
    timeout_ms: int = 0


class SpaceReply(_Base, frozen=True):
    """The answer: a sampled ``value``, or whether the value was a ``member``."""

    KIND: ClassVar[int] = 0x8C
    value: Any = None
    member: bool = False


register(SpaceQuery)
register(SpaceReply)
