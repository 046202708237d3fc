"""Build the viewer of a session: discovery, backends, best-effort start (VIEW-3, VIEW-9, VIEW-10)."""

from __future__ import annotations

from typing import Any

from ._core import Viewer, ViewerError, warn_view
from ._sources import discover_sources, select_index
from ._terminal import TerminalBackend

__all__ = ["NO_SOURCES", "open_viewer"]

NO_SOURCES = "env declares no image roles and has no rgb render mode; viewer disabled"


def open_viewer(cfg: Any, context: Any, *, route: Any = None, sources: Any = None) -> Viewer | None:
    """Start the viewer ``cfg`` (a :class:`rlmesh.View`) for a connected session, or return ``None``.

    Never raises (except ``KeyboardInterrupt``): a setup failure is one warning
    ``"rlmesh view: disabled after setup error: ..."`` and the run goes on without a
    viewer (VIEW-9). A backend that cannot start (no TTY, port in use) is a warning;
    the other backend of ``"both"`` still runs.
    """
    try:
        found = tuple(sources) if sources is not None else discover_sources(context)
        if not found:
            warn_view(NO_SOURCES)
            return None
        lanes = int(getattr(context, "num_envs", 1) or 1)
        labels = [s.label for s in found]
        viewer = Viewer(
            found, fps=cfg.fps, lanes=lanes, selected=select_index(labels, cfg.source), route=route
        )
        http = None
        if cfg.backend in ("http", "both"):
            try:
                from ._http import HttpBackend  # asyncio + aiohttp: loaded only when asked for

                http = HttpBackend(
                    viewer,
                    host=getattr(cfg, "host", "127.0.0.1"),
                    port=cfg.port,
                    fmt=cfg.format,
                    quality=cfg.quality,
                    token=getattr(cfg, "token", None),
                    allowed_hosts=getattr(cfg, "allowed_hosts", ()),
                )
                http.start()
                viewer.backends.append(http)
            except ImportError as exc:
                warn_view(f"HTTP backend unavailable: {exc}")
                http = None
            except ViewerError as exc:
                warn_view(str(exc))
                http = None
        if cfg.backend in ("terminal", "both"):
            try:
                term = TerminalBackend(viewer)
                if http is not None:
                    http.announce()  # before the terminal switches to its alternate screen
                term.start()
                viewer.backends.append(term)
            except ViewerError as exc:
                warn_view(str(exc))
        elif http is not None:
            http.announce()
        if not viewer.backends:
            return None
        viewer.start()
        return viewer
    except Exception as exc:
        warn_view(f"disabled after setup error: {type(exc).__name__}: {exc}")
        return None
