"""Shared machinery of the torch/jax model flavours (MOD-1, MOD-25, MOD-32).

A framework model sees values through its flavour's value bridge
(``rlmesh._bridge.TORCH`` / ``JAX``) with the model rules of
``rlmesh.models._values`` over it -- exactly the numpy flavour's rules with another
array type. ``model.device`` is read on every conversion (MOD-25: a value set
inside ``load()`` counts), so each model binds its own view of the bridge.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from ._base import ModelBase
from ._values import ModelBridge

__all__ = ["FrameworkModel"]

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")


class FrameworkModel(ModelBase[ObsT, ActT]):
    """Base of ``rlmesh.torch.Model`` / ``rlmesh.jax.Model``: a ``device`` and a bound bridge."""

    _supports_device: ClassVar[bool] = True

    def _setup(self, *args: Any, **kwargs: Any) -> None:
        super()._setup(*args, **kwargs)
        shared = self._bridge
        assert isinstance(shared, ModelBridge)
        self._bridge = shared.bound(self)
