"""Shared machinery of the torch/jax model flavours (MOD-1, MOD-25, MOD-32).

A framework model bridge converts the env-side numpy tree into framework arrays
before a corner runs and the corner's result back; batched corners get fused
``[N, ...]`` leaves (the framework's ``stack``), chunk corners de-chunk by taking
frame 0 -- exactly the numpy flavour's rules with another array type.

``model.device`` is read on every conversion (MOD-25: a value set inside
``load()`` counts), so each model gets its own :class:`DeviceBridge` bound to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from .._bridge import Bridge as ValueBridge
from ..tensor import Tensor
from ._base import ModelBase
from ._values import Bridge, _stack, _unstack, map_leaves

__all__ = ["DeviceBridge", "FrameworkModel", "FrameworkModelBridge"]

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")


class FrameworkModelBridge(Bridge):
    """Model bridge over a value bridge (``rlmesh._bridge.TORCH`` / ``JAX``)."""

    can_fuse = True
    can_dechunk = True

    def __init__(self, values: ValueBridge, leaf: Callable[[Any], Any], is_leaf: Callable[[Any], bool]) -> None:
        self.values = values
        self.name = values.name
        self._leaf = leaf  # ndarray -> framework array
        self._is_leaf = is_leaf  # whether a value already is a framework array

    def ensure_available(self) -> None:
        self.values.ensure_available()

    def _in(self, x: Any) -> Any:
        if isinstance(x, np.ndarray):
            return self._leaf(x)
        if isinstance(x, np.generic):
            return x.item()  # numpy scalars (a Discrete obs) become Python scalars (BKD-1)
        if isinstance(x, Tensor):
            return self._leaf(np.array(x._a, copy=True))
        return x

    def decode(self, tree: Any) -> Any:
        if isinstance(tree, np.ndarray):
            return self._leaf(tree)
        if self._is_leaf(tree):
            return tree
        return map_leaves(self._in, tree)

    def encode(self, value: Any) -> Any:
        return self.values.encode(value)

    def tree_stack(self, lanes: Sequence[Any]) -> Any:
        return _stack(list(lanes), len(lanes), "$", self._stack_leaves)

    def _stack_leaves(self, leaves: list[Any]) -> Any:
        return self.values._stack(leaves, "$")

    def tree_unstack(self, value: Any, n: int) -> list[Any]:
        return _unstack(value, n, "$")

    def dechunk_batch(self, chunks: Any) -> Any:
        return map_leaves(lambda x: x[:, 0] if getattr(x, "ndim", 0) >= 2 else x, chunks)

    def place(self, tree: Any, device: Any) -> Any:
        """``tree``'s framework leaves on ``device`` (a resolved device)."""
        return self.values.to_device(tree, device)


class DeviceBridge(Bridge):
    """A model's own view of its flavour bridge: decoded inputs land on ``model.device``."""

    can_fuse = True
    can_dechunk = True

    def __init__(self, inner: FrameworkModelBridge, model: ModelBase[Any, Any]) -> None:
        self.inner = inner
        self.name = inner.name
        self._model = model
        self._raw: Any = None
        self._device: Any = None

    def ensure_available(self) -> None:
        self.inner.ensure_available()

    def _target(self) -> Any:
        raw = self._model.device
        if raw is None:
            return None
        if raw is not self._raw:  # resolve once per assigned value
            self._device = self.inner.values.resolve_device(raw)
            self._raw = raw
        return self._device

    def decode(self, tree: Any) -> Any:
        out = self.inner.decode(tree)
        dev = self._target()
        return out if dev is None else self.inner.place(out, dev)

    def encode(self, value: Any) -> Any:
        return self.inner.encode(value)

    def tree_stack(self, lanes: Sequence[Any]) -> Any:
        return self.inner.tree_stack(lanes)

    def tree_unstack(self, value: Any, n: int) -> list[Any]:
        return self.inner.tree_unstack(value, n)

    def dechunk_batch(self, chunks: Any) -> Any:
        return self.inner.dechunk_batch(chunks)


class FrameworkModel(ModelBase[ObsT, ActT]):
    """Base of ``rlmesh.torch.Model`` / ``rlmesh.jax.Model``: a ``device`` and a bound bridge."""

    _supports_device: ClassVar[bool] = True

    def _setup(self, *args: Any, **kwargs: Any) -> None:
        super()._setup(*args, **kwargs)
        inner = self._bridge
        assert isinstance(inner, FrameworkModelBridge)
        self._bridge = DeviceBridge(inner, self)
