"""The live viewer (VIEW-*): frame sources, the terminal and HTTP backends, ``rlmesh view-test``.

``rlmesh.View`` (the config, :mod:`rlmesh.view._config`) lives here; pass it, or a
shorthand string, to ``rlmesh.run(..., view=...)`` / ``rlmesh.session(..., view=...)``.
The viewer needs nothing from :mod:`rlmesh.eval`: the drive feeds it through its
observer list and tells it where a session's env renders (``register_render_target``).
:mod:`rlmesh.view._sources` holds camera discovery and frame normalisation, which
the recorder shares.
"""

from __future__ import annotations

from ._config import View as View, normalize_view as normalize_view
from ._core import ViewerQuit as ViewerQuit
from ._open import open_viewer as open_viewer
from ._sources import (
    FrameSource as FrameSource,
    context_env as context_env,
    discover_sources as discover_sources,
    normalize_frame as normalize_frame,
    register_render_target as register_render_target,
)

__all__ = [
    "FrameSource",
    "View",
    "ViewerQuit",
    "context_env",
    "discover_sources",
    "normalize_frame",
    "normalize_view",
    "open_viewer",
    "register_render_target",
]
