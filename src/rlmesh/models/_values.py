"""The model rules over the value bridges: fusion, de-chunking, numpy scalars (MOD-1, MOD-14..17, MOD-32).

A model flavour sees values through *the* bridge of its flavour
(``rlmesh._bridge.PLAIN`` / ``NUMPY`` / ``TORCH`` / ``JAX``): the same object, and so
the same rules, a client of that flavour decodes with. This module adds only what
models need on top, as functions over a bridge:

- :func:`model_input` -- an env-side tree (a local env's own values, or a canonical
  tree from the wire) as a corner's input: ``bridge.decode(tree, fresh=False)``, so
  numpy scalars become Python scalars on every flavour but numpy's, and a jax model
  never aliases an array the env still owns;
- :func:`env_action` -- a corner's result as an env-side host tree
  (``bridge.encode``, then ``rlmesh.Tensor`` leaves as ndarrays);
- :func:`can_fuse` / :func:`dechunk_batch` / :func:`first_frame` /
  :func:`split_chunk` -- lane fusion (``bridge.tree_stack``/``tree_unstack``) and the
  chunk rules; the plain bridge cannot fuse nor de-chunk (MOD-15).

:class:`ModelBridge` binds those functions to a bridge (and, for torch/jax, to the
model whose ``device`` decoded inputs land on, MOD-25); it holds no rule of its own.

>>> b = get_bridge("numpy")
>>> import numpy as np
>>> b.tree_unstack(b.tree_stack([{"a": np.zeros(2)}, {"a": np.ones(2)}]), 2)[1]["a"]
array([1., 1.])
>>> get_bridge("plain").decode({"x": np.float32(1.5)})
{'x': 1.5}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._bridge import Bridge as ValueBridge, resolve_bridge
from ..tensor import Tensor

__all__ = [
    "Bridge",
    "ModelBridge",
    "can_fuse",
    "dechunk_batch",
    "env_action",
    "first_frame",
    "get_bridge",
    "map_leaves",
    "model_input",
    "split_chunk",
    "to_numpy_tree",
]


def map_leaves(fn: Callable[[Any], Any], tree: Any) -> Any:
    """Apply ``fn`` to every leaf of a dict/list/tuple tree, keeping container types."""
    if isinstance(tree, Mapping):
        return {k: map_leaves(fn, v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(map_leaves(fn, v) for v in tree)
    if isinstance(tree, list):
        return [map_leaves(fn, v) for v in tree]
    return fn(tree)


def _tensor_to_numpy(x: Any) -> Any:
    if isinstance(x, Tensor):
        return np.asarray(x)
    return x


def to_numpy_tree(tree: Any) -> Any:
    """Turn :class:`~rlmesh.Tensor` leaves into (read-only, zero-copy) ndarrays."""
    if isinstance(tree, np.ndarray):
        return tree
    return map_leaves(_tensor_to_numpy, tree)


def model_input(bridge: ValueBridge, tree: Any) -> Any:
    """An env-side value tree as a corner of ``bridge``'s flavour sees it (MOD-1).

    The arrays stay the env's (``fresh=False``): torch shares a writable one, jax copies.
    """
    return bridge.decode(tree, fresh=False)


def env_action(bridge: ValueBridge, value: Any) -> Any:
    """A corner's result as an env-side host tree (framework and Tensor leaves -> ndarrays)."""
    if isinstance(value, np.ndarray):
        return value
    return to_numpy_tree(bridge.encode(value))


def can_fuse(bridge: ValueBridge) -> bool:
    """Whether batched corners of this flavour get fused ``[N, ...]`` leaves (else a per-lane list)."""
    return bridge.name != "plain"


def dechunk_batch(bridge: ValueBridge, chunks: Any) -> Any:
    """Frame 0 of every lane of a batched chunk ``[N, H, ...]`` (MOD-14).

    Every leaf with ``ndim >= 2`` is sliced ``[:, 0]``; other leaves are untouched.

    Raises:
        TypeError: the plain bridge (no array leaves, MOD-15).
    """
    if not can_fuse(bridge):
        raise TypeError(f"the {bridge.name} bridge cannot de-chunk")
    return map_leaves(lambda x: x[:, 0] if getattr(x, "ndim", 0) >= 2 else x, chunks)


