"""Clients for served endpoints (native ``rlmesh.Tensor`` values)."""

from . import _multi  # noqa: F401  # registers RemoteVectorEnv([addr, ...]) (issue 26)
from ._env import RemoteEnv as RemoteEnv, RemoteVectorEnv as RemoteVectorEnv
from ._model import RemoteModel as RemoteModel

__all__ = ["RemoteEnv", "RemoteModel", "RemoteVectorEnv"]
