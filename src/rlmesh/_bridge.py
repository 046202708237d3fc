"""Value bridges: canonical trees <-> what each flavour of the API hands to users (BKD-30/31).

The wire codec and the space encoders speak *canonical trees* (see
``rlmesh.spaces._values``): ndarray leaves for Box/MultiBinary/MultiDiscrete,
``int``/``str`` for one Discrete/Text value, a 1-D ndarray/``list[str]`` for a
batch of them, ``dict``/``tuple`` containers. A bridge maps those trees to user
values and back:

=========  ==================================  ===============================
bridge     ndarray leaf becomes                batched Discrete becomes
=========  ==================================  ===============================
``plain``  ``rlmesh.Tensor`` (zero-copy view)  ``list[int]`` (VAL-2/VAL-3)
``numpy``  the ndarray itself (writable)       the int ndarray (OPP-20)
``torch``  ``torch.Tensor`` (shares memory)    an int tensor
``jax``    ``jax.Array``                       an int array
=========  ==================================  ===============================

``decode(tree)`` walks any tree; ``compile_decoder(spec, lanes=)`` builds a
per-spec function for the hot path (it alone knows which arrays are batched
Discrete values). ``encode(value)`` turns framework leaves into something
:func:`rlmesh.spaces._values.compile_encoder` accepts. ``tree_stack`` /
``tree_unstack`` fuse and split per-lane trees (BKD-31); the plain bridge cannot
fuse and passes per-lane lists through.

>>> import numpy as np
>>> NUMPY.tree_stack([{"a": np.zeros(2), "t": "x"}, {"a": np.ones(2), "t": "y"}])
{'a': array([[0., 0.],
       [1., 1.]]), 't': ['x', 'y']}
>>> PLAIN.decode({"a": np.zeros(2, np.float32)})
{'a': Tensor(dtype='float32', shape=[2], bytes=8)}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._dtypes import dtype_name, np_dtype
from .errors import DependencyMissing
from .tensor import Tensor

if TYPE_CHECKING:
    from .spaces._spec import SpaceSpec

__all__ = [
    "JAX",
    "NUMPY",
    "PLAIN",
    "TORCH",
    "Bridge",
    "asarray",
    "from_array",
    "jax_asarray",
    "jax_from_array",
    "resolve_bridge",
    "torch_as_tensor",
    "torch_from_tensor",
]

Decoder = Callable[[Any], Any]


def _identity(x: Any) -> Any:
    return x


class Bridge:
    """Base bridge: identity on canonical trees, numpy stacking. Subclasses override leaves.

    Attributes:
        name: ``"plain"``, ``"numpy"``, ``"torch"`` or ``"jax"``.
    """

    name = "base"
    _checked = False

    # -- availability ---------------------------------------------------------------

    def ensure_available(self) -> None:
        """Raise ``DependencyMissing`` (an ``ImportError``) if the framework is absent (BKD-4)."""

    # -- leaves (override) ----------------------------------------------------------

    def _leaf_out(self, arr: np.ndarray[Any, Any]) -> Any:
        return arr

    def _batched_ints_out(self, arr: np.ndarray[Any, Any]) -> Any:
        return self._leaf_out(arr)

    def _leaf_in(self, x: Any) -> Any:
        return x

    def _stack(self, leaves: list[Any], path: str) -> Any:
        arrays = [np.asarray(x) for x in leaves]
        _same_shapes([a.shape for a in arrays], path)
        return np.stack(arrays)

    def _split(self, x: Any, n: int, path: str) -> list[Any]:
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) == 0 or shape[0] != n:
            raise ValueError(
                f"cannot unstack {path}: expected a leading axis of {n}, got shape {shape}"
            )
        return [x[i] for i in range(n)]

    # -- trees ----------------------------------------------------------------------

    def decode(self, tree: Any) -> Any:
        """Map a canonical tree to this bridge's values (array leaves converted)."""
        if isinstance(tree, np.ndarray):
            return self._leaf_out(tree)
        if isinstance(tree, dict):
            return {k: self.decode(v) for k, v in tree.items()}
        if isinstance(tree, tuple):
            return tuple(self.decode(v) for v in tree)
        if isinstance(tree, list):
            return [self.decode(v) for v in tree]
        return tree

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
        """Fuse N identically shaped trees into one with a leading lane axis (BKD-31)."""
        trees = list(trees)
        if not trees:
            raise ValueError("tree_stack needs at least one tree")
        return self._stack_tree(trees, "$")

    def tree_unstack(self, value: Any, n: int) -> list[Any]:
        """Split a fused tree (leading axis ``n`` everywhere) into ``n`` per-lane trees."""
        return self._unstack_tree(value, n, "$")

    def _stack_tree(self, trees: list[Any], path: str) -> Any:
        first = trees[0]
        if any(t is None for t in trees):
            raise ValueError(f"cannot stack a None leaf at {path}")
        if isinstance(first, Mapping):
            keys = list(first)
            for i, t in enumerate(trees):
                if not isinstance(t, Mapping) or set(t) != set(keys):
                    got = repr(sorted(t)) if isinstance(t, Mapping) else type(t).__name__
                    raise ValueError(
                        f"cannot stack ragged dicts at {path}: tree {i} has keys {got}, "
                        f"tree 0 has {sorted(keys)}"
                    )
            return {k: self._stack_tree([t[k] for t in trees], f"{path}.{k}") for k in keys}
        if isinstance(first, (list, tuple)):
            for i, t in enumerate(trees):
                if not isinstance(t, (list, tuple)) or len(t) != len(first):
                    n = str(len(t)) if isinstance(t, (list, tuple)) else type(t).__name__
                    raise ValueError(
                        f"cannot stack ragged sequences at {path}: tree {i} has {n}, "
                        f"tree 0 has {len(first)}"
                    )
            parts = [
                self._stack_tree([t[j] for t in trees], f"{path}[{j}]") for j in range(len(first))
            ]
            return tuple(parts) if isinstance(first, tuple) else parts
        if isinstance(first, (str, bytes)):
            if not all(isinstance(t, (str, bytes)) for t in trees):
                raise ValueError(f"cannot stack strings with non-strings at {path}")
            return list(trees)
        return self._stack(trees, path)

    def _unstack_tree(self, value: Any, n: int, path: str) -> list[Any]:
        if value is None:
            raise ValueError(f"cannot unstack a None leaf at {path}")
        if isinstance(value, Mapping):
            cols = {k: self._unstack_tree(v, n, f"{path}.{k}") for k, v in value.items()}
            return [{k: c[i] for k, c in cols.items()} for i in range(n)]
        if isinstance(value, list) and value and all(isinstance(x, (str, bytes)) for x in value):
            if len(value) != n:
                raise ValueError(f"cannot unstack {path}: expected {n} strings, got {len(value)}")
            return list(value)
        if isinstance(value, (list, tuple)):
            parts = [self._unstack_tree(v, n, f"{path}[{j}]") for j, v in enumerate(value)]
            rows = [[p[i] for p in parts] for i in range(n)]
            return [tuple(r) for r in rows] if isinstance(value, tuple) else rows
        return self._split(value, n, path)

    # -- devices --------------------------------------------------------------------

    def supports_device(self) -> bool:
        """Whether :meth:`to_device` can move leaves off the host."""
        return False

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
        if _BY_NAME.get(self.name) is self:
            return (resolve_bridge, (self.name,))
        return super().__reduce_ex__(protocol)


