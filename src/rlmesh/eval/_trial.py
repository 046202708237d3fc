"""Reserved reset options: the trial index (DELTA-47)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ENV_RESET_OPTIONS_KEY", "TRIAL_INDEX", "declares_reset_option", "trial_index"]

#: Metadata key under which an env lists the reserved reset options it accepts.
from .._keys import ENV_RESET_OPTIONS_KEY

#: The one reserved option of this edition: the 0-based ordinal of the episode.
TRIAL_INDEX = "trial_index"


def trial_index(options: Mapping[str, Any] | None) -> int | None:
    """Read the reserved ``trial_index`` reset option inside an env's ``reset`` (DELTA-47).

    An int, or a float (truncated by ``int()``), gives an int; ``None``, a
    missing key, a ``bool`` or a string gives ``None``.

    >>> trial_index({"trial_index": 3})
    3
    >>> trial_index({"trial_index": 2.9}), trial_index(None), trial_index({"trial_index": True})
    (2, None, None)
    """
    if not isinstance(options, Mapping):
        return None
    value = options.get(TRIAL_INDEX)
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return int(value) if value == value and abs(value) != float("inf") else None
    try:  # numpy integer / floating scalars
        import numpy as np

        if isinstance(value, np.integer):
            return int(value)
        if isinstance(value, np.floating) and np.isfinite(value):
            return int(value)
    except ImportError:  # pragma: no cover - numpy is a core dependency
        pass
    return None


def declares_reset_option(metadata: Mapping[str, Any] | None, name: str = TRIAL_INDEX) -> bool:
    """Whether env metadata lists ``name`` under :data:`ENV_RESET_OPTIONS_KEY` (a list or one string)."""
    if not isinstance(metadata, Mapping):
        return False
    declared = metadata.get(ENV_RESET_OPTIONS_KEY)
    if isinstance(declared, str):
        return declared == name
    if isinstance(declared, (list, tuple)):
        return name in declared
    return False
