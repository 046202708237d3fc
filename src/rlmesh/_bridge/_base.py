"""The base value bridge and the two host bridges (plain, numpy); the lazy framework import.

:class:`Bridge` holds every rule the four flavours share (the tree walk, fusing and
splitting lanes, the compiled decoder, devices); ``_PlainBridge`` and
``_NumpyBridge`` override the leaves. The torch and jax bridges live in
``_torch.py`` / ``_jax.py``, the name table in ``_registry.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._dtypes import dtype_name, np_dtype
from ..errors import DependencyMissing
from ..tensor import Tensor

if TYPE_CHECKING:
    from ..spaces._spec import SpaceSpec

__all__ = ["BUILTINS", "Bridge", "Decoder", "asarray", "builtin_bridge", "from_array"]

Decoder = Callable[[Any], Any]


def _identity(x: Any) -> Any:
    return x


class Bridge:
    """Base bridge: identity on canonical trees, numpy stacking. Subclasses override leaves.

    Attributes:
        name: ``"plain"``, ``"numpy"``, ``"torch"`` or ``"jax"``.
    """

    name = "base"
    #: Whether the space encoders take this bridge's values as they are (``encode`` is the identity).
    host_values = False
    _checked = False

    # -- availability ---------------------------------------------------------------

    def ensure_available(self) -> None:
        """Raise ``DependencyMissing`` (an ``ImportError``) if the framework is absent (BKD-4)."""

    # -- leaves (override) ----------------------------------------------------------

    def _leaf_out(self, arr: np.ndarray[Any, Any]) -> Any:
        return arr

    def _batched_ints_out(self, arr: np.ndarray[Any, Any]) -> Any:
        return self._leaf_out(arr)

    def decode_lanes(self, rewards: Any, terminated: Any, truncated: Any) -> tuple[Any, Any, Any]:
        """A vector step's float64 rewards and bool flags (``[N]`` ndarrays) as this bridge's values."""
        return self.decode(rewards), self.decode(terminated), self.decode(truncated)

    def _leaf_decoder(self, spec: SpaceSpec, lanes: int | None) -> Decoder:
        """The decoder of one array leaf of ``spec`` (``lanes``: a vector client's batch)."""
        return self._leaf_out

    def _leaf_in(self, x: Any) -> Any:
        return x

    def _stack(self, leaves: list[Any], path: str) -> Any:
        arrays = [np.asarray(x) for x in leaves]
        _same_shapes([a.shape for a in arrays], path)
        return np.stack(arrays)

    def _split(self, x: Any, n: int, path: str) -> list[Any]:
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) == 0 or not hasattr(x, "__getitem__"):
            raise ValueError(
                f"cannot split a batched action leaf of type {type(x).__name__} at {path} into {n} "
                f"lanes; return an array with a leading batch axis n={n} or a list of {n} values"
            )
        if shape[0] != n:
            raise ValueError(
                f"batched action leaf at {path} has shape {list(shape)}; expected a leading batch axis n={n}"
            )
        return [x[i] for i in range(n)]

    # -- trees ----------------------------------------------------------------------

    def decode(self, tree: Any, *, fresh: bool = True) -> Any:
        """Map a host value tree to this bridge's values: the one rule set for every path.

        ndarray leaves become this flavour's arrays, numpy scalars become Python
        scalars (the numpy bridge keeps them), ``rlmesh.Tensor`` leaves become this
        flavour's arrays (the plain bridge keeps them), mappings become ``dict``,
        tuples and lists keep their type; anything else (``int``, ``str``, ``None``)
        passes through.

        Args:
            tree: a canonical tree, or an env's own value tree.
            fresh: whether array leaves are fresh buffers nobody else writes to (a
                client's receive buffer); ``False`` for arrays an env still owns,
                which a bridge with immutable arrays (jax) then copies.
        """
        return self._walk(tree, self._leaf_out if fresh else self._leaf_adopt)

    def _walk(self, tree: Any, leaf: Callable[[Any], Any]) -> Any:
        if isinstance(tree, np.ndarray):
            return leaf(tree)
        if isinstance(tree, Mapping):
            return {k: self._walk(v, leaf) for k, v in tree.items()}
        if isinstance(tree, tuple):
            return tuple([self._walk(v, leaf) for v in tree])
        if isinstance(tree, list):
            return [self._walk(v, leaf) for v in tree]
        if isinstance(tree, np.generic):
            return self._scalar_out(tree)
        if isinstance(tree, Tensor):
            return self._tensor_out(tree)
        return tree

    def _leaf_adopt(self, arr: np.ndarray[Any, Any]) -> Any:
        """An array leaf the caller keeps owning (see ``decode(fresh=False)``)."""
        return self._leaf_out(arr)

    def _scalar_out(self, x: np.generic) -> Any:
        """A numpy scalar: a Python scalar on every bridge but numpy's (BKD-1, BKD-2)."""
        return x.item()

    def _tensor_out(self, t: Tensor) -> Any:
        """An ``rlmesh.Tensor`` leaf (a plain env's value) as this flavour's array."""
        return self._leaf_out(np.array(t._a, copy=True))

    def compile_decoder(self, spec: SpaceSpec, *, lanes: int | None = None) -> Decoder:
        """A function decoding canonical values of ``spec`` (with ``lanes``) quickly."""
        return _compile_decoder(self, spec, lanes)

    def encode(self, tree: Any) -> Any:
        """Map user values to something the space encoders accept (framework leaves -> numpy)."""
        if isinstance(tree, dict):
            return {k: self.encode(v) for k, v in tree.items()}
        if isinstance(tree, tuple):
            items = [self.encode(v) for v in tree]
            return type(tree)(*items) if hasattr(tree, "_asdict") else tuple(items)
        if isinstance(tree, list):
            return [self.encode(v) for v in tree]
        return self._leaf_in(tree)

    def tree_stack(self, trees: Sequence[Any]) -> Any:
        """Fuse N identically shaped trees into one with a leading lane axis (BKD-31, MOD-32).

        dict -> dict of fused children, list/tuple -> element-wise (type kept),
        str/bytes leaves -> a per-lane list, other leaves -> this framework's stack.

        Raises:
            ValueError: no trees; ragged keys, lengths or shapes; a ``None`` leaf.
        """
        trees = list(trees)
        if not trees:
            raise ValueError(
                "cannot fuse observations across 0 lanes: tree_stack needs at least one tree"
            )
        return self._stack_tree(trees, len(trees), "$")

    def tree_unstack(self, value: Any, n: int) -> list[Any]:
        """Split a fused tree (leading axis ``n`` on every leaf) into ``n`` per-lane trees (MOD-32).

        A dict or a tuple whose items all carry the lane axis recurses; any other
        list/tuple of exactly ``n`` items is taken as the per-lane values.

        Raises:
            ValueError: a leaf without the leading axis ``n``; a leaf that cannot be split.
        """
        return self._unstack_tree(value, n, "$")

    def _stack_tree(self, trees: list[Any], n: int, path: str) -> Any:
        first = trees[0]
        if any(t is None for t in trees):
            raise ValueError(f"cannot fuse a None observation leaf across {n} lanes at {path}")
        if isinstance(first, Mapping):
            keys = list(first)
            for i, t in enumerate(trees):
                if not isinstance(t, Mapping) or set(t) != set(keys):
                    got = repr(sorted(t)) if isinstance(t, Mapping) else type(t).__name__
                    raise ValueError(
                        f"cannot fuse observations with ragged keys across {n} lanes at {path}: "
                        f"lane {i} has keys {got}, lane 0 has {sorted(keys)}"
                    )
            return {k: self._stack_tree([t[k] for t in trees], n, f"{path}.{k}") for k in keys}
        if isinstance(first, (list, tuple)):
            for i, t in enumerate(trees):
                if not isinstance(t, (list, tuple)) or len(t) != len(first):
                    got = str(len(t)) if isinstance(t, (list, tuple)) else type(t).__name__
                    raise ValueError(
                        f"cannot fuse ragged container lengths across {n} lanes at {path}: "
                        f"lane {i} has {got}, lane 0 has {len(first)}"
                    )
            parts = [
                self._stack_tree([t[j] for t in trees], n, f"{path}[{j}]")
                for j in range(len(first))
            ]
            return tuple(parts) if isinstance(first, tuple) else parts
        if isinstance(first, (str, bytes)):
            if not all(isinstance(t, (str, bytes)) for t in trees):
                raise ValueError(f"cannot fuse strings with non-strings across {n} lanes at {path}")
            return list(trees)
        return self._stack(trees, path)

    def _unstack_tree(self, value: Any, n: int, path: str) -> list[Any]:
        if isinstance(value, Mapping):
            cols = {k: self._unstack_tree(v, n, f"{path}.{k}") for k, v in value.items()}
            return [{k: c[i] for k, c in cols.items()} for i in range(n)]
        if isinstance(value, (list, tuple)):
            if isinstance(value, tuple) and value and all(_has_lanes(v, n) for v in value):
                parts = [self._unstack_tree(v, n, f"{path}[{j}]") for j, v in enumerate(value)]
                return [tuple([p[i] for p in parts]) for i in range(n)]
            if len(value) == n:
                return list(value)
            if isinstance(value, list) and value and all(_has_lanes(v, n) for v in value):
                parts = [self._unstack_tree(v, n, f"{path}[{j}]") for j, v in enumerate(value)]
                return [[p[i] for p in parts] for i in range(n)]
            raise ValueError(
                f"batched action leaf at {path} has {len(value)} entries; expected {n} (one per lane)"
            )
        if value is None:
            raise ValueError(
                f"cannot split a batched action leaf of type NoneType at {path} into {n} lanes"
            )
        return self._split(value, n, path)

    # -- devices --------------------------------------------------------------------

    def supports_device(self) -> bool:
        """Whether :meth:`to_device` can move leaves off the host."""
        return False

    def resolve_device(self, device: Any) -> Any:
        """The framework's device object for ``device``; host bridges know only ``None``/``"cpu"``.

        Raises:
            ValueError: a device this bridge cannot place values on.
        """
        if device is None or str(device).strip().lower() == "cpu":
            return None
        raise ValueError(
            f"the {self.name} bridge has no devices; got device={device!r} (use 'cpu' or None)"
        )

    def to_device(self, tree: Any, device: Any) -> Any:
        """Move tensor leaves to ``device`` (host bridges accept only ``None``/``"cpu"``)."""
        if device is None or str(device).lower() == "cpu":
            return tree
        raise ValueError(
            f"the {self.name} bridge has no devices; got device={device!r} (use 'cpu' or None)"
        )

    def to_host(self, value: Any) -> Any:
        """A reward/done leaf as a host scalar (0-d) or list (BKD-13)."""
        if isinstance(value, Tensor):
            value = value._a
        if isinstance(value, (np.ndarray, np.generic)):
            return value.item() if value.ndim == 0 else value.tolist()
        return value

    def __repr__(self) -> str:
        return f"<rlmesh bridge {self.name!r}>"

    def __reduce_ex__(self, protocol: Any) -> Any:
        # The built-in bridges are singletons: they unpickle to themselves, by name.
        if BUILTINS.get(self.name) is self:
            return (builtin_bridge, (self.name,))
        return super().__reduce_ex__(protocol)


