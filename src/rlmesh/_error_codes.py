"""The wire's error codes (ERR-1): the table every ``Error`` frame's ``code`` is read against.

Re-exported by :mod:`rlmesh.errors`, whose exceptions carry these names.
"""

from __future__ import annotations

__all__ = ["CODE_NAMES", "CODE_NUMBERS", "DEFAULT_RECOVERABLE"]

#: Env error codes and their wire numbers (ERR-1). Readers use the explicit
#: ``recoverable`` flag, never the number band.
CODE_NUMBERS: dict[str, int] = {
    "UNSPECIFIED": 0,
    "TIMEOUT": 1,
    "INVALID_ACTION": 2,
    "NOT_READY": 3,
    "BUSY": 4,
    "UNSUPPORTED": 5,
    "INTERNAL": 10,
    "CRASHED": 11,
    "CANCELLED": 12,
    "CLOSED": 13,
    "PROTOCOL": 14,
}
CODE_NAMES: dict[int, str] = {v: k for k, v in CODE_NUMBERS.items()}

#: Codes that are recoverable when nothing says otherwise (ERR-1).
DEFAULT_RECOVERABLE = frozenset({"TIMEOUT", "INVALID_ACTION", "NOT_READY", "BUSY", "UNSUPPORTED"})
