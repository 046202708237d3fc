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

There is one bridge per flavour, and every path converts through it: clients,
framework serving (``serve/_framework.py``) and the model flavours, whose own
rules (fusion, de-chunking) are functions over it in ``rlmesh.models._values``.

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
from .tensor import Tensor, aligned_empty

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
            raise ValueError("cannot fuse observations across 0 lanes: tree_stack needs at least one tree")
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
            parts = [self._stack_tree([t[j] for t in trees], n, f"{path}[{j}]") for j in range(len(first))]
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
            raise ValueError(f"cannot split a batched action leaf of type NoneType at {path} into {n} lanes")
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
        if _BY_NAME.get(self.name) is self:
            return (resolve_bridge, (self.name,))
        return super().__reduce_ex__(protocol)


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


# -- torch and jax (lazy) -------------------------------------------------------------
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
            f'{what} requires {module}. Install it with: pip install {module} (the "{extra}" extra of rlmesh-py)', name=module
        ) from None


def _is_torch(x: Any) -> bool:
    """A ``torch.Tensor`` (or subclass such as ``Parameter``), without importing torch."""
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _is_jax(x: Any) -> bool:
    """A ``jax.Array``, without importing jax."""
    return type(x).__module__.startswith(("jax", "jaxlib")) and hasattr(x, "block_until_ready")


def _torch() -> Any:
    return _require("torch", "torch", "rlmesh.torch")


class _TorchBridge(Bridge):
    """Torch values (experimental, BKD-10..13): leaves become ``torch.Tensor``.

    Decoded leaves share memory with the array they come from when it is writable
    (a client's receive buffer is fresh for every reply, so in-place ops are safe
    and no copy is made); a read-only source is copied (BKD-11).
    """

    name = "torch"

    def ensure_available(self) -> None:
        if not self._checked:
            _torch()
            self._checked = True

    def _leaf_out(self, arr: np.ndarray[Any, Any]) -> Any:
        return torch_as_tensor(arr, copy=not arr.flags.writeable)

    def _leaf_in(self, x: Any) -> Any:
        if _is_torch(x):
            return _torch_to_numpy(x)
        return x

    def encode(self, tree: Any) -> Any:
        if _is_torch(tree):  # the common action: one tensor
            if tree.dim() == 0 and tree.dtype is not _torch().bfloat16:
                return tree.item()  # a Discrete (or rank-0 Box) action: exact as a Python scalar
            return _torch_to_numpy(tree)
        if isinstance(tree, (np.ndarray, int, float, str)):
            return tree
        return super().encode(tree)

    def _stack(self, leaves: list[Any], path: str) -> Any:
        torch = _torch()
        tensors = [x if _is_torch(x) else torch.as_tensor(np.asarray(x)) for x in leaves]
        _same_shapes([tuple(t.shape) for t in tensors], path)
        return torch.stack(tensors)

    def supports_device(self) -> bool:
        return True

    def resolve_device(self, device: Any) -> Any:
        """``device`` as a ``torch.device`` (``None`` stays ``None``).

        Raises:
            ValueError: an unknown device string, or a device this machine lacks
                (``"cuda:0"`` without CUDA, an index past ``device_count()``).
        """
        if device is None:
            return None
        torch = _torch()
        try:
            dev = torch.device(device)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise ValueError(f"unknown torch device {device!r}: {exc}") from None
        if dev.type == "cpu":
            return dev
        if dev.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if (dev.index or 0) >= count:
                raise ValueError(
                    f"device={device!r} is not available: this machine has {count} CUDA "
                    "device(s); use device='cpu' (or None) or a present device"
                )
            return dev
        try:
            torch.empty(0, device=dev)
        except Exception as exc:
            raise ValueError(f"device={device!r} is not available on this machine: {exc}") from None
        return dev

    def to_device(self, tree: Any, device: Any) -> Any:
        dev = self.resolve_device(device)
        if dev is None:
            return tree
        return _torch_move(tree, dev)

    def to_host(self, value: Any) -> Any:
        if _is_torch(value):
            host = value.detach().cpu()
            return host.item() if host.dim() == 0 else host.tolist()
        return super().to_host(value)