#: The built-in singletons by their names (``_registry.py`` fills it).
BUILTINS: dict[str, Bridge] = {}


def builtin_bridge(name: str) -> Bridge:
    """The built-in bridge called ``name``: how a pickled built-in bridge comes back as itself."""
    return BUILTINS[name]


def _same_shapes(shapes: list[tuple[int, ...]], path: str) -> None:
    for i, s in enumerate(shapes):
        if s != shapes[0]:
            raise ValueError(
                f"cannot fuse ragged observation leaves across {len(shapes)} lanes at {path}: "
                f"lane {i} has shape {list(s)}, lane 0 has {list(shapes[0])}"
            )


def _has_lanes(x: Any, n: int) -> bool:
    """Whether ``x`` is a fused child: a container, or an array whose leading axis is ``n``."""
    if isinstance(x, (Mapping, tuple)):
        return True
    if isinstance(x, list):
        return len(x) == n
    shape = getattr(x, "shape", None)
    return shape is not None and len(shape) >= 1 and shape[0] == n


def _compile_decoder(bridge: Bridge, spec: SpaceSpec, lanes: int | None) -> Decoder:
    kind = spec.kind
    if kind in ("box", "multi_binary", "multi_discrete"):
        return bridge._leaf_decoder(spec, lanes)
    if kind == "discrete":
        return bridge._batched_ints_out if lanes is not None else _identity
    if kind in ("text", "opaque"):  # strings and plain data are the same in every flavour
        return _identity
    if kind == "dict":
        children = [(k, _compile_decoder(bridge, v, lanes)) for k, v in spec._children()]
        if all(f is _identity for _, f in children):
            return _identity
        return lambda tree: {k: f(tree[k]) for k, f in children}
    subs = [_compile_decoder(bridge, v, lanes) for _, v in spec._children()]
    if all(f is _identity for f in subs):
        return _identity
    return lambda tree: tuple([f(x) for f, x in zip(subs, tree, strict=True)])


