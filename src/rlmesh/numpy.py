"""NumPy flavour: clients and models whose tensor leaves are ``numpy.ndarray`` (BKD-1..5).

Decoded observations are writable arrays that never alias another step's data
(``obs /= 255.0`` is safe); vector Discrete observations are int arrays.
"""

from __future__ import annotations

from typing import Any, ClassVar

from . import authoring as _authoring
from ._bridge import NUMPY, asarray as asarray, from_array as from_array
from .client._model import RemoteModel as _RemoteModel
from .client._numpy import RemoteEnv as RemoteEnv, RemoteVectorEnv as RemoteVectorEnv
from .models import NumpyModel as Model
from .sandbox import (
    SandboxBuild as SandboxBuild,
    SandboxInfo as SandboxInfo,
    SandboxModel as SandboxModel,
    SandboxRuntime as SandboxRuntime,
)
from .sandbox._env import ScalarSandbox as _ScalarSandbox, VectorSandbox as _VectorSandbox
from .spaces import Space, SpaceSpec, space_from_spec as _space_from_spec

__all__ = [
    "EnvFactory",
    "Model",
    "NumpyValue",
    "RemoteEnv",
    "RemoteModel",
    "RemoteVectorEnv",
    "SandboxBuild",
    "SandboxEnv",
    "SandboxInfo",
    "SandboxModel",
    "SandboxRuntime",
    "SandboxVectorEnv",
    "asarray",
    "ensure_available",
    "from_array",
    "space_from_spec",
]

#: A value tree with ndarray leaves (plus int/str/dict/tuple/list containers).
NumpyValue = Any


def ensure_available() -> None:
    """Raise ``ImportError`` if NumPy is missing (it is a core dependency, BKD-4)."""
    NUMPY.ensure_available()


def space_from_spec(spec: SpaceSpec) -> Space:
    """A space wrapper whose ``sample()`` returns NumPy values."""
    return _space_from_spec(spec, bridge=NUMPY)


class RemoteModel(_RemoteModel):
    """:class:`rlmesh.RemoteModel` for NumPy code (api-surface A.2, CNF2-A7).

    Same constructor and behaviour; observations reach the served model and
    actions come back as NumPy values at the seam.
    """


class EnvFactory(_authoring.EnvFactory):
    """:class:`rlmesh.EnvFactory` whose envs take NumPy actions (the default framework)."""

    _bridge: ClassVar[Any] = "numpy"


class SandboxEnv(_ScalarSandbox, RemoteEnv):
    """:class:`rlmesh.SandboxEnv` decoding tensor leaves to writable ``numpy.ndarray``."""


class SandboxVectorEnv(_VectorSandbox, RemoteVectorEnv):
    """:class:`rlmesh.SandboxVectorEnv` decoding batched leaves to ``numpy.ndarray``."""
