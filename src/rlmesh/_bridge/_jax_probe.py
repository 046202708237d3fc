"""jax's own host-to-device put, found and checked once: the one place rlmesh touches jax private API.

Why: ``jax.device_put(ndarray)`` costs ~40 µs per leaf, almost all of it Python
dispatch; it ends in ``pxla.batched_device_put``, a thin Python wrapper around
jaxlib's C++ ``batched_device_put`` (~4 µs). A jax client decodes every leaf of
every reply, so the jax bridge (``_jax.py``) calls that put directly.

Neither function is public API, so nothing here trusts it: the C++ one is looked
up first, then the Python one, and each candidate is probed once on a small array
(values, shape, dtype, type) and, on the CPU, on a 64-byte-aligned leaf that must
still be shared, not copied (the zero-copy promise of ``jax_asarray``).

When the probe fails -- a jax version that moved, renamed or changed these
functions, or any exception while looking -- :func:`fast_put` returns ``None``
for the rest of the process and the jax bridge uses the public path
(``jnp.asarray`` / DLPack, ``jax_asarray``): the same values and dtypes, only
slower. Nothing is logged and no error reaches the user.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..tensor import aligned_empty

__all__ = ["FastPut", "fast_put"]

#: ``(put, ShapedArray, sharding, [device], {(shape, dtype): aval})``: the probed put
#: and what a call to it needs.
FastPut = tuple[Callable[..., Any], Any, Any, list[Any], dict[tuple[tuple[int, ...], str], Any]]
#: ``None``: not probed yet; ``False``: probed and refused (the public path for good).
_fast_put: FastPut | bool | None = None


def fast_put(shared_bytes: int) -> FastPut | None:
    """jax's own put for one array, without the Python dispatch around it; ``None`` if unusable.

    Probed on the first call, once per process (see the module docstring);
    ``shared_bytes`` is the size of the aligned leaf whose zero-copy sharing the
    probe checks on the CPU (the jax bridge's ``JAX_SHARE_MIN_BYTES``).
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
                candidates.append(
                    importlib.import_module("jax._src.lib").xla_client.batched_device_put
                )
            except Exception:
                pass
            try:
                candidates.append(
                    importlib.import_module("jax._src.interpreters.pxla").batched_device_put
                )
            except Exception:
                pass
            for put in candidates:
                if _probe_put(jax, put, shaped, sharding, device, shared_bytes):
                    _fast_put = (put, shaped, sharding, [device], {})
                    break
        except Exception:
            _fast_put = False
    return _fast_put if isinstance(_fast_put, tuple) else None


def _probe_put(
    jax: Any, put: Callable[..., Any], shaped: Any, sharding: Any, device: Any, shared_bytes: int
) -> bool:
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
            big = aligned_empty(shared_bytes)
            shared = put(shaped(big.shape, big.dtype), sharding, [big], [device], False)
            ok = shared.unsafe_buffer_pointer() == big.ctypes.data
        return bool(ok)
    except Exception:
        return False
