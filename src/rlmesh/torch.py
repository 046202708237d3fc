"""Torch flavour (experimental): clients and models whose tensor leaves are ``torch.Tensor`` (BKD-10..13).

Importing this module does not import torch; the classes check for it when
constructed (``ImportError`` naming the the ``torch`` extra extra).

- Decoded observations are CPU tensors built on the reply's own receive buffer
  (fresh for every reply, so in-place ops such as ``obs /= 255`` are safe and
  nothing is copied); ``device=`` moves them, in one transfer per leaf per step.
- Primitives and containers stay as in :mod:`rlmesh` (BKD-1): a Discrete value
  is an ``int`` (a vector client's batch is an int64 tensor), Text a ``str``,
  Dict a ``dict``, Tuple a ``tuple``; a scalar client's reward is a ``float`` and
  its flags ``bool``; a vector client's rewards are a float64 tensor and its
  flags bool tensors.
- Actions may be tensors (any device; gradients are dropped), numpy arrays or
  Python values; a contiguous CPU tensor is sent from its own memory.

``SandboxEnv`` / ``SandboxVectorEnv`` are the sandboxed clients of this flavour
(:mod:`rlmesh.sandbox`); ``SandboxBuild``, ``SandboxInfo``, ``SandboxModel`` and
``SandboxRuntime`` are re-exported.
"""

from __future__ import annotations

from typing import Any, ClassVar

from . import authoring as _authoring
from ._bridge import TORCH, Bridge, torch_as_tensor, torch_from_tensor
from .client._env import RemoteEnv as _RemoteEnv, RemoteVectorEnv as _RemoteVectorEnv
from .client._framework import FrameworkEnvClient
from .client._model import RemoteModel as _RemoteModel
from .models._torch import TorchModel as Model
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
    "RemoteEnv",
    "RemoteModel",
    "RemoteVectorEnv",
    "SandboxBuild",
    "SandboxEnv",
    "SandboxInfo",
    "SandboxModel",
    "SandboxRuntime",
    "SandboxVectorEnv",
    "TorchValue",
    "as_tensor",
    "ensure_available",
    "from_tensor",
    "space_from_spec",
]

#: A value tree with ``torch.Tensor`` leaves (plus int/str/dict/tuple/list containers).
TorchValue = Any


def ensure_available() -> None:
    """Raise ``ImportError`` (naming the the ``torch`` extra extra) if torch is missing."""
    TORCH.ensure_available()


def as_tensor(tensor: Any, *, copy: bool = False) -> Any:
    """A ``torch.Tensor`` for an ``rlmesh.Tensor`` or ndarray (BKD-10).

    Zero-copy by default: the result shares memory with ``tensor`` (torch ignores
    the read-only flag of an ``rlmesh.Tensor``, so writing to the result writes
    to every view of it); ``copy=True`` gives an owned, writable copy.
    """
    return torch_as_tensor(tensor, copy=copy)


def from_tensor(tensor: Any) -> Any:
    """A ``torch.Tensor`` as an ``rlmesh.Tensor`` (detached, on the CPU, a copy); 0-d as a Python scalar (BKD-12).

    Raises:
        TypeError: not a torch tensor.
        ValueError: bfloat16 (not representable on the wire).
    """
    return torch_from_tensor(tensor)


def space_from_spec(spec: SpaceSpec) -> Space:
    """A space wrapper whose ``sample()`` returns torch values."""
    ensure_available()
    return _space_from_spec(spec, bridge=TORCH)


class RemoteEnv(FrameworkEnvClient, _RemoteEnv):
    """:class:`rlmesh.RemoteEnv` decoding tensor leaves to ``torch.Tensor``.

    Args:
        address: Endpoint address such as ``"tcp://127.0.0.1:5555"``.
        host, port, path, transport: Helpers used when ``address`` is omitted.
        connect_timeout_seconds: Dial + handshake bound (``None``: 10 s).
        request_timeout_seconds: Per-request bound (``None``: wait forever).
        workflow_edition: Offer exactly this edition.
        device: Where observations are placed (``"cuda:0"``, a ``torch.device``;
            ``None``/``"cpu"``: the host, no copy).

    Raises:
        ImportError: torch is not installed.
        ValueError: an unknown device, or one this machine does not have.
    """

    _bridge: ClassVar[Bridge] = TORCH


class RemoteVectorEnv(FrameworkEnvClient, _RemoteVectorEnv):
    """:class:`rlmesh.RemoteVectorEnv` decoding batched leaves to ``torch.Tensor``.

    Observations are ``[N, ...]`` tensors, rewards a float64 tensor ``(N,)``,
    terminations/truncations bool tensors ``(N,)``; with ``device=`` each moves
    as one batch. Actions: one ``[N, ...]`` tensor/array per leaf, or N per-lane
    values. Arguments as :class:`RemoteEnv`.
    """

    _bridge: ClassVar[Bridge] = TORCH


class RemoteModel(_RemoteModel):
    """:class:`rlmesh.RemoteModel` for torch code: a handle to a served model.

    The served model converts values on its own side (a served
    ``rlmesh.torch.Model`` sees tensors); the actions a session returns are
    env-ready values for whatever env it drives.
    """


class EnvFactory(_authoring.EnvFactory):
    """:class:`rlmesh.EnvFactory` whose envs take torch actions when served (``framework="torch"``)."""

    _bridge: ClassVar[Any] = "torch"


class SandboxEnv(_ScalarSandbox, RemoteEnv):
    """:class:`rlmesh.SandboxEnv` whose tensor leaves decode as this flavour's arrays."""


class SandboxVectorEnv(_VectorSandbox, RemoteVectorEnv):
    """:class:`rlmesh.SandboxVectorEnv` whose batched leaves decode as this flavour's arrays."""
