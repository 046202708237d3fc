"""Value conversion at the predict seam: bridges, lane fusion and chunk frames (MOD-1, MOD-14..17, MOD-32).

A *bridge* turns the env-side value tree (numpy leaves: what a local Gymnasium env
and ``rlmesh.numpy.RemoteEnv`` produce) into what a model's ``predict`` sees, and
the model's action back. Two flavours live here:

- ``plain`` (``rlmesh.Model``): ndarray leaves become :class:`rlmesh.Tensor`
  (zero-copy), numpy scalars become Python scalars. It cannot fuse lanes (a batch
  is a per-lane ``list``) and cannot de-chunk (MOD-15).
- ``numpy`` (``rlmesh.numpy.Model``): identity on numpy trees; lanes fuse with
  ``np.stack`` and chunks de-chunk by taking frame 0.

These model bridges are separate from ``rlmesh._bridge`` (the client/space value
bridges): they also carry the model rules (fusion, de-chunking, numpy scalars as
Python scalars for the plain flavour).

>>> b = get_bridge("numpy")
>>> import numpy as np
>>> b.tree_unstack(b.tree_stack([{"a": np.zeros(2)}, {"a": np.ones(2)}]), 2)[1]["a"]
array([1., 1.])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..tensor import Tensor

__all__ = [
    "Bridge",
    "NumpyBridge",
    "PlainBridge",
    "first_frame",
    "get_bridge",
    "map_leaves",
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


class Bridge:
    """How a model flavour sees values (BKD-30). Subclasses override the hooks."""

    name = "base"
    #: Whether batched corners receive fused ``[N, ...]`` leaves (else a per-lane list).
    can_fuse = False
    #: Whether a chunk corner can stand in for ``predict`` by taking frame 0 (MOD-15).
    can_dechunk = False

    def ensure_available(self) -> None:
        """Raise ``ImportError`` when the framework is missing (MOD-1)."""

    def decode(self, tree: Any) -> Any:
        """Env-side numpy tree -> model value."""
        return tree

    def encode(self, value: Any) -> Any:
        """Model value -> env-side numpy tree."""
        return value

    def tree_stack(self, lanes: Sequence[Any]) -> Any:
        """Fuse per-lane values into one batched value (MOD-32)."""
        return list(lanes)

    def tree_unstack(self, value: Any, n: int) -> list[Any]:
        """Split a batched value into ``n`` per-lane values (MOD-32)."""
        if isinstance(value, (list, tuple)) and not isinstance(value, str):
            if len(value) != n:
                raise ValueError(
                    f"a batched corner returned {len(value)} lane values, expected {n}; "
                    "return one action per lane"
                )
            return list(value)
        raise ValueError(
            f"cannot split a batched action leaf of type {type(value).__name__} into {n} lanes; "
            f"the {self.name} bridge expects a list of exactly {n} per-lane values"
        )

    def dechunk_batch(self, chunks: Any) -> Any:
        """Frame 0 of every lane of a batched chunk ``[N, H, ...]`` (MOD-14)."""
        raise TypeError(f"the {self.name} bridge cannot de-chunk")


class PlainBridge(Bridge):
    """``rlmesh.Model``: Tensor leaves, per-lane lists, no de-chunk (MOD-15, L-5)."""

    name = "plain"

    def decode(self, tree: Any) -> Any:
        if isinstance(tree, np.ndarray):
            return _to_plain(tree)
        return map_leaves(_to_plain, tree)

    def encode(self, value: Any) -> Any:
        if isinstance(value, Tensor):
            return np.asarray(value)
        return map_leaves(_tensor_to_numpy, value)


def _to_plain(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        arr = x if x.flags.c_contiguous and x.dtype.isnative else np.ascontiguousarray(x)
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return Tensor._wrap(arr)
    if isinstance(x, np.generic):
        return x.item()
    return x


class NumpyBridge(Bridge):
    """``rlmesh.numpy.Model``: numpy leaves, ``np.stack`` fusion, frame-0 de-chunk."""

    name = "numpy"
    can_fuse = True
    can_dechunk = True

    def decode(self, tree: Any) -> Any:
        if isinstance(tree, np.ndarray):
            return tree
        return to_numpy_tree(tree)

    def encode(self, value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return value
        return to_numpy_tree(value)

    def tree_stack(self, lanes: Sequence[Any]) -> Any:
        n = len(lanes)
        return _stack(list(lanes), n, "$")

    def tree_unstack(self, value: Any, n: int) -> list[Any]:
        return _unstack(value, n, "$")

    def dechunk_batch(self, chunks: Any) -> Any:
        # MOD-14: every array leaf with ndim >= 2 is sliced [:, 0]; other leaves untouched.
        return map_leaves(lambda x: x[:, 0] if getattr(x, "ndim", 0) >= 2 else x, chunks)


def _np_stack(leaves: list[Any]) -> Any:
    return np.stack([np.asarray(x) for x in leaves])


def _stack(lanes: list[Any], n: int, path: str, leaf_stack: Callable[[list[Any]], Any] = _np_stack) -> Any:
    first = lanes[0]
    if isinstance(first, Mapping):
        keys = list(first.keys())
        for lane in lanes:
            if not isinstance(lane, Mapping) or set(lane) != set(keys):
                raise ValueError(
                    f"cannot fuse observations with ragged keys across {n} lanes at {path}: "
                    f"expected keys {keys}"
                )
        return {k: _stack([lane[k] for lane in lanes], n, f"{path}.{k}", leaf_stack) for k in keys}
    if isinstance(first, (list, tuple)) and not isinstance(first, str):
        size = len(first)
        if any(not isinstance(lane, (list, tuple)) or len(lane) != size for lane in lanes):
            raise ValueError(f"cannot fuse ragged container lengths across {n} lanes at {path}")
        out = [_stack([lane[i] for lane in lanes], n, f"{path}[{i}]", leaf_stack) for i in range(size)]
        return tuple(out) if isinstance(first, tuple) else out
    if any(lane is None for lane in lanes):
        raise ValueError(f"cannot fuse a None observation leaf across {n} lanes at {path}")
    if isinstance(first, (str, bytes)):
        return list(lanes)
    try:
        return leaf_stack(lanes)
    except (ValueError, RuntimeError) as exc:  # torch.stack raises RuntimeError on ragged shapes
        raise ValueError(f"cannot fuse ragged observation leaves across {n} lanes at {path}: {exc}") from None


def _unstack(value: Any, n: int, path: str) -> list[Any]:
    if isinstance(value, Mapping):
        parts = {k: _unstack(v, n, f"{path}.{k}") for k, v in value.items()}
        return [{k: parts[k][i] for k in parts} for i in range(n)]
    if isinstance(value, np.ndarray) and value.ndim >= 1:
        if value.shape[0] != n:
            raise ValueError(
                f"batched action leaf at {path} has shape {list(value.shape)}; expected a "
                f"leading batch axis n={n}"
            )
        return list(value)
    if isinstance(value, (list, tuple)) and not isinstance(value, str):
        if len(value) == n:
            return list(value)
        raise ValueError(f"batched action leaf at {path} has {len(value)} entries; expected {n}")
    if hasattr(value, "shape") and hasattr(value, "__getitem__") and len(getattr(value, "shape", ())) >= 1:
        if value.shape[0] != n:
            raise ValueError(f"batched action leaf at {path} needs a leading batch axis n={n}")
        return [value[i] for i in range(n)]
    raise ValueError(
        f"cannot split a batched action leaf of type {type(value).__name__} at {path} into {n} lanes"
    )


_BRIDGES: dict[str, Bridge] = {"plain": PlainBridge(), "numpy": NumpyBridge()}


def get_bridge(name: str) -> Bridge:
    """The bridge named ``name`` (``"plain"``, ``"numpy"``, ``"torch"`` or ``"jax"``).

    The torch/jax bridges load on first use (their modules import no framework
    until a value is converted).
    """
    if name not in _BRIDGES and name in ("torch", "jax"):
        import importlib

        module = importlib.import_module(f"rlmesh.models._{name}")
        _BRIDGES[name] = module.MODEL_BRIDGE
    try:
        return _BRIDGES[name]
    except KeyError:
        raise ValueError(f"unknown model bridge {name!r}; expected one of {sorted(_BRIDGES)}") from None


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
