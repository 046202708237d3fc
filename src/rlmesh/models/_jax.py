"""``rlmesh.jax.Model``: the model flavour whose corners see ``jax.Array`` values (MOD-1, MOD-25)."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from ._framework import FrameworkModel

__all__ = ["JaxModel"]

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")


class JaxModel(FrameworkModel[ObsT, ActT]):
    """A model whose corners see ``jax.Array`` leaves (re-exported as ``rlmesh.jax.Model``).

    Observation leaves arrive as jax arrays on the default device, or on
    :attr:`device` (a ``jax.Device`` or a string such as ``"cpu"``/``"cuda:0"``)
    when it is set -- read at every predict, so ``load()`` may set it. Discrete
    values arrive as Python ints and Text as ``str``. Return jax arrays, numpy
    arrays or Python values. Batched corners receive fused ``[N, ...]`` arrays
    (``jnp.stack``), which suits a ``jax.jit``-compiled ``predict_batch``; set
    ``allow_fusion = False`` to keep traced shapes fixed.

    Constructing one without jax installed raises ``ImportError`` (MOD-1).
    """

    _bridge_name: ClassVar[str] = "jax"