# -- plain and numpy ------------------------------------------------------------------


class _PlainBridge(Bridge):
    """Dependency-free values: ``rlmesh.Tensor`` leaves, ``list[int]`` batched Discrete."""

    name = "plain"
    host_values = True

    def _leaf_out(self, arr: np.ndarray[Any, Any]) -> Any:
        if not arr.flags.c_contiguous or arr.dtype.byteorder == ">":
            arr = np.asarray(arr, dtype=np_dtype(dtype_name(arr.dtype)), order="C")
        return Tensor._wrap(arr)

    def _batched_ints_out(self, arr: np.ndarray[Any, Any]) -> Any:
        return arr.tolist()

    def _tensor_out(self, t: Tensor) -> Any:
        return t

    def encode(self, tree: Any) -> Any:
        return tree  # the space encoders take Tensors, arrays and Python values directly

    def tree_stack(self, trees: Sequence[Any]) -> Any:
        """The plain bridge cannot fuse: per-lane values stay a list (BKD-31, MOD-32)."""
        return list(trees)

    def tree_unstack(self, value: Any, n: int) -> list[Any]:
        """Per-lane values back: exactly ``n`` of them in a list (a dict is refused, MOD-32)."""
        if not isinstance(value, (list, tuple)):
            raise ValueError(
                f"cannot split a batched action leaf of type {type(value).__name__} into {n} lanes; "
                f"the plain bridge expects a list of {n} per-lane values"
            )
        if len(value) != n:
            raise ValueError(
                f"a batched corner returned {len(value)} lane values, expected {n}; the plain bridge "
                f"expects a list of {n} per-lane values (one action per lane)"
            )
        return list(value)


