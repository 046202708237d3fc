"""Serving: ``EnvServer``, ``ModelServer``, ``serve_env``, readiness, and ``python -m rlmesh.serve`` (``main``)."""

from .._envkit.classify import Lanes as Lanes
from ..transport.probe import Health as Health, ping as ping, wait_ready as wait_ready
from ._command import startup_marks as startup_marks
from ._main import main as main, serve_env as serve_env
from ._model import ModelServer as ModelServer
from ._options import ServeOptions as ServeOptions
from ._server import EnvServer as EnvServer

__all__ = [
    "EnvServer",
    "Health",
    "Lanes",
    "ModelServer",
    "ServeOptions",
    "main",
    "ping",
    "serve_env",
    "startup_marks",
    "wait_ready",
]
