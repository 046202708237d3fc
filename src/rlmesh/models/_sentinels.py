"""The two module-level sentinels that change what ``run``/``session`` do (seed 000, MOD-27, MOD-29)."""

from __future__ import annotations

from typing import Final

__all__ = ["NO_ADAPTER", "RANDOM_SAMPLE"]


class _Sentinel:
    """A loud singleton whose repr is its name (STYLE: self-describing sentinels)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name

    def __reduce__(self) -> str:
        return self._name  # pickles as the module-level singleton

    def __copy__(self) -> _Sentinel:
        return self

    def __deepcopy__(self, memo: object) -> _Sentinel:
        return self


class _NoAdapter(_Sentinel):
    """Type of :data:`NO_ADAPTER`."""


class _RandomSample(_Sentinel):
    """Type of :data:`RANDOM_SAMPLE`."""


#: Pass as a model's ``spec`` to skip adapter resolution, even on a tagged env:
#: the model handles raw env observations and actions itself.
NO_ADAPTER: Final = _NoAdapter("NO_ADAPTER")
#: Pass as the model to ``rlmesh.run`` / ``rlmesh.session``: each step samples the
#: env's action space (a random baseline; no spec or adapter involved).
RANDOM_SAMPLE: Final = _RandomSample("RANDOM_SAMPLE")
