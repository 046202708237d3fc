"""The ``runtime`` section of a describe envelope (AUTH-19, DELTA-53).

Everything here comes from the interpreter, ``platform`` and installed
distribution metadata: no framework is imported, and nothing raises.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata as importlib_metadata
from typing import Any

from .._build import PROTOCOL_GENERATION, SUPPORTED_EDITIONS, VERSION, resolve_declared_edition

__all__ = ["runtime_section"]

_FRAMEWORKS = ("numpy", "torch", "jax", "jaxlib", "gymnasium")
_OS_NAMES = {"darwin": "macos", "win32": "windows", "cygwin": "windows"}


def _dist_version(name: str) -> str | None:
    try:
        return importlib_metadata.version(name)
    except Exception:
        return None


def _os_name() -> str:
    if sys.platform.startswith("linux"):
        return "linux"
    return _OS_NAMES.get(sys.platform, platform.system().lower() or sys.platform)


def runtime_section(*, declared: str | None = None, class_edition: Any = None) -> dict[str, Any]:
    """Describe the producing runtime (AUTH-19) plus the edition keys of DELTA-53.

    Args:
        declared: A declaration the caller already resolved (a server's);
            ``""`` means none. ``None`` resolves it here from ``class_edition``
            and the environment/pyproject rungs (DELTA-7).
        class_edition: The target class's ``workflow_edition`` attribute.
    """
    out: dict[str, Any] = {
        "component": "rlmesh-python",
        "language": "python",
        "language_version": platform.python_version(),
        "package_version": _dist_version("rlmesh") or VERSION,
        "os": _os_name(),
        "os_version": platform.release(),
        "arch": platform.machine().lower(),
        "framework_versions": {
            name: version for name in _FRAMEWORKS if (version := _dist_version(name)) is not None
        },
        "protocol_generation": PROTOCOL_GENERATION,
        "supported_workflow_editions": list(SUPPORTED_EDITIONS),
    }
    preferred: str | None = None
    if declared is not None:
        preferred = declared.strip() or None
    else:
        try:
            if class_edition is not None and not isinstance(class_edition, str):
                raise ValueError(f"workflow_edition must be a str, got {class_edition!r}")
            preferred = resolve_declared_edition(class_attr=class_edition)
        except (ValueError, TypeError) as exc:
            out["workflow_edition_error"] = str(exc)
    out["preferred_workflow_edition"] = preferred or SUPPORTED_EDITIONS[0]
    return out
