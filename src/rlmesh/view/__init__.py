"""The live viewer (VIEW-*): frame sources, the terminal and HTTP backends, ``rlmesh view-test``.

``rlmesh.View`` (the config) lives in :mod:`rlmesh.eval`; pass it, or a shorthand
string, to ``rlmesh.run(..., view=...)`` / ``rlmesh.session(..., view=...)``.
:mod:`rlmesh.view._sources` holds camera discovery and frame normalisation, which
the recorder shares.
"""

from __future__ import annotations

from ._core import ViewerQuit as ViewerQuit
from ._open import open_viewer as open_viewer
from ._sources import (
    FrameSource as FrameSource,
    discover_sources as discover_sources,
    normalize_frame as normalize_frame,
)

__all__ = ["FrameSource", "ViewerQuit", "discover_sources", "normalize_frame", "open_viewer"]
