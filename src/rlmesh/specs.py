"""Published contract types (api-surface A.9): ``EnvContract`` and ``SpaceSpec``.

``rlmesh.specs.SpaceSpec`` and ``rlmesh.spaces.SpaceSpec`` are the same class (SPC-1).
"""

from __future__ import annotations

from ._contract import EnvContract as EnvContract
from .spaces._spec import SpaceSpec as SpaceSpec

__all__ = ["EnvContract", "SpaceSpec"]