def _same_shapes(shapes: list[tuple[int, ...]], path: str) -> None:
    for i, s in enumerate(shapes):
        if s != shapes[0]:
            raise ValueError(
                f"cannot stack ragged shapes at {path}: tree {i} has {list(s)}, tree 0 has {list(shapes[0])}"
            )


def _compile_decoder(bridge: Bridge, spec: SpaceSpec, lanes: int | None) -> Decoder:
    kind = spec.kind
    if kind in ("box", "multi_binary", "multi_discrete"):
        return bridge._leaf_out
    if kind == "discrete":
        return bridge._batched_ints_out if lanes is not None else _identity
    if kind == "text":
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

    def _leaf_out(self, arr: np.ndarray[Any, Any]) -> Any:
        if not arr.flags.c_contiguous or arr.dtype.byteorder == ">":
            arr = np.asarray(arr, dtype=np_dtype(dtype_name(arr.dtype)), order="C")
        return Tensor._wrap(arr)

    def _batched_ints_out(self, arr: np.ndarray[Any, Any]) -> Any:
        return arr.tolist()

    def encode(self, tree: Any) -> Any:
        return tree  # the space encoders take Tensors, arrays and Python values directly

    def tree_stack(self, trees: Sequence[Any]) -> Any:
        """The plain bridge cannot fuse: per-lane values stay a list (BKD-31)."""
        return list(trees)

    def tree_unstack(self, value: Any, n: int) -> list[Any]:
        if not isinstance(value, (list, tuple)) or len(value) != n:
            got = len(value) if isinstance(value, (list, tuple)) else type(value).__name__
            raise ValueError(f"the plain bridge expects a list of {n} per-lane values, got {got}")
        return list(value)


