"""The jax bridge (experimental, BKD-20/21): leaves become ``jax.Array``; jax loads on first use.

``jax_asarray`` / ``jax_from_array`` are the conversions ``rlmesh.jax`` re-exports;
``jax_wrap_fresh`` puts a client's fresh receive buffer on the device. Its fast
path is jax's own put found in ``_jax_probe.py``, the one module that touches jax's
private API; when the probe fails, every leaf goes through the public
``jax_asarray`` instead (same values, slower).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._dtypes import np_dtype
from ..errors import DependencyMissing
from ..tensor import Tensor
from . import _jax_probe
from ._base import Bridge, Decoder, _require, _same_shapes, from_array

if TYPE_CHECKING:
    from ..spaces._spec import SpaceSpec

__all__ = [
    "JAX_SHARE_MIN_BYTES",
    "_JaxBridge",
    "_is_jax",
    "jax_asarray",
    "jax_from_array",
    "jax_wrap_fresh",
]


def _is_jax(x: Any) -> bool:
    """A ``jax.Array``, without importing jax."""
    return type(x).__module__.startswith(("jax", "jaxlib")) and hasattr(x, "block_until_ready")


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
        fast = _jax_probe.fast_put(JAX_SHARE_MIN_BYTES)
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
            x64 = dt.itemsize == 8 and bool(
                _require("jax", "jax", "rlmesh.jax").config.jax_enable_x64
            )
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
            raise ValueError(
                f"device must be a jax.Device or a string like 'cpu' or 'cuda:0', got {device!r}"
            )
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


def jax_wrap_fresh(arr: np.ndarray[Any, Any]) -> Any:
    """A ``jax.Array`` on the default device for a *fresh* ndarray nobody else writes to.

    The client's receive buffers are such arrays: jax may alias them (no copy when
    aligned) because the library never touches a buffer again after handing it out.
    Without x64 mode 64-bit leaves are narrowed to 32 bits first (jax's rule; a
    64-bit integer that does not fit is a ``ValueError``). Falls back to
    :func:`jax_asarray` when the fast path is unavailable.
    """
    probed = _jax_probe._fast_put
    fast = probed if type(probed) is tuple else _jax_probe.fast_put(JAX_SHARE_MIN_BYTES)
    if fast is None or not arr.dtype.isnative:
        return jax_asarray(arr)
    dt = arr.dtype
    if (
        dt.itemsize == 8
        and dt.kind in "iuf"
        and not _require("jax", "jax", "rlmesh.jax").config.jax_enable_x64
    ):
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
