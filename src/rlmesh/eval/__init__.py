"""Evaluation: bind a model to an env and drive episodes (EVAL, DELTA-39..51).

``run`` pumps whole episodes and returns a :class:`RunResult`; ``session``
returns a :class:`Session` you drive by hand with ``reset`` / ``predict`` /
``step``. ``workers=`` spreads a run over worker processes or Ray actors
(:mod:`rlmesh.eval.distributed`). The ``rlmesh eval`` command is :mod:`rlmesh._cli.eval`.
"""

from ..errors import WorkerLost as WorkerLost
from ..models._context import PredictContext as PredictContext, predict_seed as predict_seed
from ..models._sentinels import NO_ADAPTER as NO_ADAPTER, RANDOM_SAMPLE as RANDOM_SAMPLE
from ..view._config import View as View
from ._api import run as run, session as session
from ._hooks import RunContext as RunContext, RunHooks as RunHooks, StepEvent as StepEvent
from ._results import (
    EpisodeResult as EpisodeResult,
    EpisodeRetry as EpisodeRetry,
    RunResult as RunResult,
    TelemetryRow as TelemetryRow,
    WorkerTiming as WorkerTiming,
)
from ._session import Session as Session
from ._trial import ENV_RESET_OPTIONS_KEY as ENV_RESET_OPTIONS_KEY, trial_index as trial_index
from .distributed import WorkerPool as WorkerPool, Workers as Workers

__all__ = [
    "ENV_RESET_OPTIONS_KEY",
    "EpisodeRetry",
    "NO_ADAPTER",
    "RANDOM_SAMPLE",
    "EpisodeResult",
    "PredictContext",
    "RunContext",
    "RunHooks",
    "RunResult",
    "Session",
    "StepEvent",
    "TelemetryRow",
    "View",
    "WorkerLost",
    "WorkerPool",
    "WorkerTiming",
    "Workers",
    "predict_seed",
    "run",
    "session",
    "trial_index",
]
