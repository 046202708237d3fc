"""Sandboxes: run an env or a model in its own dependency stack (SBX, docs/sandboxes.md).

Two backends: Docker (an image per build spec, one container per sandbox) and venv
(a cached virtual environment, the env server as a child process on a unix socket).
"""

from ._env import SandboxEnv as SandboxEnv, SandboxVectorEnv as SandboxVectorEnv
from ._errors import (
    DockerUnavailable as DockerUnavailable,
    SandboxBuildError as SandboxBuildError,
    SandboxCrashed as SandboxCrashed,
    SandboxError as SandboxError,
    SandboxStartError as SandboxStartError,
)
from ._model import SandboxModel as SandboxModel
from ._options import (
    SandboxBuild as SandboxBuild,
    SandboxInfo as SandboxInfo,
    SandboxRuntime as SandboxRuntime,
)

__all__ = [
    "DockerUnavailable",
    "SandboxBuild",
    "SandboxBuildError",
    "SandboxCrashed",
    "SandboxEnv",
    "SandboxError",
    "SandboxInfo",
    "SandboxModel",
    "SandboxRuntime",
    "SandboxStartError",
    "SandboxVectorEnv",
]