class _NumpyBridge(Bridge):
    """NumPy values: canonical trees as they are (writable arrays, OPP-20); numpy scalars stay."""

    name = "numpy"
    host_values = True

    def _scalar_out(self, x: np.generic) -> Any:
        return x

    def encode(self, tree: Any) -> Any:
        return tree  # canonical trees and numpy values need no conversion

    def compile_decoder(self, spec: SpaceSpec, *, lanes: int | None = None) -> Decoder:
        return _identity


# -- lazy framework imports (the torch and jax bridges) ---------------------------------
#
# Neither framework is imported until a torch/jax bridge is *used* (``ensure_available``
# or a decode); ``encode`` recognizes framework leaves by their type's module, so it
# never imports anything either.


_MODULES: dict[str, Any] = {}


def _require(module: str, extra: str, what: str) -> Any:
    found = _MODULES.get(module)
    if found is not None:
        return found
    import importlib

    try:
        found = _MODULES[module] = importlib.import_module(module)
        return found
    except ImportError:
        raise DependencyMissing(
            f'{what} requires {module}. Install it with: pip install {module} (the "{extra}" extra of rlmesh-py)',
            name=module,
        ) from None


# -- numpy helpers (rlmesh.numpy re-exports these) ------------------------------------


def asarray(tensor: Any) -> np.ndarray[Any, Any]:
    """A writable numpy copy of a Tensor; bool/int/float become 0-d arrays (BKD-1).

    >>> a = asarray(Tensor(bytes(8), [2], "float32"))
    >>> a.flags.writeable, a.dtype.name
    (True, 'float32')
    """
    if isinstance(tensor, Tensor):
        return np.array(tensor._a, copy=True)
    return np.array(tensor, copy=True)


def from_array(a: Any) -> Any:
    """Encode an array for the dependency-free API (BKD-2); always copies.

    A numpy scalar or 0-d array becomes a Python scalar; an ndarray becomes a
    C-contiguous little-endian :class:`rlmesh.Tensor` copy.

    Raises:
        TypeError: ``a`` is not a numpy array or scalar.
        ValueError: the dtype is not one of the twelve (bfloat16, complex ...).

    >>> from_array(np.float32(1.5)), from_array(np.arange(3, dtype=np.int32))
    (1.5, Tensor(dtype='int32', shape=[3], bytes=12))
    """
    if isinstance(a, np.generic):
        a = np.asarray(a)
    if not isinstance(a, np.ndarray):
        raise TypeError(f"from_array expects a numpy array or scalar, got {type(a).__name__}")
    name = dtype_name(a.dtype)
    if a.ndim == 0:
        return a.item()
    return Tensor._wrap(np.array(a, dtype=np_dtype(name), order="C", copy=True))
