"""The two optional libraries of the openpi bridge, imported on first use with an install hint.

``rlmesh.openpi`` imports neither at module level, so ``import rlmesh.openpi`` (and the
``rlmesh eval`` command line, which names :class:`~rlmesh.openpi.PolicyClient`) costs nothing
when the ``openpi`` extra is absent; the first connection, server or codec call loads them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import DependencyMissing

__all__ = ["msgpack", "websockets_client", "websockets_exceptions", "websockets_server"]

_HINT = 'pip install "rlmesh-py[openpi]" (websockets and msgpack)'


def _load(name: str, what: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        top = name.split(".")[0]
        raise DependencyMissing(
            f"the openpi bridge needs {top} for {what}, which is not installed: {_HINT}",
            name=top,
        ) from exc


def msgpack() -> ModuleType:
    """The ``msgpack`` module (the openpi wire's value packing)."""
    return _load("msgpack", "the openpi wire's message packing")


def websockets_client() -> ModuleType:
    """``websockets.sync.client`` (a :class:`~rlmesh.openpi.PolicyClient` connection)."""
    return _load("websockets.sync.client", "connecting to an openpi policy server")


def websockets_server() -> ModuleType:
    """``websockets.sync.server`` (``ModelServer(..., protocol="openpi")``)."""
    return _load("websockets.sync.server", "serving a model to openpi clients")


def websockets_exceptions() -> ModuleType:
    """``websockets.exceptions`` (mapped to rlmesh's errors at the connection)."""
    return _load("websockets.exceptions", "the openpi bridge's connections")
