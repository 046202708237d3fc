"""Env fleets on Ray: many actors, each serving an env on its node (the ``ray`` extra).

Importing this package does not import Ray; starting an :class:`EnvFleet` does. See
docs/scaling.md ("Many hosts: a Ray fleet").
"""

from __future__ import annotations

from ._actor import ActorInfo as ActorInfo
from ._fleet import (
    ActorLost as ActorLost,
    EnvFleet as EnvFleet,
    FleetStartError as FleetStartError,
    FleetStartTimeout as FleetStartTimeout,
)
from ._vector import FleetVectorEnv as FleetVectorEnv, LanesLost as LanesLost

__all__ = [
    "ActorInfo",
    "ActorLost",
    "EnvFleet",
    "FleetStartError",
    "FleetStartTimeout",
    "FleetVectorEnv",
    "LanesLost",
]
