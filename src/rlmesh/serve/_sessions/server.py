"""Opening a multi-session endpoint: the checks, the bound listener and the supervisor.

``EnvServer(target, sessions=N)`` (and ``EnvServer.for_sessions(spec, ...)``, behind
``serve_env(..., sessions=N)``, ``rlmesh serve --sessions N`` and a sandbox's bootstrap)
comes here: the target must be something each worker can build an env from and that can
travel to the workers, the declared workflow edition is resolved once (one warning, not one
per worker), and a :class:`~.supervisor.SessionSupervisor` takes the bound listener.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..._argcheck import check_count
from ..._build import resolve_declared_edition
from ..._spawn.pickling import dumps
from ..._spawn.recipe import is_env_factory, is_live_env
from .._options import ServeOptions
from .control import SessionSpec

__all__ = ["check_session_spec", "check_sessions"]


def check_sessions(sessions: Any, prewarm: Any = 0) -> tuple[int, int]:
    """Validate ``sessions`` / ``prewarm``: ``(sessions, prewarm)`` or ``ValueError``/``TypeError``."""
    check_count("sessions", sessions, 1)
    check_count("prewarm", prewarm, 0)
    if prewarm > sessions:
        raise ValueError(
            f"prewarm={prewarm} exceeds sessions={sessions}: at most sessions env instances exist at once"
        )
    return sessions, prewarm


def check_target(source: Any, sessions: int) -> None:
    """Each worker builds its own env: a live env (or a list of them) cannot be copied into N
    processes, and the source must travel to them (what a script defines travels by value)."""
    if not is_env_factory(source) and is_live_env(source):
        what = (
            "a list of env instances"
            if isinstance(source, (list, tuple))
            else f"a live {type(source).__name__} instance"
        )
        raise TypeError(
            f"sessions={sessions} builds one env per session, so it needs something to build envs from; got "
            f"{what}, which cannot be copied. Pass a Gymnasium id ('CartPole-v1'), 'module:attr', an EnvFactory, "
            "an object with make(), or an env class / make callable instead (e.g. EnvServer('CartPole-v1', "
            "sessions=4)), or serve this instance with sessions=1"
        )
    if (
        not isinstance(source, str)
        and not callable(source)
        and not callable(getattr(source, "make", None))
    ):
        raise TypeError(
            f"sessions={sessions} needs a Gymnasium id, 'module:attr', an EnvFactory, an object with make(), "
            f"or an env class / make callable; got {type(source).__name__}"
        )
    dumps(
        source,
        "env source",
        who=f"sessions={sessions}",
        remedy="Pass a Gymnasium id, 'module:attr', or a class / function instead.",
    )


def check_session_spec(spec: SessionSpec, sessions: int) -> SessionSpec:
    """The checked spec, with the declared edition resolved here (so no worker warns again)."""
    if not isinstance(spec.options, ServeOptions):
        raise TypeError(f"options must be a ServeOptions, got {type(spec.options).__name__}")
    check_target(spec.recipe.source, sessions)
    options = spec.options
    declared = resolve_declared_edition(
        served=options.workflow_edition, warn=True, who="this EnvServer"
    )
    if declared == options.workflow_edition or not declared:
        return spec
    resolved = options.replace(workflow_edition=declared)  # every other option kept
    return dataclasses.replace(spec, options=resolved)
