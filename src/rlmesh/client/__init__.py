"""Clients for served endpoints (native ``rlmesh.Tensor`` values)."""

from ._env import RemoteEnv as RemoteEnv, RemoteVectorEnv as RemoteVectorEnv

__all__ = ["RemoteEnv", "RemoteVectorEnv"]
