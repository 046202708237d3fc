"""The two module-level sentinels that change what ``run``/``session`` do (seed 000, MOD-27, MOD-29)."""

from __future__ import annotations

from typing import Final

from ..wire.session import Named

__all__ = ["NO_ADAPTER", "RANDOM_SAMPLE"]


class _NoAdapter(Named):
    """Type of :data:`NO_ADAPTER`."""

    __slots__ = ()


class _RandomSample(Named):
    """Type of :data:`RANDOM_SAMPLE`."""

    __slots__ = ()


#: Pass as a model's ``spec`` to skip adapter resolution, even on a tagged env:
#: the model handles raw env observations and actions itself.
NO_ADAPTER: Final = _NoAdapter("NO_ADAPTER")
#: Pass as the model to ``rlmesh.run`` / ``rlmesh.session``: each step samples the
#: env's action space (a random baseline; no spec or adapter involved).
RANDOM_SAMPLE: Final = _RandomSample("RANDOM_SAMPLE")
