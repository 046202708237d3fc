"""rlmesh: serve Gymnasium-shaped environments over sockets and evaluate models against them."""

from __future__ import annotations

from . import errors as errors
from .errors import (
    EnvironmentException as EnvironmentException,
    ProtocolException as ProtocolException,
    RLMeshException as RLMeshException,
    WorkflowEditionWarning as WorkflowEditionWarning,
)
from ._metadata import sanitize_metadata as sanitize_metadata
from .tensor import Tensor as Tensor

__version__ = "0.1.0"
from .client import RemoteEnv as RemoteEnv, RemoteVectorEnv as RemoteVectorEnv
from .serve import EnvServer as EnvServer, ServeOptions as ServeOptions
