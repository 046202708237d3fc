"""``rlmesh.numpy.Model``: the model flavour whose corners see numpy values (MOD-1)."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from ._base import ModelBase

__all__ = ["NumpyModel"]

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")


class NumpyModel(ModelBase[ObsT, ActT]):
    """A model whose ``predict`` sees numpy arrays (re-exported as ``rlmesh.numpy.Model``).

    Observation leaves arrive as ``np.ndarray`` (Discrete values as numpy ints,
    Text as ``str``); return numpy arrays, lists or scalars. Batched corners get
    fused ``[N, ...]`` leaves (``np.stack``) and must return a leading lane axis;
    a chunk-only model derives ``predict`` from frame 0 of its chunk (MOD-14).

    >>> import numpy as np
    >>> NumpyModel(lambda obs: obs * 2).predict(np.ones(2))
    array([2., 2.])
    """

    _bridge_name: ClassVar[str] = "numpy"