class ModelBridge:
    """A model's view of its flavour's value bridge: the functions above, bound (BKD-30).

    Attributes:
        values: the flavour's value bridge (``rlmesh._bridge.PLAIN`` ...).
        name: the flavour name.
        can_fuse: whether batched corners receive fused leaves (MOD-32).
        can_dechunk: whether a chunk corner can stand in for ``predict`` (MOD-15).
    """

    def __init__(self, values: ValueBridge, model: Any = None) -> None:
        self.values = values
        self.name = values.name
        self.can_fuse = self.can_dechunk = can_fuse(values)
        self._model = model  # read for ``device`` at every decode (MOD-25); None: no device
        self._raw: Any = None
        self._device: Any = None

    def bound(self, model: Any) -> ModelBridge:
        """This bridge for one model: decoded inputs land on ``model.device`` (MOD-25)."""
        return ModelBridge(self.values, model)

    def ensure_available(self) -> None:
        """Raise ``ImportError`` when the framework is missing (MOD-1)."""
        self.values.ensure_available()

    def decode(self, tree: Any) -> Any:
        """Env-side tree -> model value (:func:`model_input`, then ``model.device``)."""
        out = model_input(self.values, tree)
        dev = self._target()
        return out if dev is None else self.values.to_device(out, dev)

    def encode(self, value: Any) -> Any:
        """Model value -> env-side host tree (:func:`env_action`)."""
        return env_action(self.values, value)

    def tree_stack(self, lanes: Sequence[Any]) -> Any:
        """Fuse per-lane values into one batched value (MOD-32)."""
        return self.values.tree_stack(lanes)

    def tree_unstack(self, value: Any, n: int) -> list[Any]:
        """Split a batched value into ``n`` per-lane values (MOD-32)."""
        return self.values.tree_unstack(value, n)

    def dechunk_batch(self, chunks: Any) -> Any:
        """Frame 0 of every lane of a batched chunk (MOD-14)."""
        return dechunk_batch(self.values, chunks)

    def _target(self) -> Any:
        model = self._model
        if model is None:
            return None
        raw = model.device
        if raw is None:
            return None
        if raw is not self._raw:  # resolve once per assigned value
            self._device = self.values.resolve_device(raw)
            self._raw = raw
        return self._device

    def __repr__(self) -> str:
        return f"<rlmesh model bridge {self.name!r}>"


def get_bridge(name: str) -> ModelBridge:
    """The model bridge of flavour ``name`` (``"plain"``, ``"numpy"``, ``"torch"`` or ``"jax"``).

    The torch/jax value bridges import their framework only when a value is converted.

    Raises:
        ValueError: an unknown name.
    """
    found = _BRIDGES.get(name)
    if found is None:
        if name not in ("plain", "numpy", "torch", "jax"):
            raise ValueError(
                f"unknown model bridge {name!r}; expected one of ['jax', 'numpy', 'plain', 'torch']"
            )
        found = _BRIDGES[name] = ModelBridge(resolve_bridge(name))
    return found


_BRIDGES: dict[str, ModelBridge] = {}

#: The model bridge type under its older name (``model._bridge`` annotations).
Bridge = ModelBridge


# -- chunk frames (MOD-16, MOD-17) -------------------------------------------------------


def first_frame(chunk: Any) -> Any:
    """Frame 0 of one chunk (MOD-16): the de-chunk rule.

    >>> first_frame({"arm": np.array([[1, 2], [3, 4]])})["arm"]
    array([1, 2])
    """
    if isinstance(chunk, Mapping):
        return {k: first_frame(v) for k, v in chunk.items()}
    if isinstance(chunk, (list, tuple)):
        if not chunk:
            raise ValueError("the model returned an empty chunk; a chunk needs at least one frame")
        return chunk[0]
    if getattr(chunk, "ndim", 0) >= 1:
        if len(chunk) == 0:
            raise ValueError("the model returned an empty chunk; a chunk needs at least one frame")
        return chunk[0]
    return chunk


def split_chunk(chunk: Any) -> list[Any]:
    """Split one chunk into per-step frames along its leading axis (MOD-17).

    >>> split_chunk({"a": np.arange(4).reshape(2, 2)})
    [{'a': array([0, 1])}, {'a': array([2, 3])}]
    """
    if isinstance(chunk, (str, bytes, bytearray)):
        return [chunk]
    if isinstance(chunk, Mapping):
        parts = {k: split_chunk(v) for k, v in chunk.items()}
        lengths = {k: len(v) for k, v in parts.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"chunk leaves disagree on horizon: {lengths}; every leaf needs the same "
                "leading chunk axis"
            )
        n = next(iter(lengths.values()), 0)
        return [{k: parts[k][i] for k in parts} for i in range(n)]
    if isinstance(chunk, np.ndarray):
        if chunk.ndim == 0:
            return [chunk]
        return list(chunk)
    try:
        return list(chunk)
    except TypeError:
        return [chunk]