class _NumpyBridge(Bridge):
    """NumPy values: canonical trees as they are (writable arrays, OPP-20)."""

    name = "numpy"

    def encode(self, tree: Any) -> Any:
        return tree  # canonical trees and numpy values need no conversion

    def compile_decoder(self, spec: SpaceSpec, *, lanes: int | None = None) -> Decoder:
        return _identity


# -- torch and jax (lazy) -------------------------------------------------------------


def _require(module: str, extra: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise DependencyMissing(
            f'{what} requires {module}. Install it with: pip install "rlmesh[{extra}]"', name=module
        ) from None


class _TorchBridge(Bridge):
    """Torch values (experimental, BKD-10..13): leaves become ``torch.Tensor``."""

    name = "torch"

    def ensure_available(self) -> None:
        if not self._checked:
            _require("torch", "torch", "rlmesh.torch")
            self._checked = True

    def _leaf_out(self, arr: np.ndarray[Any, Any]) -> Any:
        return torch_as_tensor(arr, copy=not arr.flags.writeable)

    def _leaf_in(self, x: Any) -> Any:
        if type(x).__module__.startswith("torch") and hasattr(x, "detach"):
            return _torch_to_numpy(x)
        return x

    def _stack(self, leaves: list[Any], path: str) -> Any:
        torch = _require("torch", "torch", "rlmesh.torch")
        tensors = [
            x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x)) for x in leaves
        ]
        _same_shapes([tuple(t.shape) for t in tensors], path)
        return torch.stack(tensors)

    def supports_device(self) -> bool:
        return True

    def to_device(self, tree: Any, device: Any) -> Any:
        if device is None:
            return tree
        if isinstance(tree, dict):
            return {k: self.to_device(v, device) for k, v in tree.items()}
        if isinstance(tree, (list, tuple)):
            moved = [self.to_device(v, device) for v in tree]
            return tuple(moved) if isinstance(tree, tuple) else moved
        return tree.to(device) if hasattr(tree, "to") and hasattr(tree, "detach") else tree

    def to_host(self, value: Any) -> Any:
        if hasattr(value, "detach") and hasattr(value, "cpu"):
            host = value.detach().cpu()
            return host.item() if host.dim() == 0 else host.tolist()
        return super().to_host(value)


def _torch_to_numpy(x: Any) -> np.ndarray[Any, Any]:
    if str(x.dtype).endswith("bfloat16"):
        raise ValueError("bfloat16 is not representable in rlmesh; cast to float32 first")
    return np.asarray(x.detach().cpu().contiguous().numpy())


def torch_as_tensor(t: Any, *, copy: bool = False) -> Any:
    """A ``torch.Tensor`` for an ``rlmesh.Tensor`` or ndarray (BKD-10).

    Zero-copy by default (the result shares memory; writing to it writes to every
    view), an owned writable copy with ``copy=True``.
    """
    torch = _require("torch", "torch", "rlmesh.torch")
    arr = t._a if isinstance(t, Tensor) else np.asarray(t)
    if arr.size == 0:
        return torch.empty(arr.shape, dtype=_torch_dtype(torch, arr.dtype))
    if copy or not arr.flags.writeable:
        arr = np.array(arr, copy=True)
    _torch_dtype(torch, arr.dtype)
    return torch.from_numpy(arr)


def _torch_dtype(torch: Any, dt: np.dtype[Any]) -> Any:
    name = dtype_name(dt)
    found = getattr(torch, name if name != "bool" else "bool", None)
    if found is None:
        raise ValueError(
            f"dtype {name} needs torch >= 2.3 (found {getattr(torch, '__version__', '?')})"
        )
    return found


def torch_from_tensor(x: Any) -> Any:
    """A ``torch.Tensor`` as an ``rlmesh.Tensor`` (a copy), a 0-d one as a Python scalar (BKD-12)."""
    torch = _require("torch", "torch", "rlmesh.torch")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"from_tensor expects a torch.Tensor, got {type(x).__name__}")
    arr = _torch_to_numpy(x)
    if arr.ndim == 0:
        return arr.item()
    return from_array(arr)


