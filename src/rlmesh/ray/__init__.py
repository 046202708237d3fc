"""Env fleets on Ray: many actors, each serving an env on its node (the ``ray`` extra).

Importing this package does not import Ray; starting an :class:`EnvFleet` does. See
docs/scaling.md ("Many hosts: a Ray fleet").
"""

from __future__ import annotations

from ..errors import (
    ActorLost as ActorLost,
    FleetStartError as FleetStartError,
    FleetStartTimeout as FleetStartTimeout,
    LanesLost as LanesLost,
)
from ._actor import ActorInfo as ActorInfo
from ._fleet import EnvFleet as EnvFleet
from ._vector import FleetVectorEnv as FleetVectorEnv

__all__ = [
    "ActorInfo",
    "ActorLost",
    "EnvFleet",
    "FleetStartError",
    "FleetStartTimeout",
    "FleetVectorEnv",
    "LanesLost",
]
