"""A run's budget and its one ending: episode counts, caps and ``finish_run`` (EVAL-21..27).

Shared by the single-env loop (``_loop``) and the vector loop (``_vector``), so neither
imports the other's module for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._argcheck import check_count
from ._observers import end_run
from ._results import EpisodeResult, RunResult

if TYPE_CHECKING:
    from ._drive import Drive
    from ._observers import Observer

__all__ = ["BUILTIN_STEP_BOUND", "episode_budget", "finish_run", "validate_caps"]

#: The built-in per-episode step bound when no ``max_episode_steps`` is given (EVAL-22).
BUILTIN_STEP_BOUND = 100_000


def episode_budget(
    seeds: Sequence[int] | None, max_episodes: int | None, episodes: int | None
) -> tuple[int, list[int]]:
    """The episode count and seed list of a run (EVAL-21, DELTA-39).

    ``max_episodes`` (seed 000) overrides ``len(seeds)``, later episodes unseeded;
    ``episodes`` (0.1.0) must agree with ``len(seeds)``; neither -> ``len(seeds)``
    or 1.

    >>> episode_budget([7, 8], None, None), episode_budget([7], 3, None), episode_budget(None, None, None)
    ((2, [7, 8]), (3, [7]), (1, []))
    """
    seed_list: list[int] = []
    if seeds is not None:
        if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
            raise TypeError(f"seeds must be a sequence of ints, got {type(seeds).__name__}")
        for s in seeds:
            if isinstance(s, bool) or (not isinstance(s, int) and not hasattr(s, "__index__")):
                raise TypeError(f"seeds must be ints, got {s!r}")
        seed_list = [int(s) for s in seeds]
    if max_episodes is not None and episodes is not None and max_episodes != episodes:
        raise ValueError(
            f"max_episodes={max_episodes} and episodes={episodes} disagree; pass one of them "
            "(episodes= is the 0.1.0 spelling of max_episodes=)"
        )
    if episodes is not None:
        count = check_count("episodes", episodes, 0)
        if seeds is not None and count != len(seed_list):
            raise ValueError(
                f"episodes={count} does not match len(seeds)={len(seed_list)}: give one seed per "
                "episode, or pass max_episodes= to run extra unseeded episodes"
            )
        return count, seed_list
    if max_episodes is not None:
        return check_count("max_episodes", max_episodes, 0), seed_list
    if seeds is not None:
        return len(seed_list), seed_list
    return 1, seed_list


def validate_caps(
    max_episode_steps: int | None, max_episode_seconds: float | None, trial_index_base: int
) -> None:
    """Validate the per-episode caps before connecting (EVAL-20, DELTA-47)."""
    if max_episode_steps is not None:
        check_count("max_episode_steps", max_episode_steps, 1)
    if max_episode_seconds is not None:
        if isinstance(max_episode_seconds, bool) or not isinstance(
            max_episode_seconds, (int, float)
        ):
            raise TypeError(
                f"max_episode_seconds must be a number, got {type(max_episode_seconds).__name__}"
            )
        if not max_episode_seconds > 0:
            raise ValueError(f"max_episode_seconds must be > 0, got {max_episode_seconds}")
    check_count("trial_index_base", trial_index_base, 0)


def finish_run(
    drive: Drive,
    episodes: list[EpisodeResult],
    telemetry: Any,
    observers: Observer | None,
    error: BaseException | None,
) -> RunResult:
    """End the open episode, fire ``on_run_end`` once and re-raise the first error (EVAL-27).

    A viewer's "quit" (an exception with ``rlmesh_quit``, ``rlmesh.view.ViewerQuit``) is
    not an error: the run ends with the episodes finished so far.
    """
    if error is not None and getattr(error, "rlmesh_quit", False):
        error = None
    try:
        drive.end_open_episode()
    except BaseException as exc:
        error = error or exc
    result = RunResult(tuple(episodes), telemetry, drive.route.advisories())
    end_run((observers,) if observers else (), result, error)
    return result