def _torch_move(tree: Any, dev: Any) -> Any:
    if _is_torch(tree):
        return tree.to(dev, non_blocking=True)
    if isinstance(tree, dict):
        return {k: _torch_move(v, dev) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_torch_move(v, dev) for v in tree)
    if isinstance(tree, list):
        return [_torch_move(v, dev) for v in tree]
    return tree


def _torch_to_numpy(x: Any) -> np.ndarray[Any, Any]:
    """A torch tensor as a host ndarray: the tensor's own memory when it is a contiguous CPU tensor.

    Gradients are dropped (``detach``): an action is data, not part of a graph.
    """
    if x.dtype is _torch().bfloat16:
        raise ValueError("bfloat16 is not representable in rlmesh; cast to float32 first")
    if x.requires_grad:
        x = x.detach()
    if x.device.type != "cpu":
        x = x.cpu()
    if not x.is_contiguous():
        x = x.contiguous()
    return x.numpy()


def torch_as_tensor(t: Any, *, copy: bool = False) -> Any:
    """A ``torch.Tensor`` for an ``rlmesh.Tensor`` or ndarray (BKD-10).

    Zero-copy by default: the result shares memory with ``t`` (torch ignores the
    read-only flag of an ``rlmesh.Tensor``, so writing to it writes to every view);
    ``copy=True`` gives an owned, writable copy.

    Raises:
        ValueError: a dtype this torch build cannot hold (uint16/32/64 need torch >= 2.3).
    """
    torch = _torch()
    arr = t._a if isinstance(t, Tensor) else np.asarray(t)
    if copy:
        arr = np.array(arr, copy=True)
    try:
        if arr.flags.writeable:
            return torch.from_numpy(arr)
        import warnings

        with warnings.catch_warnings():  # "non-writable array": sharing is what was asked for
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(arr)
    except TypeError:
        raise ValueError(
            f"dtype {arr.dtype.name} needs torch >= 2.3 (found {getattr(torch, '__version__', '?')})"
        ) from None


def torch_from_tensor(x: Any) -> Any:
    """A ``torch.Tensor`` as an ``rlmesh.Tensor`` (a copy), a 0-d one as a Python scalar (BKD-12).

    Raises:
        TypeError: ``x`` is not a torch tensor.
        ValueError: bfloat16.
    """
    if not _is_torch(x):
        raise TypeError(f"from_tensor expects a torch.Tensor, got {type(x).__name__}")
    arr = _torch_to_numpy(x)
    if arr.ndim == 0:
        return arr.item()
    return from_array(arr)


#: Leaves of at least this many bytes are shared with XLA through DLPack; smaller ones
#: are copied, which costs less than a DLPack import. The receive buffer aligns every
#: body of this size to 64 bytes (``rlmesh.wire.frames.SMALL_BODY``), which XLA needs.
JAX_SHARE_MIN_BYTES = 16 * 1024
_JAX_MEMO_MAX_BYTES = 512
_JAX_MEMO_SIZE = 64


