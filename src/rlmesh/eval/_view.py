"""``View`` lives in :mod:`rlmesh.view` (``rlmesh.view._config``); re-exported here for older imports."""

from __future__ import annotations

from ..view._config import View as View, normalize_view as normalize_view

__all__ = ["View", "normalize_view"]
