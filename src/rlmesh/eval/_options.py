"""The keywords of ``rlmesh.run`` / ``rlmesh.session`` as one value each.

The public signatures keep their keywords (the seeds' spelling: ``rlmesh.run(model, env,
seeds=..., max_episode_steps=...)``). Each entry point turns them into one frozen value,
the way httpx carries ``Timeout`` and ``Limits`` objects, and everything below it -- the
dispatch to a route, the single drive loop, a distributed run and the job its workers
receive -- takes that value instead of the keywords again:

- :class:`SessionOptions`: how a model is bound to an env (``rlmesh.session``'s keywords,
  plus ``prefetch_lead``);
- :class:`RunOptions`: what a run does (seeds, caps, hooks, trial indices, workers,
  journal, progress) and its :class:`SessionOptions`.

Values are checked where they are used (a bad ``execution_horizon`` is refused by the
route that runs it), except ``prefetch_lead``, checked here, before anything is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypedDict

__all__ = ["RunOptions", "SessionKeywords", "SessionOptions"]


class SessionKeywords(TypedDict, total=False):
    """``rlmesh.session``'s keywords, for the overloads that type it."""

    instruction: str | None
    close_env: bool
    trust_entrypoints: bool | None
    execution_horizon: int
    view: Any
    workflow_edition: str | None


@dataclass(frozen=True)
class SessionOptions:
    """How a model is bound to an env (see ``rlmesh.session`` for each field).

    Example:
        >>> SessionOptions(execution_horizon=4).keywords()["execution_horizon"]
        4
    """

    instruction: str | None = None
    close_env: bool = False
    trust_entrypoints: bool | None = None
    execution_horizon: int = 1
    view: Any = None
    workflow_edition: str | None = None
    #: Overlap a chunked local model's next forward with the replay (DELTA-40).
    prefetch_lead: int = 0

    def __post_init__(self) -> None:
        lead = self.prefetch_lead
        if isinstance(lead, bool) or not isinstance(lead, int) or lead < 0:
            raise ValueError(f"prefetch_lead must be an int >= 0, got {lead!r}")

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> SessionOptions:
        """The options among an entry point's ``locals()``: its keywords, as given.

        >>> SessionOptions.of({"model": None, "close_env": True}).close_env
        True
        """
        return cls(**{f.name: given[f.name] for f in fields(cls) if f.name in given})

    def keywords(self) -> dict[str, Any]:
        """The ``session()`` keywords (what a served model's own ``session`` takes)."""
        return {name: getattr(self, name) for name in SessionKeywords.__annotations__}


@dataclass(frozen=True)
class RunOptions:
    """Everything ``rlmesh.run`` takes besides the model and the env (see ``rlmesh.run``).

    Example:
        >>> opts = RunOptions(seeds=[1, 2], session=SessionOptions(close_env=True))
        >>> opts.episode_keywords()["seeds"], opts.session.close_env
        ([1, 2], True)
    """

    seeds: Sequence[int] | None = None
    max_episodes: int | None = None
    episodes: int | None = None
    max_episode_steps: int | None = None
    max_episode_seconds: float | None = None
    hooks: Any = None
    trial_index_base: int = 0
    #: ``None`` (this process), an int, ``rlmesh.Workers`` or a started ``WorkerPool``.
    workers: Any = None
    #: A journal file for a distributed run (``workers=``).
    journal: Any = None
    #: The live progress line: ``None`` on a terminal (after 1.5 s), ``True`` always, ``False`` never.
    progress: bool | None = None
    session: SessionOptions = field(default_factory=SessionOptions)
    #: A distributed run's per-episode wall-clock deadline (``workers=``; the driver stops the worker).
    episode_timeout_seconds: float | None = None

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> RunOptions:
        """The options among ``rlmesh.run``'s ``locals()``: its keywords, as given (the
        session's among them make :attr:`session`).

        >>> RunOptions.of({"seeds": [3], "close_env": True}).session.close_env
        True
        """
        own = {
            f.name: given[f.name] for f in fields(cls) if f.name in given and f.name != "session"
        }
        return cls(session=SessionOptions.of(given), **own)

    def episode_keywords(self) -> dict[str, Any]:
        """The ``Session.run`` keywords (every field but ``workers``, ``journal``, ``session`` and
        ``episode_timeout_seconds``, which belong to a distributed run's driver)."""
        skip = ("workers", "journal", "session", "episode_timeout_seconds")
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
