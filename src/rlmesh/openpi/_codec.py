"""The openpi wire's value packing: msgpack with numpy arrays as tagged maps (sans-IO).

openpi's policy servers and its ``openpi-client`` package exchange msgpack messages in
which a numpy array is a map and a numpy scalar another (the layout below, as
``openpi_client.msgpack_numpy`` 0.1.2 writes it, observed byte for byte in
``tests/integration/openpi_bridge/test_peer.py``). :func:`packb` writes exactly those bytes;
:func:`unpackb` reads them back. No sockets here: the client and the server loop hand
this module whole WebSocket messages.

Layout (msgpack ``bin`` keys, in this order)::

    ndarray  {b"__ndarray__": true, b"data": bin(C-order bytes), b"dtype": str(dtype.str),
              b"shape": [int, ...]}
    generic  {b"__npgeneric__": true, b"data": item(), b"dtype": str(dtype.str)}

Everything else is plain msgpack (``str`` keys, tuples as arrays). Object, void and
complex arrays are refused when packing, as openpi's client does.

Reading is strict, because a peer's bytes are hostile: a malformed message, an array
whose ``data`` length disagrees with its dtype and shape, or an object/void dtype
raises :class:`~rlmesh.errors.ProtocolException` and allocates nothing beyond the
message itself. Arrays come back as read-only views of the received bytes (as in
openpi; copy one to write into it).

>>> import numpy as np
>>> msg = packb({"actions": np.zeros((2, 3), np.float32), "prompt": "pick"})
>>> out = unpackb(msg)
>>> out["actions"].shape, out["actions"].dtype.str, out["prompt"]
((2, 3), '<f4', 'pick')
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ProtocolException
from . import _deps

__all__ = ["Packer", "packb", "unpackb"]

_ND = b"__ndarray__"
_NG = b"__npgeneric__"
#: Array kinds a peer may not send: object and void arrays would execute or reinterpret.
_REFUSED_KINDS = frozenset("OV")


def _array_bytes(a: np.ndarray[Any, Any]) -> Any:
    """The C-order bytes of ``a`` without a copy when it is contiguous (msgpack reads buffers)."""
    if a.flags.c_contiguous and a.dtype.kind in "biuf":
        try:
            return memoryview(a).cast("B")  # type: ignore[arg-type]  # same bytes as a.tobytes(), one copy fewer
        except (TypeError, ValueError):
            pass
    return a.tobytes()


def _default(obj: Any) -> Any:
    """msgpack's ``default`` hook: numpy arrays and scalars as openpi's tagged maps."""
    if isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind in ("V", "O", "c"):
        raise ValueError(
            f"the openpi wire cannot carry a {obj.dtype} value; convert it to a numeric array first"
        )
    if isinstance(obj, np.ndarray):
        return {_ND: True, b"data": _array_bytes(obj), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {_NG: True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(
        f"the openpi wire cannot carry a value of type {type(obj).__name__}; send numpy arrays, "
        "numbers, strings, lists and dicts"
    )


def _dtype(raw: Any) -> np.dtype[Any]:
    if not isinstance(raw, (str, bytes)):
        raise ProtocolException(f"openpi array: dtype must be a string, got {type(raw).__name__}")
    try:
        dtype = np.dtype(raw.decode() if isinstance(raw, bytes) else raw)
    except (TypeError, ValueError, UnicodeDecodeError):
        raise ProtocolException(f"openpi array: unknown dtype {raw!r}") from None
    if dtype.kind in _REFUSED_KINDS or dtype.hasobject:
        raise ProtocolException(f"openpi array: dtype {dtype} is not accepted from a peer")
    return dtype


def _hook(obj: dict[Any, Any]) -> Any:
    """msgpack's ``object_hook``: tagged maps back into numpy values, checked."""
    if _ND in obj:
        dtype = _dtype(obj.get(b"dtype"))
        data, shape = obj.get(b"data"), obj.get(b"shape")
        if not isinstance(data, bytes):
            raise ProtocolException("openpi array: data must be bytes")
        if not isinstance(shape, (list, tuple)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise ProtocolException(
                f"openpi array: shape must be a list of ints >= 0, got {shape!r}"
            )
        if math.prod(shape) * dtype.itemsize != len(data):
            raise ProtocolException(
                f"openpi array: {len(data)} data bytes do not fill a {dtype}{list(shape)} array"
            )
        return np.ndarray(buffer=data, dtype=dtype, shape=tuple(shape))
    if _NG in obj:
        dtype = _dtype(obj.get(b"dtype"))
        try:
            return dtype.type(obj.get(b"data"))
        except (TypeError, ValueError, OverflowError):
            raise ProtocolException(f"openpi scalar: {obj.get(b'data')!r} is no {dtype}") from None
    return obj


class Packer:
    """A reusable packer (one per connection; not for concurrent use from several threads)."""

    def __init__(self) -> None:
        self._packer = _deps.msgpack().Packer(default=_default)

    def pack(self, value: Any) -> bytes:
        """``value`` as one openpi message (``bytes``)."""
        out: bytes = self._packer.pack(value)
        return out


def packb(value: Any) -> bytes:
    """Pack one value as openpi's client does (byte for byte).

    Raises:
        TypeError: a value the wire cannot carry.
        ValueError: an object, void or complex numpy value.
    """
    out: bytes = _deps.msgpack().packb(value, default=_default)
    return out


def unpackb(data: bytes | bytearray | memoryview) -> Any:
    """Read one openpi message.

    Raises:
        ProtocolException: the bytes are not a valid openpi message (truncated, bad
            msgpack, a malformed array map, a refused dtype, nesting too deep).
    """
    msgpack = _deps.msgpack()
    try:
        return msgpack.unpackb(data, object_hook=_hook)
    except ProtocolException:
        raise
    except Exception as exc:  # every msgpack failure on a peer's bytes is a protocol error
        raise ProtocolException(
            f"not a valid openpi message: {type(exc).__name__}: {exc}"
        ) from None
