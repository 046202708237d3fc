"""rlmesh: serve Gymnasium-shaped environments over sockets and evaluate models against them.

The top-level package only re-exports; the code lives in the subpackages. Client and
model classes here use dependency-free ``rlmesh.Tensor`` values; ``rlmesh.numpy`` has
the NumPy flavour of each.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from . import (
    adapters as adapters,
    authoring as authoring,
    errors as errors,
    params as params,
    spaces as spaces,
    specs as specs,
    types as types,
)
from ._build import (
    VERSION as __version__,  # the one version literal
    BuildInfo as BuildInfo,
    build_info as build_info,
    current_workflow_edition as current_workflow_edition,
)
from ._metadata import sanitize_metadata as sanitize_metadata
from .adapters import Reader as Reader
from .authoring import (
    DESCRIBE_METADATA_KEY as DESCRIBE_METADATA_KEY,
    DESCRIBE_SCHEMA_VERSION as DESCRIBE_SCHEMA_VERSION,
    ENV_RESET_OPTIONS_KEY as ENV_RESET_OPTIONS_KEY,
    EnvFactory as EnvFactory,
    Param as Param,
    ParamSpec as ParamSpec,
    Variant as Variant,
    Vector as Vector,
)
from .client import (
    RemoteEnv as RemoteEnv,
    RemoteModel as RemoteModel,
    RemoteVectorEnv as RemoteVectorEnv,
)
from .errors import (
    EnvironmentException as EnvironmentException,
    ProtocolException as ProtocolException,
    RLMeshException as RLMeshException,
    WorkflowEditionWarning as WorkflowEditionWarning,
)
from .eval import (
    NO_ADAPTER as NO_ADAPTER,
    RANDOM_SAMPLE as RANDOM_SAMPLE,
    EpisodeResult as EpisodeResult,
    RunContext as RunContext,
    RunHooks as RunHooks,
    RunResult as RunResult,
    Session as Session,
    StepEvent as StepEvent,
    TelemetryRow as TelemetryRow,
    View as View,
    WorkerPool as WorkerPool,
    Workers as Workers,
    predict_seed as predict_seed,
    run as run,
    session as session,
    trial_index as trial_index,
)
from .models import Model as Model
from .recorder import Recorder as Recorder
from .sandbox import (
    SandboxBuild as SandboxBuild,
    SandboxEnv as SandboxEnv,
    SandboxModel as SandboxModel,
    SandboxRuntime as SandboxRuntime,
    SandboxVectorEnv as SandboxVectorEnv,
)
from .serve import EnvServer as EnvServer, ServeOptions as ServeOptions
from .tensor import Tensor as Tensor

if TYPE_CHECKING:
    from .authoring._describe import describe as describe, describe_json as describe_json

__all__ = [
    "DESCRIBE_METADATA_KEY",
    "DESCRIBE_SCHEMA_VERSION",
    "ENV_RESET_OPTIONS_KEY",
    "NO_ADAPTER",
    "RANDOM_SAMPLE",
    "BuildInfo",
    "EnvFactory",
    "EnvServer",
    "EnvironmentException",
    "EpisodeResult",
    "Model",
    "Param",
    "ParamSpec",
    "ProtocolException",
    "RLMeshException",
    "Reader",
    "Recorder",
    "RemoteEnv",
    "RemoteModel",
    "RemoteVectorEnv",
    "RunContext",
    "RunHooks",
    "RunResult",
    "SandboxBuild",
    "SandboxEnv",
    "SandboxModel",
    "SandboxRuntime",
    "SandboxVectorEnv",
    "ServeOptions",
    "Session",
    "StepEvent",
    "TelemetryRow",
    "Tensor",
    "Variant",
    "Vector",
    "View",
    "WorkerPool",
    "Workers",
    "WorkflowEditionWarning",
    "__build__",
    "__version__",
    "adapters",
    "build_info",
    "current_workflow_edition",
    "describe",
    "describe_json",
    "params",
    "predict_seed",
    "run",
    "sanitize_metadata",
    "session",
    "spaces",
    "specs",
    "trial_index",
    "types",
]

_LAZY = ("describe", "describe_json", "__build__")


def __getattr__(name: str) -> Any:
    if name in (
        "numpy",
        "torch",
        "jax",
        "gymnasium",
        "hooks",
    ):  # load on first use: `rlmesh.numpy.RemoteEnv`
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name in ("describe", "describe_json"):
        return getattr(authoring, name)  # authoring loads its describe machinery lazily (AUTH-12)
    if name == "__build__":  # DELTA-2: deprecated, computed lazily
        warnings.warn(
            "rlmesh.__build__ is deprecated and will be removed in 0.2; use rlmesh.build_info().workflow_edition",
            DeprecationWarning,
            stacklevel=2,
        )
        return build_info().workflow_edition
    raise AttributeError(f"module 'rlmesh' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
