"""``rlmesh.jax.Model``: the model flavour whose corners see ``jax.Array`` values (MOD-1, MOD-25)."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import numpy as np

from .._bridge import JAX, _is_jax, jax_wrap_fresh
from ._framework import FrameworkModel, FrameworkModelBridge

__all__ = ["MODEL_BRIDGE", "JaxModel"]

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")


def _leaf(arr: np.ndarray[Any, Any]) -> Any:
    # A copy: an env may write into the array it returned once the step is over,
    # and a jax array must never change under the model.
    return jax_wrap_fresh(np.array(arr, copy=True))


MODEL_BRIDGE = FrameworkModelBridge(JAX, _leaf, _is_jax)


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
