"""JAX flavour (experimental): clients and models whose tensor leaves are ``jax.Array`` (BKD-20/21).

Importing this module does not import jax; the classes check for it (jax >=
0.4.24) when constructed (``ImportError`` naming the the ``jax`` extra extra).

- Observation leaves of at least 16 KiB are imported through DLPack from the
  reply's 64-byte-aligned receive buffer without a copy (jax arrays are
  immutable, so sharing is safe); smaller leaves are copied, which costs less
  than an import. ``device=`` places every value of a step with one
  ``jax.device_put``.
- Primitives and containers stay as in :mod:`rlmesh` (BKD-1): a Discrete value
  is an ``int`` (a vector client's batch is an int array), Text a ``str``, Dict a
  ``dict``, Tuple a ``tuple``; a scalar client's reward is a ``float`` and its
  flags ``bool``; a vector client's rewards are a float array (float32 unless
  jax's x64 mode is on) and its flags bool arrays. Without x64 mode, 64-bit
  leaves become 32-bit (jax's own rule).
- Actions may be jax arrays, numpy arrays or Python values.

``SandboxEnv`` / ``SandboxVectorEnv`` are the sandboxed clients of this flavour
(:mod:`rlmesh.sandbox`); ``SandboxBuild``, ``SandboxInfo``, ``SandboxModel`` and
``SandboxRuntime`` are re-exported.
"""

from __future__ import annotations

from typing import Any, ClassVar

from . import authoring as _authoring
from ._bridge import JAX, Bridge, jax_asarray, jax_from_array
from .client._env import RemoteEnv as _RemoteEnv, RemoteVectorEnv as _RemoteVectorEnv
from .client._framework import FrameworkEnvClient
from .client._model import RemoteModel as _RemoteModel
from .models._jax import JaxModel as Model
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
    "JaxValue",
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
    "asarray",
    "ensure_available",
    "from_array",
    "space_from_spec",
]

#: A value tree with ``jax.Array`` leaves (plus int/str/dict/tuple/list containers).
JaxValue = Any


def ensure_available() -> None:
    """Raise ``ImportError`` if jax is missing or older than 0.4.24 (BKD-21)."""
    JAX.ensure_available()


def asarray(tensor: Any) -> Any:
    """A ``jax.Array`` for an ``rlmesh.Tensor`` or ndarray (BKD-20).

    A writable ndarray of at least 16 KiB is imported through DLPack (no copy
    when 64-byte aligned); smaller or read-only sources (an ``rlmesh.Tensor``
    is read-only) are copied.
    """
    ensure_available()
    return jax_asarray(tensor)


def from_array(array: Any) -> Any:
    """A ``jax.Array`` as an ``rlmesh.Tensor`` (a host copy); 0-d as a Python scalar (BKD-20).

    Raises:
        TypeError: not a jax (or numpy) array.
        ValueError: bfloat16 (not representable on the wire).
    """
    return jax_from_array(array)


def space_from_spec(spec: SpaceSpec) -> Space:
    """A space wrapper whose ``sample()`` returns jax values."""
    ensure_available()
    return _space_from_spec(spec, bridge=JAX)


class RemoteEnv(FrameworkEnvClient, _RemoteEnv):
    """:class:`rlmesh.RemoteEnv` decoding tensor leaves to ``jax.Array``.

    Args:
        address: Endpoint address such as ``"tcp://127.0.0.1:5555"``.
        host, port, path, transport: Helpers used when ``address`` is omitted.
        connect_timeout_seconds: Dial + handshake bound (``None``: 10 s).
        request_timeout_seconds: Per-request bound (``None``: wait forever).
        workflow_edition: Offer exactly this edition.
        device: Where values are placed: a ``jax.Device`` or ``"cpu"``,
            ``"gpu"``, ``"cuda:0"``, ``"tpu:0"`` (``None``: jax's default device).

    Raises:
        ImportError: jax is missing or too old.
        ValueError: an unknown device, or one this machine does not have.
    """

    _bridge: ClassVar[Bridge] = JAX


class RemoteVectorEnv(FrameworkEnvClient, _RemoteVectorEnv):
    """Experimental JAX-backed remote client for vectorized environments (seed 001).

    A vector client connects one model process to an endpoint that owns
    multiple environment instances. Batched observations, rewards, terminations
    and truncations decode into JAX values (``[N, ...]``); with ``device=`` one
    ``device_put`` places them all. Actions: one ``[N, ...]`` array per leaf, or
    N per-lane values. Arguments as :class:`RemoteEnv`.

    Example (not run here)::

        from rlmesh.jax import RemoteVectorEnv
        envs = RemoteVectorEnv("127.0.0.1:5555")
        observations, infos = envs.reset(seed=42)
        envs.close()
    """

    _bridge: ClassVar[Bridge] = JAX


class RemoteModel(_RemoteModel):
    """:class:`rlmesh.RemoteModel` for jax code: a handle to a served model.

    The served model converts values on its own side (a served
    ``rlmesh.jax.Model`` sees jax arrays); the actions a session returns are
    env-ready values for whatever env it drives.
    """


class EnvFactory(_authoring.EnvFactory):
    """:class:`rlmesh.EnvFactory` whose envs take jax actions when served (``framework="jax"``)."""

    _bridge: ClassVar[Any] = "jax"


class SandboxEnv(_ScalarSandbox, RemoteEnv):
    """:class:`rlmesh.SandboxEnv` whose tensor leaves decode as this flavour's arrays."""


class SandboxVectorEnv(_VectorSandbox, RemoteVectorEnv):
    """:class:`rlmesh.SandboxVectorEnv` whose batched leaves decode as this flavour's arrays."""
