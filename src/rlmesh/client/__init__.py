"""Clients for served endpoints (native ``rlmesh.Tensor`` values)."""

from ._env import RemoteEnv as RemoteEnv, RemoteVectorEnv as RemoteVectorEnv
from ._model import RemoteModel as RemoteModel

__all__ = ["RemoteEnv", "RemoteModel", "RemoteVectorEnv"]
