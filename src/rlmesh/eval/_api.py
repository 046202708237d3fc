"""``rlmesh.session`` and ``rlmesh.run``: bind a model to an env (EVAL-1..5, DELTA-38..41, DESIGN).

``run`` is ``session()`` + ``Session.run()`` + ``close()``: one drive loop for every
path. Model dispatch (EVAL-3): ``RANDOM_SAMPLE`` -> a sampling session; a model
instance -> bound as is (never closed by us, DELTA-29); a ``ModelBase`` subclass
class -> instantiated once and closed with the session; a served handle (anything
else with a callable ``.session``) -> delegated; a bare predict callable or duck
policy -> wrapped in ``rlmesh.numpy.Model`` (seed 000 accepts callables).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._build import validate_edition
from ..client._model import RemoteModel, RemoteRoute
from ..models._base import ModelBase, check_device
from ..models._numpy import NumpyModel
from ..models._route import LocalRoute, RandomRoute
from ..models._sentinels import RANDOM_SAMPLE
from ..models._warn import user_stacklevel as _user_stacklevel
from ..view._config import normalize_view
from ._drive import Drive
from ._hooks import RunHooks
from ._options import RunOptions, SessionKeywords, SessionOptions
from ._results import RunResult
from ._session import Session, new_session
from ._targets import classify_target
from .distributed import WorkerPool, Workers, normalize_workers, run_distributed, run_grouped

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "MAX_EXECUTION_HORIZON",
    "check_served_horizon",
    "open_session",
    "run",
    "run_groups",
    "run_with",
    "served_session",
    "session",
]

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")

#: Upper bound on ``execution_horizon`` (DELTA-38).
MAX_EXECUTION_HORIZON = 1024


def _check_horizon(execution_horizon: Any, has_chunk: bool, who: str) -> int:
    if isinstance(execution_horizon, bool) or not isinstance(execution_horizon, int):
        raise TypeError(f"execution_horizon must be an int, got {type(execution_horizon).__name__}")
    if execution_horizon < 1:
        raise ValueError(f"execution_horizon must be >= 1, got {execution_horizon}")
    if execution_horizon > 1 and not has_chunk:
        warnings.warn(
            f"{who} defines no predict_chunk(); running un-chunked (execution_horizon="
            f"{execution_horizon} is ignored)",
            UserWarning,
            stacklevel=_user_stacklevel(),
        )
    if execution_horizon > MAX_EXECUTION_HORIZON:
        raise ValueError(
            f"execution_horizon must be <= {MAX_EXECUTION_HORIZON}, got {execution_horizon}"
        )
    return execution_horizon


def check_served_horizon(execution_horizon: Any) -> int:
    """A served model's ``execution_horizon``: an int >= 1 (its server replays the chunks)."""
    if (
        isinstance(execution_horizon, bool)
        or not isinstance(execution_horizon, int)
        or execution_horizon < 1
    ):
        raise ValueError(f"execution_horizon must be >= 1, got {execution_horizon!r}")
    return execution_horizon


def _check_edition(workflow_edition: str | None) -> str | None:
    return None if workflow_edition is None else validate_edition(workflow_edition)


def _make_session(
    model: ModelBase[Any, Any], env: Any, opts: SessionOptions, *, owns_model: bool
) -> Session[Any, Any]:
    """Bind a local model instance to an env target (lazy: nothing is opened here, EVAL-10)."""
    horizon = _check_horizon(opts.execution_horizon, model._corners.has_chunk, type(model).__name__)
    check_device(model)
    instruction = opts.instruction
    if instruction is not None and not isinstance(instruction, str):
        raise TypeError(f"instruction must be a str or None, got {type(instruction).__name__}")
    view_cfg = normalize_view(opts.view)  # VIEW-2
    edition = _check_edition(opts.workflow_edition)
    kind = classify_target(env)
    route = LocalRoute(
        model,
        instruction=instruction,
        trust_entrypoints=opts.trust_entrypoints,
        execution_horizon=horizon,
        prefetch_lead=opts.prefetch_lead,
    )
    return new_session(
        Drive(
            route,
            env,
            kind,
            close_env=opts.close_env,
            workflow_edition=edition,
            owned_model=model if owns_model else None,
            view=view_cfg,
        )
    )


