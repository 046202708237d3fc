"""Observers of the drive: one list fanning out to the user's ``RunHooks``, the viewer and the rest.

The drive loops (``_loop``, ``_vector``) and a session's manual steps talk to an
:class:`ObserverList` only -- the shape of Stable-Baselines3's ``CallbackList``:
``on_run_start``, ``on_episode_start``, ``on_step`` (which may end the episode: a
viewer's "end episode"), ``on_episode_end``, ``on_run_end``, each called on every
observer in list order. An observer that needs no steps (the progress line, hooks that
override no ``on_step``) costs the hot path nothing: the loops make no per-step observer
call unless some observer watches steps, and build the per-step
:class:`~rlmesh.StepEvent` only when an observer wants one (the user's hooks).

The recorder is a ``RunHooks`` (``Recorder.hooks()``), so it rides in the list as
the user's hooks do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..models._values import to_numpy_tree
from ..view._hud import outcome_of
from ._hooks import RunHooks
from ._results import success_from_info

if TYPE_CHECKING:
    from ._hooks import StepEvent
    from ._results import EpisodeResult, RunResult

__all__ = ["DriveStep", "HooksObserver", "Observer", "ObserverList", "ViewerObserver", "end_run"]


@dataclass(slots=True, eq=False)
class DriveStep:
    """One env step of one lane, as the observers see it (built only when the list is not empty).

    Attributes:
        lane: The env lane (0 for a single env).
        event: The user-facing :class:`~rlmesh.StepEvent`, or ``None`` when no observer wants one.
        observation: What the env returned (a vector env's whole batch).
        steps: The episode's step count so far (this step included).
        ret: The episode's return so far.
        reward: This step's reward.
        action: The action applied (a vector env's whole batch when ``batched``).
        batched: Whether ``action`` holds every lane.
        predict_ms: Wall time of this step's predict, in ms.
        step_ms: Wall time of the env step, in ms.
    """

    lane: int
    event: StepEvent | None
    observation: Any
    steps: int
    ret: float
    reward: float
    action: Any
    predict_ms: float
    step_ms: float
    batched: bool = False


class Observer:
    """One observer of the drive; every default is a no-op.

    ``wants_steps`` says whether it needs :meth:`on_step` at all (the loops make no
    per-step call unless some observer does); ``wants_events`` whether :meth:`on_step`
    needs ``step.event`` (a :class:`~rlmesh.StepEvent`), built only if some observer does.
    """

    wants_steps = True
    wants_events = False

    def on_run_start(self, context: Any) -> None:
        """Once, after the env connects and before the first reset."""

    def on_episode_start(
        self, episode: int, seed: int | None, lane: int, observation: Any, episodes: int
    ) -> None:
        """A scored episode started on ``lane`` with ``observation`` (a vector env's batch)."""

    def on_step(self, step: DriveStep) -> bool:
        """One step of a scored episode; ``True`` asks the drive to end that episode (truncated)."""
        return False

    def on_episode_end(self, result: EpisodeResult, lane: int) -> None:
        """A scored episode ended."""

    def on_run_end(self, result: RunResult) -> None:
        """Once, when the run ends (even on an error)."""


class HooksObserver(Observer):
    """The user's :class:`~rlmesh.RunHooks` (or a duck with ``on_step`` / ``on_run_end``)."""

    wants_events = True

    def __init__(self, hooks: RunHooks) -> None:
        self.hooks = hooks
        # hooks that keep RunHooks' no-op on_step are not called per step at all
        self.wants_steps = self.wants_events = _overrides_on_step(hooks)

    def on_run_start(self, context: Any) -> None:
        self.hooks.on_run_start(context)

    def on_episode_start(
        self, episode: int, seed: int | None, lane: int, observation: Any, episodes: int
    ) -> None:
        self.hooks.on_episode_start(episode=episode, seed=seed)

    def on_step(self, step: DriveStep) -> bool:
        self.hooks.on_step(step.event)  # type: ignore[arg-type]
        return False

    def on_episode_end(self, result: EpisodeResult, lane: int) -> None:
        self.hooks.on_episode_end(result)

    def on_run_end(self, result: RunResult) -> None:
        self.hooks.on_run_end(result)


def _overrides_on_step(hooks: Any) -> bool:
    """Whether ``hooks`` has an ``on_step`` of its own (not ``RunHooks``' no-op)."""
    if "on_step" in getattr(hooks, "__dict__", {}):
        return True
    return getattr(type(hooks), "on_step", None) is not RunHooks.on_step


def _lane_action(action: Any, lane: int) -> Any:
    """Lane ``lane`` of a batched action tree (numpy leaves), or None when it cannot be cut."""
    if action is None:
        return None
    try:
        tree = to_numpy_tree(action)
        if isinstance(tree, Mapping):
            return {k: np.asarray(v)[lane] for k, v in tree.items()}
        if isinstance(tree, tuple):
            return tuple(np.asarray(v)[lane] for v in tree)
        return np.asarray(tree)[lane]
    except Exception:
        return None


class ViewerObserver(Observer):
    """The live viewer (:class:`rlmesh.view.Viewer`): fed the watched lane's steps (VIEW-6).

    ``on_step`` returns the viewer's "end episode" (the watched lane's episode ends
    truncated where the drive owns resets); ``ViewerQuit`` propagates from it.
    """

    def __init__(self, viewer: Any, lanes: int = 1) -> None:
        self.viewer = viewer
        self.lanes = lanes

    @property
    def live(self) -> bool:
        viewer = self.viewer
        return not (viewer.disabled or viewer.closed)

    def watched(self) -> int:
        lane = self.viewer.selected_lane
        return lane if lane < self.lanes else 0

    def on_episode_start(
        self, episode: int, seed: int | None, lane: int, observation: Any, episodes: int
    ) -> None:
        if lane == self.viewer.selected_lane:
            self.viewer.begin_episode(episode, seed, episodes, observation)

    def on_step(self, step: DriveStep) -> bool:
        if step.lane != self.watched():
            return False
        action = _lane_action(step.action, step.lane) if step.batched else step.action
        return bool(
            self.viewer.step(
                step.observation,
                step.steps,
                step.ret,
                step.reward,
                step.predict_ms,
                step.step_ms,
                action,
            )
        )

    def on_episode_end(self, result: EpisodeResult, lane: int) -> None:
        self.viewer.end_episode(result)

    def outcome(self, terminated: bool, truncated: bool, info: Mapping[str, Any]) -> None:
        """A manually driven episode ended: its outcome to the HUD."""
        self.viewer.hud.outcome = outcome_of(terminated, truncated, success_from_info(info))


class ObserverList(Observer):
    """Observers called in order (the shape of SB3's ``CallbackList``); falsy when empty."""

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self.observers = tuple(observers)
        self.stepping = tuple(o for o in self.observers if o.wants_steps)
        #: Whether any observer watches steps (the loops call :meth:`on_step` only then).
        self.wants_steps = bool(self.stepping)
        self.wants_events = any(o.wants_events for o in self.stepping)

    def __bool__(self) -> bool:
        return bool(self.observers)

    def __len__(self) -> int:
        return len(self.observers)

    def on_run_start(self, context: Any) -> None:
        for o in self.observers:
            o.on_run_start(context)

    def on_episode_start(
        self, episode: int, seed: int | None, lane: int, observation: Any, episodes: int
    ) -> None:
        for o in self.observers:
            o.on_episode_start(episode, seed, lane, observation, episodes)

    def on_step(self, step: DriveStep) -> bool:
        end = False
        for o in self.stepping:
            if o.on_step(step):
                end = True
        return end

    def on_episode_end(self, result: EpisodeResult, lane: int) -> None:
        for o in self.observers:
            o.on_episode_end(result, lane)

    def on_run_end(self, result: RunResult) -> None:
        """Every observer's ``on_run_end`` runs; the first error is re-raised after all ran."""
        end_run(self.observers, result)


def end_run(
    observers: Iterable[Observer], result: RunResult, error: BaseException | None = None
) -> None:
    """Call every observer's ``on_run_end``, then raise ``error`` if given, else the first
    error one of them raised (none is skipped for another's failure)."""
    for o in observers:
        try:
            o.on_run_end(result)
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error