class _JaxBridge(Bridge):
    """JAX values (experimental, BKD-20/21): leaves become ``jax.Array``.

    Arrays are immutable, so large aligned leaves are shared with the receive
    buffer (no copy), and small 1-D lane vectors (vector rewards and flags) that
    repeat an earlier step's contents reuse that step's array.
    """

    name = "jax"

    def __init__(self) -> None:
        self._memo: dict[tuple[str, bool, bytes], Any] = {}
        self._lanes_memo: dict[tuple[bool, bytes], tuple[Any, Any, Any]] = {}

    def ensure_available(self) -> None:
        if self._checked:
            return
        jax = _require("jax", "jax", "rlmesh.jax")
        version = tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())
        if version < (0, 4, 24):
            raise DependencyMissing(
                f"rlmesh.jax requires jax >= 0.4.24, found {jax.__version__}. "
                'Install it with: pip install "jax>=0.4.24" jaxlib (the "jax" extra of rlmesh-py)',
                name="jax",
            )
        self._checked = True

    def _leaf_out(self, arr: np.ndarray[Any, Any]) -> Any:
        return jax_wrap_fresh(arr)

    def _leaf_decoder(self, spec: SpaceSpec, lanes: int | None) -> Decoder:
        # The step's hot path: a leaf whose shape and dtype the spec fixes, with no
        # 64-bit narrowing to decide, goes straight to jax's put with its aval made once.
        general = self._leaf_out
        fast = _jax_fast_put()
        try:
            dt = np_dtype(spec.dtype)
        except (KeyError, ValueError):
            return general
        if fast is None or not dt.isnative or dt.itemsize == 8 or dt.kind not in "biuf":
            return general
        shape = tuple(spec.shape) if lanes is None else (lanes, *spec.shape)
        put, shaped, sharding, devices, _ = fast
        aval = shaped(shape, dt)

        def leaf(arr: np.ndarray[Any, Any]) -> Any:
            if arr.shape == shape and arr.dtype == dt:
                return put(aval, sharding, [arr], devices, False)
            return general(arr)

        return leaf

    def _leaf_in(self, x: Any) -> Any:
        if _is_jax(x):
            return _jax_to_numpy(x)
        return x

    def encode(self, tree: Any) -> Any:
        if _is_jax(tree):
            return _jax_to_numpy(tree)
        if isinstance(tree, (np.ndarray, int, float, str)):
            return tree
        return super().encode(tree)

    def _leaf_adopt(self, arr: np.ndarray[Any, Any]) -> Any:
        # A copy: the owner may write into the array later, and a jax array must never change.
        return jax_wrap_fresh(np.array(arr, copy=True))

    def decode(self, tree: Any, *, fresh: bool = True) -> Any:
        if type(tree) is np.ndarray and tree.ndim == 1 and tree.nbytes <= _JAX_MEMO_MAX_BYTES:
            dt = tree.dtype
            # 64-bit values decode differently with and without x64 mode: keep them apart
            x64 = dt.itemsize == 8 and bool(_require("jax", "jax", "rlmesh.jax").config.jax_enable_x64)
            key = (dt.char, x64, tree.tobytes())
            memo = self._memo
            hit = memo.get(key)
            if hit is None:
                hit = jax_wrap_fresh(tree.copy())  # a memo entry must not pin a whole reply body
                if len(memo) >= _JAX_MEMO_SIZE:
                    memo.clear()
                memo[key] = hit
            return hit
        return super().decode(tree, fresh=fresh)

    def decode_lanes(self, rewards: Any, terminated: Any, truncated: Any) -> tuple[Any, Any, Any]:
        # One lookup for the step's three lane vectors ("nobody ended, reward 1" repeats);
        # a miss decodes each through the per-array memo of ``decode``.
        if rewards.nbytes > _JAX_MEMO_MAX_BYTES:
            return self.decode(rewards), self.decode(terminated), self.decode(truncated)
        x64 = bool(_require("jax", "jax", "rlmesh.jax").config.jax_enable_x64)
        key = (x64, rewards.tobytes() + terminated.tobytes() + truncated.tobytes())
        memo = self._lanes_memo
        hit = memo.get(key)
        if hit is None:
            hit = (self.decode(rewards), self.decode(terminated), self.decode(truncated))
            if len(memo) >= _JAX_MEMO_SIZE:
                memo.clear()
            memo[key] = hit
        return hit

    def _stack(self, leaves: list[Any], path: str) -> Any:
        jnp = _require("jax.numpy", "jax", "rlmesh.jax")
        arrays = [jnp.asarray(x) for x in leaves]
        _same_shapes([tuple(a.shape) for a in arrays], path)
        return jnp.stack(arrays)

    def supports_device(self) -> bool:
        return True

    def resolve_device(self, device: Any) -> Any:
        """``device`` as a ``jax.Device`` (``None`` stays ``None``; BKD-21).

        Accepts a ``jax.Device`` or a string ``"cpu"``, ``"gpu"``, ``"cuda:1"``,
        ``"tpu:0"`` (platform, optional index).

        Raises:
            ValueError: an unknown platform or an index this machine lacks.
        """
        if device is None:
            return None
        jax = _require("jax", "jax", "rlmesh.jax")
        if isinstance(device, jax.Device):
            return device
        if not isinstance(device, str):
            raise ValueError(f"device must be a jax.Device or a string like 'cpu' or 'cuda:0', got {device!r}")
        platform, _, index = device.strip().lower().partition(":")
        platform = {"cuda": "gpu", "rocm": "gpu"}.get(platform, platform)
        try:
            i = int(index or 0)
            devices = jax.devices(platform)
            return devices[i]
        except (RuntimeError, ValueError, IndexError) as exc:
            present = ", ".join(sorted({d.platform for d in jax.devices()}))
            raise ValueError(
                f"device={device!r} is not available on this machine ({exc}); present jax "
                f"platforms: {present}"
            ) from None

    def to_device(self, tree: Any, device: Any) -> Any:
        dev = self.resolve_device(device)
        if dev is None:
            return tree
        jax = _require("jax", "jax", "rlmesh.jax")
        return jax.device_put(tree, dev)

    def to_host(self, value: Any) -> Any:
        if _is_jax(value):
            value = np.asarray(value)
        return super().to_host(value)


