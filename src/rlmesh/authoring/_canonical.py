"""The canonical ``rlmesh.describe.v1`` serialization (AUTH-20, AUTH-21, DELTA-53).

This is a cross-language byte contract, so it is spelled out here rather than
left to ``json.dumps``:

* the top-level keys come in a FIXED order per kind (below); absent optional
  keys are omitted, but ``env_spec``/``env_tags`` (env) and ``model_spec``
  (model) are always present (``null`` when missing);
* every NESTED object has its keys sorted by code point;
* separators are compact (no spaces) and non-ASCII is written raw (UTF-8);
* floats use the shortest round-trip form in serde_json/ryu style (``1e-7``,
  ``1e21``, ``100.0``, ``0.00001``); non-finite floats are written ``null``.

msgspec's JSON encoder produces exactly that number and string formatting and
sorts keys with ``order="sorted"``, so each top-level value is encoded with it
and the envelope is stitched in the fixed order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from .. import _keys

__all__ = [
    "DESCRIBE_METADATA_KEY",
    "DESCRIBE_SCHEMA_VERSION",
    "ENV_KEYS",
    "MODEL_KEYS",
    "build_envelope",
    "json_value",
    "validate_generated_at",
]

DESCRIBE_SCHEMA_VERSION = 1
DESCRIBE_METADATA_KEY = _keys.DESCRIBE_METADATA_KEY

#: Top-level key order (AUTH-20 as amended by DELTA-53).
ENV_KEYS = (
    "schema_version",
    "kind",
    "generated_at",
    "target",
    "env_spec",
    "env_tags",
    "env_contracts",
    "params",
    "variants",
    "runtime",
)
MODEL_KEYS = (
    "schema_version",
    "kind",
    "generated_at",
    "target",
    "model_spec",
    "corners",
    "native_chunk",
    "params",
    "variants",
    "runtime",
)
_ALWAYS = {"env": ("env_spec", "env_tags"), "model": ("model_spec",)}
_PIECES_MAX_BYTES = 4 * 1024 * 1024  # AUTH-21

# YYYY-MM-DDThh:mm:ss[.fraction](Z|±hh:mm), uppercase T, 20..64 chars (AUTH-21).
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-](\d{2}):(\d{2}))",
    re.ASCII,
)
_ENCODER = msgspec.json.Encoder(order="sorted")


def validate_generated_at(value: str) -> str:
    """Check an RFC-3339 timestamp such as ``2026-06-01T12:00:00Z`` (AUTH-21).

    Raises:
        ValueError: the value is not an RFC-3339 date-time with an uppercase
            ``T`` and a ``Z`` or ``±hh:mm`` offset, 20 to 64 characters long.

    >>> validate_generated_at("2026-06-01T12:00:00.5+02:00")
    '2026-06-01T12:00:00.5+02:00'
    """
    if not isinstance(value, str):
        raise ValueError(
            f"generated_at must be an RFC-3339 string, got {type(value).__name__} {value!r}"
        )
    m = _RFC3339.fullmatch(value)
    ok = m is not None and 20 <= len(value) <= 64
    if m is not None and ok:
        year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        days = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
        ok = 1 <= month <= 12 and 1 <= day <= days[month - 1] and hour <= 23 and minute <= 59
        ok = ok and second <= 60  # 60: leap second
        if m.group(9) is not None:
            ok = ok and int(m.group(9)) <= 23 and int(m.group(10)) <= 59
    if not ok:
        raise ValueError(
            f"generated_at must be an RFC-3339 timestamp like '2026-06-01T12:00:00Z' "
            f"(YYYY-MM-DDThh:mm:ss[.frac] then Z or ±hh:mm, uppercase T), got {value!r}; "
            "omit it for a content-addressable artifact"
        )
    return value


def json_value(value: Any) -> Any:
    """Make a gathered value JSON-ready: containers recursed, keys stringified, others ``repr``'d."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value  # non-finite floats encode as null (DELTA-53)
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype"):  # numpy scalars
        try:
            return json_value(value.item())
        except Exception:
            pass
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # numpy arrays
        try:
            return json_value(value.tolist())
        except Exception:
            pass
    return repr(value)


def build_envelope(kind: str, pieces: Mapping[str, Any], generated_at: str | None = None) -> str:
    """Validate the gathered pieces and return the canonical JSON string (AUTH-20/21).

    Args:
        kind: ``"env"`` or ``"model"``.
        pieces: Any of ``target, env_spec, env_tags, env_contracts, model_spec,
            corners, native_chunk, params, variants, runtime``.
        generated_at: Optional RFC-3339 timestamp.

    Raises:
        ValueError: unknown kind, a piece not allowed for the kind, an invalid
            timestamp, or pieces larger than 4 MiB.
    """
    if kind not in _ALWAYS:
        raise ValueError(f"describe kind must be 'env' or 'model', got {kind!r}")
    order = ENV_KEYS if kind == "env" else MODEL_KEYS
    allowed = set(order) - {"schema_version", "kind", "generated_at"}
    bad = sorted(set(pieces) - allowed)
    if bad:
        raise ValueError(
            f"describe pieces for kind={kind!r} may only contain {sorted(allowed)}; got {bad}"
        )
    if generated_at is not None:
        validate_generated_at(generated_at)
    encoded: dict[str, bytes] = {k: _ENCODER.encode(json_value(v)) for k, v in pieces.items()}
    size = sum(len(b) for b in encoded.values())
    if size > _PIECES_MAX_BYTES:
        raise ValueError(
            f"describe pieces are {size} bytes of JSON; the limit is {_PIECES_MAX_BYTES} (4 MiB)"
        )
    head = {"schema_version": b"1", "kind": _ENCODER.encode(kind)}
    if generated_at is not None:
        head["generated_at"] = _ENCODER.encode(generated_at)
    parts: list[bytes] = []
    for key in order:
        if key in head:
            raw = head[key]
        elif key in encoded:
            raw = encoded[key]
        elif key in _ALWAYS[kind]:
            raw = b"null"
        else:
            continue
        parts.append(_ENCODER.encode(key) + b":" + raw)
    return (b"{" + b",".join(parts) + b"}").decode("utf-8")
