"""``rlmesh.sanitize_metadata``: make any info/metadata mapping travel (MET-2)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from .spaces._peers import scalar_base

__all__ = ["sanitize_metadata"]

_PLAIN = (type(None), bool, int, float, str, bytes)


def sanitize_metadata(info: Mapping[str, Any]) -> dict[str, Any]:
    """Coerce an info/metadata mapping into what RLMesh metadata accepts.

    Lossy by design: simulator handles and other rich objects become their
    ``str()`` form rather than failing the serve path. Accepted values pass
    through unchanged: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``
    and nested mappings/lists/tuples of them (tuples become lists). NumPy
    scalars/arrays and namedtuples are unwrapped the way the codec does
    (``_asdict`` / ``tolist`` / ``item``), enums resolve to their value with a
    name fallback, and non-string keys are stringified.

    Args:
        info: The mapping to sanitize (e.g. a Gymnasium info dict).

    Returns:
        A plain dict the metadata codec accepts verbatim.

    Raises:
        TypeError: ``info`` is not a mapping.
        ValueError: ``info`` contains a reference cycle (the message names the key path).

    >>> import numpy as np
    >>> sanitize_metadata({"pose": object.__new__(object), 1: np.float32(0.5), "t": (1, 2)})["1"]
    0.5
    """
    if not isinstance(info, Mapping):
        raise TypeError(f"sanitize_metadata expects a mapping, got {type(info).__name__}")
    return _mapping(info, "", set())


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _mapping(m: Mapping[Any, Any], path: str, active: set[int]) -> dict[str, Any]:
    if id(m) in active:
        raise ValueError(f"metadata contains a reference cycle at {path or '<root>'}")
    active.add(id(m))
    try:
        return {
            str(k) if not isinstance(k, str) else k: _value(v, _join(path, str(k)), active)
            for k, v in m.items()
        }
    finally:
        active.discard(id(m))


def _sequence(items: Any, path: str, active: set[int], container: Any) -> list[Any]:
    if id(container) in active:
        raise ValueError(f"metadata contains a reference cycle at {path or '<root>'}")
    active.add(id(container))
    try:
        return [_value(v, _join(path, f"[{i}]"), active) for i, v in enumerate(items)]
    finally:
        active.discard(id(container))


def _value(v: Any, path: str, active: set[int]) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, enum.Enum):
        inner = v.value
        if isinstance(inner, _PLAIN) and not isinstance(inner, enum.Enum):
            return _value(inner, path, active)
        return v.name
    base = scalar_base(v)  # bool and None were above
    if base is not None:
        return v if type(v) is base else base(v)
    if isinstance(v, Mapping):
        return _mapping(v, path, active)
    if isinstance(v, tuple) and hasattr(v, "_asdict"):
        return _mapping(v._asdict(), path, active)
    if isinstance(v, (list, tuple)):
        return _sequence(v, path, active, v)
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    tolist = getattr(v, "tolist", None)
    if callable(tolist):
        try:
            out = tolist()
        except Exception:
            return str(v)
        return _value(out, path, active) if not isinstance(out, type(v)) else str(v)
    item = getattr(v, "item", None)
    if callable(item):
        try:
            return _value(item(), path, active)
        except Exception:
            return str(v)
    return str(v)