def _jax_to_numpy(x: Any) -> np.ndarray[Any, Any]:
    """A jax array on the host: a read-only view of its buffer on the CPU, else one transfer."""
    host = np.asarray(x)
    if host.dtype.kind not in "biuf":  # bfloat16 & co. (ml_dtypes) read as kind "V"
        raise ValueError(f"{host.dtype.name} is not representable in rlmesh; cast to float32 first")
    return host


def jax_asarray(t: Any) -> Any:
    """A ``jax.Array`` for an ``rlmesh.Tensor`` or ndarray (BKD-20).

    A leaf of at least :data:`JAX_SHARE_MIN_BYTES` is imported through DLPack and
    shares memory when it is writable and 64-byte aligned (XLA copies it
    otherwise); a smaller one is copied, which is cheaper than an import. 64-bit dtypes become 32-bit
    unless jax's x64 mode is on.

    Raises:
        ValueError: without x64 mode, a 64-bit integer value outside the 32-bit range.
    """
    jnp = _require("jax.numpy", "jax", "rlmesh.jax")
    arr = t._a if isinstance(t, Tensor) else np.asarray(t)
    if arr.dtype.kind in "iu" and arr.dtype.itemsize == 8 and arr.size:
        _check_fits_32(arr)
    if arr.nbytes >= JAX_SHARE_MIN_BYTES:
        try:
            return jnp.from_dlpack(arr)
        except Exception:  # a layout DLPack cannot express: fall back to a copy
            pass
    return jnp.asarray(arr)


_NARROW = {"f": np.float32, "i": np.int32, "u": np.uint32}
# (put, ShapedArray, sharding, [device], {(shape, dtype): aval})
_FastPut = tuple[Callable[..., Any], Any, Any, list[Any], dict[tuple[tuple[int, ...], str], Any]]
_fast_put: _FastPut | bool | None = None


def _jax_fast_put() -> _FastPut | None:
    """jax's own host-to-device put for one array, without the Python dispatch around it.

    ``jax.device_put(ndarray)`` (~40 µs) ends in ``pxla.batched_device_put``, a thin
    Python wrapper around jaxlib's C++ ``batched_device_put`` (~4 µs). Neither is
    public API: the C++ one is looked up first, then the Python one; each is probed
    once (values, shape, dtype, type, and that a 64-byte-aligned leaf of
    :data:`JAX_SHARE_MIN_BYTES` is still shared, not copied), and any difference -- a
    jax version that moved or changed them -- falls back to ``jnp.asarray`` for good.
    """
    global _fast_put
    if _fast_put is None:
        _fast_put = False
        try:
            import importlib

            jax = importlib.import_module("jax")
            core = importlib.import_module("jax._src.core")
            device = jax.devices()[0]
            sharding = jax.sharding.SingleDeviceSharding(device)
            shaped = core.ShapedArray
            candidates: list[Callable[..., Any]] = []
            try:
                candidates.append(importlib.import_module("jax._src.lib").xla_client.batched_device_put)
            except Exception:
                pass
            try:
                candidates.append(importlib.import_module("jax._src.interpreters.pxla").batched_device_put)
            except Exception:
                pass
            for put in candidates:
                if _probe_put(jax, put, shaped, sharding, device):
                    _fast_put = (put, shaped, sharding, [device], {})
                    break
        except Exception:
            _fast_put = False
    return _fast_put if isinstance(_fast_put, tuple) else None


