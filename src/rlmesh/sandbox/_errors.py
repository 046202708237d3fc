"""Sandbox errors. Each also subclasses the built-in a caller would catch.

::

    RLMeshException (RuntimeError)
    └── SandboxError                  a sandbox could not be built, started or stopped
        ├── DockerUnavailable         no ``docker`` CLI, or its daemon does not answer
        ├── SandboxBuildError         the image / virtual environment build failed (log tail)
        └── SandboxStartError         the env server exited or never became ready (log tail)
    ConnectionLost (ConnectionError)
    └── SandboxCrashed                the env server died while a client was using it (log tail)
"""

from __future__ import annotations

from ..errors import ConnectionLost, RLMeshException

__all__ = [
    "DockerUnavailable",
    "SandboxBuildError",
    "SandboxCrashed",
    "SandboxError",
    "SandboxStartError",
]


class SandboxError(RLMeshException):
    """A sandbox could not be built, started or stopped (a ``RuntimeError``)."""


class DockerUnavailable(SandboxError):
    """The Docker CLI is missing, or its daemon is down or not responding."""


class SandboxBuildError(SandboxError):
    """Building the sandbox (image or virtual environment) failed; the message ends with the log tail."""


class SandboxStartError(SandboxError):
    """The sandboxed server exited, or did not become ready in time; the message ends with the log tail."""


class SandboxCrashed(ConnectionLost):
    """The sandboxed server died while in use; the message ends with its last log lines."""
