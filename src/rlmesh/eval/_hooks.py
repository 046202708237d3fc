"""Observer hooks of the drive loop: ``RunHooks``, ``StepEvent``, ``RunContext`` (EVAL-26, EVAL-43/44, DELTA-45)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._results import EpisodeResult, RunResult

__all__ = ["RunContext", "RunHooks", "StepEvent"]


class RunContext(Protocol):
    """What :meth:`RunHooks.on_run_start` receives: the bound run (DELTA-45).

    On the session loop the :class:`~rlmesh.Session` itself is the context.
    """

    @property
    def contract(self) -> Any:
        """The env's contract (metadata, spaces, ``num_envs``)."""

    @property
    def num_envs(self) -> int:
        """Lanes driven (1 for a single env)."""

    def read(self, observation: object, item: object) -> Any:
        """One-shot role read of one observation (see ``Session.read``)."""

    def frame_sources(self) -> tuple[str, ...]:
        """Viewer source labels: a ``render`` source when reachable, then image roles."""


@dataclass(frozen=True)
class StepEvent:
    """One env step of a ``Session.run()`` eval, passed to :meth:`RunHooks.on_step` (EVAL-43).

    Attributes:
        episode: 0-based episode index (equals ``EpisodeResult.index``).
        seed: The episode's reset seed, or ``None``.
        step: 0-based step index within the episode.
        observation: The raw observation the action was predicted from (pre-step).
        action: The env-ready action applied to the env.
        reward: The step's reward.
        terminated: Whether the env reported a terminal state on this step.
        truncated: Whether this step truncated the episode (a step that hits
            ``max_episode_steps`` is reported truncated, DELTA-46).
        info: The step's info mapping.
        predict_ms: Raw wall time of this step's predict in ms (~0 on chunk-replay steps).
        step_ms: Raw wall time of the env step round trip in ms.
        read: Lazy role reader bound to ``observation``: ``event.read(item)``
            delegates to ``Session.read`` and resolves nothing unless called.
    """

    episode: int
    seed: int | None
    step: int
    observation: Any
    action: Any
    reward: float
    terminated: bool
    truncated: bool
    info: Mapping[str, Any]
    predict_ms: float
    step_ms: float
    read: Callable[[object], object]


class RunHooks:
    """Observer callbacks for ``Session.run()``; every default is a no-op (EVAL-44).

    Subclass and override any subset, then pass an instance as ``hooks=`` to
    ``rlmesh.run``, ``Model.run`` or ``Session.run``. Hook exceptions propagate
    and abort the run; :meth:`on_run_end` still fires exactly once with the
    completed episodes.

    >>> class Count(RunHooks):
    ...     steps = 0
    ...     def on_step(self, event):
    ...         self.steps += 1
    """

    def on_run_start(self, context: RunContext) -> None:
        """Called once after the env connects, before the first reset (no-op by default)."""

    def on_episode_start(self, *, episode: int, seed: int | None) -> None:
        """Called after each episode's reset returns (no-op by default).

        Args:
            episode: 0-based episode index (equals ``EpisodeResult.index``).
            seed: The seed the episode was reset with, or ``None``.
        """

    def on_step(self, event: StepEvent) -> None:
        """Called after each env step with its :class:`StepEvent` (no-op by default)."""

    def on_episode_end(self, result: EpisodeResult) -> None:
        """Called with each completed episode's result (no-op by default)."""

    def on_run_end(self, result: RunResult) -> None:
        """Called exactly once when the run ends, even on an exception or interrupt (no-op by default)."""
