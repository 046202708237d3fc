"""Helpers for the torch/jax flavour tests: framework value trees vs canonical numpy trees.

``assert_leaves(tree, spec, lanes, is_array)`` checks the *types* a flavour hands out
(BKD-1: only tensor leaves change type); ``host(tree)`` turns framework leaves back
into numpy; ``assert_canonical_equal`` compares exactly (dtype, shape, bits, key order).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlmesh.spaces import SpaceSpec


def host(tree: Any) -> Any:
    """Framework (torch/jax) leaves as numpy arrays; containers and primitives unchanged."""
    if isinstance(tree, dict):
        return {k: host(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(host(v) for v in tree)
    if isinstance(tree, list):
        return [host(v) for v in tree]
    if type(tree).__module__.startswith("torch"):
        return tree.detach().cpu().numpy()
    if type(tree).__module__.startswith(("jax", "jaxlib")):
        return np.asarray(tree)
    return tree


def assert_canonical_equal(got: Any, want: Any, path: str = "$") -> None:
    """Exact equality of canonical trees: container types, key order, dtype, shape, bits."""
    if isinstance(want, dict):
        assert isinstance(got, dict), f"{path}: {type(got).__name__}"
        assert list(got) == list(want), f"{path}: key order {list(got)} != {list(want)}"
        for k in want:
            assert_canonical_equal(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), f"{path}: {type(got).__name__}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_canonical_equal(g, w, f"{path}[{i}]")
    elif isinstance(want, list):
        assert list(got) == want, f"{path}: {got!r} != {want!r}"
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{path}: {type(got).__name__}"
        assert got.dtype == want.dtype and got.shape == want.shape, (
            f"{path}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
        )
        assert got.tobytes() == want.tobytes(), f"{path}: {got!r} != {want!r}"
    else:
        assert type(got) is type(want) and got == want, f"{path}: {got!r} != {want!r}"


def assert_leaves(
    tree: Any, spec: SpaceSpec, lanes: int | None, is_array: Callable[[Any], bool], path: str = "$"
) -> None:
    """BKD-1: array leaves (and batched Discrete) are framework arrays; the rest stays Python."""
    kind = spec.kind
    if kind in ("box", "multi_binary", "multi_discrete"):
        assert is_array(tree), f"{path}: {type(tree).__name__}"
        shape = tuple(spec.shape) if lanes is None else (lanes, *spec.shape)
        assert tuple(tree.shape) == shape, f"{path}: shape {tuple(tree.shape)} != {shape}"
    elif kind == "discrete":
        if lanes is None:
            assert type(tree) is int, f"{path}: {type(tree).__name__}"
        else:
            assert is_array(tree) and tuple(tree.shape) == (lanes,), (
                f"{path}: {type(tree).__name__}"
            )
    elif kind == "text":
        if lanes is None:
            assert type(tree) is str, f"{path}: {type(tree).__name__}"
        else:
            assert isinstance(tree, list) and all(type(s) is str for s in tree), path
    elif kind == "dict":
        assert isinstance(tree, dict), f"{path}: {type(tree).__name__}"
        for k, child in spec._children():
            assert_leaves(tree[k], child, lanes, is_array, f"{path}.{k}")
    else:
        assert isinstance(tree, tuple), f"{path}: {type(tree).__name__}"
        for i, (_, child) in enumerate(spec._children()):
            assert_leaves(tree[i], child, lanes, is_array, f"{path}[{i}]")
