"""Env authoring: ``EnvFactory``, construction params, variant catalogs and describe.

``describe``/``describe_json`` are loaded lazily (AUTH-12): importing this
package does not import the describe machinery.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _params
from ._canonical import (
    DESCRIBE_METADATA_KEY as DESCRIBE_METADATA_KEY,
    DESCRIBE_SCHEMA_VERSION as DESCRIBE_SCHEMA_VERSION,
)
from ._factory import (
    ENV_BRANCH_METADATA_KEY as ENV_BRANCH_METADATA_KEY,
    ENV_RESET_OPTIONS_KEY as ENV_RESET_OPTIONS_KEY,
    EnvFactory as EnvFactory,
    build_env as build_env,
)
from ._params import *  # noqa: F403  (the seven names of rlmesh.params, its __all__)
from ._resolve import (
    binding_metadata as binding_metadata,
    resolve_params as resolve_params,
)
from ._variants import Variant as Variant

if TYPE_CHECKING:
    from ._describe import describe as describe, describe_json as describe_json

__all__ = [
    "DESCRIBE_METADATA_KEY",
    "DESCRIBE_SCHEMA_VERSION",
    "ENV_BRANCH_METADATA_KEY",
    "ENV_RESET_OPTIONS_KEY",
    "EnvFactory",
    "Variant",
    "binding_metadata",
    "build_env",
    "describe",
    "describe_json",
    "resolve_params",
    *_params.__all__,
]

_LAZY = ("describe", "describe_json")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import _describe

        return getattr(_describe, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