def _random_session(env: Any, opts: SessionOptions) -> Session[Any, Any]:
    _check_horizon(opts.execution_horizon, False, "RANDOM_SAMPLE")
    view_cfg = normalize_view(opts.view)
    edition = _check_edition(opts.workflow_edition)
    kind = classify_target(env)
    return new_session(
        Drive(
            RandomRoute(),
            env,
            kind,
            close_env=opts.close_env,
            workflow_edition=edition,
            view=view_cfg,
        )
    )


@overload
def session(
    model: ModelBase[ObsT, ActT], env: Any, **keywords: Unpack[SessionKeywords]
) -> Session[ObsT, ActT]: ...
@overload
def session(
    model: Callable[[ObsT], ActT], env: Any, **keywords: Unpack[SessionKeywords]
) -> Session[ObsT, ActT]: ...
@overload
def session(model: object, env: Any, **keywords: Unpack[SessionKeywords]) -> Session[Any, Any]: ...
def session(
    model: Any,
    env: Any,
    *,
    instruction: str | None = None,
    close_env: bool = False,
    trust_entrypoints: bool | None = None,
    execution_horizon: int = 1,
    view: Any = None,
    workflow_edition: str | None = None,
) -> Session[Any, Any]:
    """Bind a model to an env and return a :class:`Session` to drive by hand or via ``run()``.

    ``model`` is a local ``Model`` (instance, subclass class, or a bare predict
    callable), a served handle, or :data:`rlmesh.RANDOM_SAMPLE`. ``env`` is a live
    env, an ``EnvFactory``, a remote-env handle, an object with an ``address``, an
    address string, or a Gymnasium id (a string that cannot be an address, made here
    with ``gymnasium.make`` and closed with the session). Nothing is opened until
    first use (EVAL-10).

    Raises:
        ValueError: ``execution_horizon`` outside ``1..1024``; a device on a host model;
            an env string that is neither an address nor a Gymnasium id
            (:class:`~rlmesh.errors.InvalidEnvTarget`).
        TypeError: ``model`` or ``env`` is of no accepted form.
    """
    return open_session(model, env, SessionOptions.of(locals()))


def open_session(model: Any, env: Any, opts: SessionOptions) -> Session[Any, Any]:
    """:func:`session` with its keywords as one value (EVAL-3's model dispatch)."""
    lead = opts.prefetch_lead
    if model is RANDOM_SAMPLE:
        if lead:
            raise ValueError(
                f"prefetch_lead={lead} drives the native runtime loop; RANDOM_SAMPLE runs no "
                "model forward to overlap -- pass prefetch_lead=0"
            )
        if opts.instruction is not None:
            warnings.warn(
                "RANDOM_SAMPLE ignores instruction=", UserWarning, stacklevel=_user_stacklevel()
            )
        return _random_session(env, opts)
    if isinstance(model, ModelBase):
        return _make_session(model, env, opts, owns_model=False)
    if isinstance(model, type) and issubclass(model, ModelBase):
        return _make_session(model(), env, opts, owns_model=True)
    served = getattr(model, "session", None)
    if (
        callable(served)
        and not isinstance(model, type)
        and not callable(getattr(model, "predict", None))
    ):
        if lead:
            raise ValueError(
                f"prefetch_lead={lead} drives the native runtime loop; a served model's "
                "forwards run on its server -- pass prefetch_lead=0"
            )
        session: Session[Any, Any] = served(env, **opts.keywords())
        return session
    if callable(model) or callable(getattr(model, "predict", None)):
        wrapped: NumpyModel[Any, Any] = NumpyModel(model)
        return _make_session(wrapped, env, opts, owns_model=isinstance(model, type))
    raise TypeError(
        "model must be a rlmesh Model (instance or subclass), a served model handle, "
        f"rlmesh.RANDOM_SAMPLE, or a predict callable; got {type(model).__name__}"
    )


