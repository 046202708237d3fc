"""The NumPy-bound env clients, defined below ``eval/`` so a session can dial with them.

``rlmesh.numpy`` re-exports both classes under their public names; ``eval`` dials an
address with them without importing the flavour facade (issue 10, layers).
"""

from __future__ import annotations

from typing import ClassVar

from .._bridge import NUMPY, Bridge
from ._env import RemoteEnv as _RemoteEnv, RemoteVectorEnv as _RemoteVectorEnv

__all__ = ["RemoteEnv", "RemoteVectorEnv"]


class RemoteEnv(_RemoteEnv):
    """:class:`rlmesh.RemoteEnv` decoding tensor leaves to writable ``numpy.ndarray``."""

    __module__ = "rlmesh.numpy"
    _bridge: ClassVar[Bridge] = NUMPY


class RemoteVectorEnv(_RemoteVectorEnv):
    """:class:`rlmesh.RemoteVectorEnv` decoding batched leaves to ``numpy.ndarray``."""

    __module__ = "rlmesh.numpy"
    _bridge: ClassVar[Bridge] = NUMPY