class _JaxBridge(Bridge):
    """JAX values (experimental, BKD-20/21): leaves become ``jax.Array``."""

    name = "jax"

    def ensure_available(self) -> None:
        if self._checked:
            return
        jax = _require("jax", "jax", "rlmesh.jax")
        version = tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())
        if version < (0, 4, 24):
            raise DependencyMissing(
                f"rlmesh.jax requires jax >= 0.4.24, found {jax.__version__}. "
                'Install it with: pip install "rlmesh[jax]"',
                name="jax",
            )
        self._checked = True

    def _leaf_out(self, arr: np.ndarray[Any, Any]) -> Any:
        return jax_asarray(arr)

    def _leaf_in(self, x: Any) -> Any:
        if type(x).__module__.startswith(("jax", "jaxlib")):
            return np.asarray(x)
        return x

    def _stack(self, leaves: list[Any], path: str) -> Any:
        jnp = _require("jax.numpy", "jax", "rlmesh.jax")
        arrays = [jnp.asarray(x) for x in leaves]
        _same_shapes([tuple(a.shape) for a in arrays], path)
        return jnp.stack(arrays)

    def supports_device(self) -> bool:
        return True

    def to_device(self, tree: Any, device: Any) -> Any:
        if device is None:
            return tree
        jax = _require("jax", "jax", "rlmesh.jax")
        dev = _jax_device(jax, device)
        return jax.device_put(tree, dev)

    def to_host(self, value: Any) -> Any:
        if type(value).__module__.startswith(("jax", "jaxlib")):
            value = np.asarray(value)
        return super().to_host(value)


def _jax_device(jax: Any, device: Any) -> Any:
    if not isinstance(device, str):
        return device
    platform, _, index = device.partition(":")  # "cuda:0" -> jax.devices("cuda")[0] (BKD-21)
    platform = {"cuda": "gpu"}.get(platform, platform)
    return jax.devices(platform)[int(index or 0)]


def jax_asarray(t: Any) -> Any:
    """A ``jax.Array`` for an ``rlmesh.Tensor`` or ndarray (BKD-20): DLPack, else a copy."""
    jnp = _require("jax.numpy", "jax", "rlmesh.jax")
    arr = t._a if isinstance(t, Tensor) else np.asarray(t)
    try:
        return jnp.from_dlpack(arr)
    except Exception:  # unaligned or unsupported: fall back to a copy
        return jnp.asarray(arr)


def jax_from_array(a: Any) -> Any:
    """A ``jax.Array`` as an ``rlmesh.Tensor`` (a host copy), 0-d as a Python scalar (BKD-20)."""
    _require("jax", "jax", "rlmesh.jax")
    if str(getattr(a, "dtype", "")).endswith("bfloat16"):
        raise ValueError("bfloat16 is not representable in rlmesh; cast to float32 first")
    if hasattr(a, "block_until_ready"):
        a.block_until_ready()
    host = np.asarray(a)
    if host.ndim == 0:
        return host.item()
    return from_array(host)


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


# -- registry -------------------------------------------------------------------------

PLAIN: Bridge = _PlainBridge()
NUMPY: Bridge = _NumpyBridge()
TORCH: Bridge = _TorchBridge()
JAX: Bridge = _JaxBridge()

_BY_NAME: dict[str, Bridge] = {
    "plain": PLAIN,
    "native": PLAIN,
    "numpy": NUMPY,
    "np": NUMPY,
    "torch": TORCH,
    "pytorch": TORCH,
    "jax": JAX,
}


def resolve_bridge(bridge: str | Bridge | None) -> Bridge:
    """The bridge for a name (``"numpy"``, ``"np"``, ``"plain"``, ``"torch"``, ``"jax"``) or object.

    ``None`` means the plain (dependency-free) bridge. Names are case- and
    space-insensitive (BKD-30).

    Raises:
        ValueError: an unknown name.
        TypeError: neither a name nor a bridge.

    >>> resolve_bridge(" NumPy ") is NUMPY, resolve_bridge(None) is PLAIN
    (True, True)
    """
    if bridge is None:
        return PLAIN
    if isinstance(bridge, Bridge):
        return bridge
    if isinstance(bridge, str):
        key = bridge.strip().lower()
        try:
            return _BY_NAME[key]
        except KeyError:
            raise ValueError(
                f"unknown value bridge {bridge!r}; expected one of 'plain', 'numpy', 'np', 'torch', 'jax'"
            ) from None
    raise TypeError(f"bridge must be a name or a Bridge, got {type(bridge).__name__}")