def run(
    model: Any,
    env: Any,
    *,
    seeds: Sequence[int] | None = None,
    max_episodes: int | None = None,
    episodes: int | None = None,
    max_episode_steps: int | None = None,
    max_episode_seconds: float | None = None,
    hooks: RunHooks | None = None,
    instruction: str | None = None,
    close_env: bool = False,
    trust_entrypoints: bool | None = None,
    execution_horizon: int = 1,
    view: Any = None,
    workflow_edition: str | None = None,
    trial_index_base: int = 0,
    prefetch_lead: int = 0,
    workers: int | Workers | WorkerPool | None = None,
    journal: str | os.PathLike[str] | None = None,
    progress: bool | None = None,
    episode_timeout_seconds: float | None = None,
) -> RunResult:
    """Drive ``model`` against ``env`` to completion and return a :class:`RunResult` (EVAL-1).

    The auto-pump convenience over :func:`session`: creates the session, calls
    :meth:`Session.run` and always closes the session (honouring ``close_env``).
    ``max_episodes`` (or its 0.1.0 spelling ``episodes``), ``seeds``, the caps,
    ``hooks`` and ``trial_index_base`` pass through to ``Session.run``.

    ``prefetch_lead`` (DELTA-40) overlaps a chunked local model's next forward with
    the env steps that replay the current chunk: the next chunk is predicted in the
    background while at most ``prefetch_lead`` replay frames remain, so the
    observation it sees may be up to that many steps stale; a chunk prefetched
    across an episode boundary is thrown away. Single-env runs only.

    ``workers`` (``None``: this process, the single loop) spreads the episodes over
    worker processes or Ray actors: an int or :class:`rlmesh.Workers`; ``journal`` (a
    file path, with ``workers``) records every finished episode and lets a re-run skip
    them; ``episode_timeout_seconds`` (with ``workers``) stops the worker of an episode
    that runs longer (retried or recorded as timed out: ``Workers(on_episode_timeout=)``).
    See docs/distributed.md.

    ``progress`` draws one live line on stderr (episodes done, steps/s, ETA, success
    rate with its 95 % interval): ``None`` (default) when stderr is a terminal or in
    Jupyter, once the run has gone on for 1.5 s (a quicker run prints nothing);
    ``True`` always; ``False`` never. It costs the run nothing per step. With
    ``workers=``, ``progress=True``/``False`` decides over ``Workers(progress=...)``,
    which applies only when ``progress`` is ``None``. See docs/evaluation.md.
    """
    return run_with(model, env, RunOptions.of(locals()))


def run_groups(
    groups: Sequence[tuple[Any, Any, Sequence[int]]],
    options: RunOptions,
    names: Sequence[str] | None = None,
) -> list[RunResult]:
    """Several ``(model, env, seeds)`` runs as one distributed run over ``options.workers``,
    with task affinity (a suite's tasks; see :func:`~.distributed.run.run_grouped`)."""
    cfg = normalize_workers(options.workers)
    if cfg is None:
        raise ValueError("run_groups spreads the groups over workers: pass workers=")
    return run_grouped(open_session, groups, cfg, options, names)


def run_with(model: Any, env: Any, options: RunOptions) -> RunResult:
    """:func:`run` with its keywords as one value: this process, or ``options.workers``."""
    cfg = normalize_workers(options.workers)
    if cfg is not None:
        return run_distributed(open_session, model, env, cfg, options)
    if options.journal is not None:
        raise ValueError(
            "journal= records the episodes of a distributed run; pass workers=1 (or more) with it"
        )
    if options.episode_timeout_seconds is not None:
        raise ValueError(
            "episode_timeout_seconds= is a distributed run's deadline (its driver stops the worker "
            "of an episode that runs longer); pass workers=1 (or more) with it, or "
            "max_episode_seconds= to truncate episodes in this process"
        )
    sess = open_session(model, env, options.session)
    try:
        result = sess.run(**options.episode_keywords())
    except BaseException:
        try:
            sess.close()
        except Exception:
            pass
        raise
    sess.close()
    return result


def served_session(
    model: RemoteModel,
    env: Any,
    *,
    instruction: str | None = None,
    close_env: bool = False,
    trust_entrypoints: bool | None = None,
    execution_horizon: int = 1,
    view: Any = None,
    workflow_edition: str | None = None,
) -> Session[Any, Any]:
    """:meth:`RemoteModel.session`: bind a served model to ``env`` (MOD-31, CNF2-A5/A6)."""
    # MOD-31 / CNF2-A5: both refusals come before the env argument is looked at.
    if instruction is not None:
        raise ValueError(
            "instruction= is not supported for a served model: it resolves its own adapter "
            "and the env's own instruction is used -- drop instruction="
        )
    if trust_entrypoints is not None:
        raise ValueError(
            "trust_entrypoints= applies to local models; a served model owns its adapter "
            "(the server decides what it imports) -- drop trust_entrypoints="
        )
    kind = classify_target(env, served=True)  # CNF2-A6: a bad env names env_contract
    check_served_horizon(execution_horizon)
    view_cfg = normalize_view(view)
    route = RemoteRoute(
        model, execution_horizon=execution_horizon, workflow_edition=workflow_edition
    )
    return new_session(
        Drive(
            route, env, kind, close_env=close_env, workflow_edition=workflow_edition, view=view_cfg
        )
    )
