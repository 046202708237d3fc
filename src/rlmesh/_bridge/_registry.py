"""The registry: the four built-in bridges and the names that select them (BKD-30)."""

from __future__ import annotations

from ._base import BUILTINS, Bridge, _NumpyBridge, _PlainBridge
from ._jax import _JaxBridge
from ._torch import _TorchBridge

__all__ = ["JAX", "NUMPY", "PLAIN", "TORCH", "resolve_bridge"]

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
BUILTINS.update((b.name, b) for b in (PLAIN, NUMPY, TORCH, JAX))  # they unpickle to themselves


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
