"""Serving: ``EnvServer``, ``ServeOptions`` and the ``python -m rlmesh.serve`` entry point."""

from ._options import ServeOptions as ServeOptions
from ._server import EnvServer as EnvServer

__all__ = ["EnvServer", "ServeOptions"]