def _probe_put(jax: Any, put: Callable[..., Any], shaped: Any, sharding: Any, device: Any) -> bool:
    try:
        probe = np.arange(6, dtype=np.float32).reshape(2, 3)
        out = put(shaped(probe.shape, probe.dtype), sharding, [probe], [device], False)
        ok = (
            isinstance(out, jax.Array)
            and out.shape == probe.shape
            and out.dtype == probe.dtype
            and np.array_equal(np.asarray(out), probe)
        )
        if ok and device.platform == "cpu":  # the zero-copy promise for large aligned leaves
            big = aligned_empty(JAX_SHARE_MIN_BYTES)
            shared = put(shaped(big.shape, big.dtype), sharding, [big], [device], False)
            ok = shared.unsafe_buffer_pointer() == big.ctypes.data
        return bool(ok)
    except Exception:
        return False


def jax_wrap_fresh(arr: np.ndarray[Any, Any]) -> Any:
    """A ``jax.Array`` on the default device for a *fresh* ndarray nobody else writes to.

    The client's receive buffers are such arrays: jax may alias them (no copy when
    aligned) because the library never touches a buffer again after handing it out.
    Without x64 mode 64-bit leaves are narrowed to 32 bits first (jax's rule; a
    64-bit integer that does not fit is a ``ValueError``). Falls back to
    :func:`jax_asarray` when the fast path is unavailable.
    """
    fast = _fast_put if type(_fast_put) is tuple else _jax_fast_put()
    if fast is None or not arr.dtype.isnative:
        return jax_asarray(arr)
    dt = arr.dtype
    if dt.itemsize == 8 and dt.kind in "iuf" and not _require("jax", "jax", "rlmesh.jax").config.jax_enable_x64:
        if dt.kind in "iu" and arr.size:
            _check_fits_32(arr)
        arr = arr.astype(_NARROW[dt.kind])  # jax's own rule without x64 mode
    put, shaped, sharding, devices, avals = fast
    key = (arr.shape, arr.dtype.str)
    aval = avals.get(key)
    if aval is None:
        if len(avals) >= 256:
            avals.clear()
        aval = avals[key] = shaped(arr.shape, arr.dtype)
    return put(aval, sharding, [arr], devices, False)


def _check_fits_32(arr: np.ndarray[Any, Any]) -> None:
    """Without x64 mode jax silently wraps 64-bit integers into 32 bits; refuse values that would change."""
    jax = _require("jax", "jax", "rlmesh.jax")
    if jax.config.jax_enable_x64:
        return
    lo, hi = (-(2**31), 2**31 - 1) if arr.dtype.kind == "i" else (0, 2**32 - 1)
    if int(arr.min()) < lo or int(arr.max()) > hi:
        raise ValueError(
            f"an {arr.dtype.name} value outside the 32-bit range cannot become a jax array without "
            "x64 mode (jax would silently change it); enable it with "
            "jax.config.update('jax_enable_x64', True)"
        )


def jax_from_array(a: Any) -> Any:
    """A ``jax.Array`` as an ``rlmesh.Tensor`` (a host copy), 0-d as a Python scalar (BKD-20).

    Raises:
        TypeError: ``a`` is neither a jax nor a numpy array.
        ValueError: bfloat16.
    """
    if isinstance(a, (np.ndarray, np.generic)):
        host = np.asarray(a)
    elif _is_jax(a):
        a.block_until_ready()
        host = _jax_to_numpy(a)
    else:
        raise TypeError(f"from_array expects a jax.Array (or numpy array), got {type(a).__name__}")
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
