"""An episode's books: one small record the drive loops fill and return (EVAL-23, EVAL-41)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ._results import EpisodeResult, success_from_info

__all__ = ["Episode"]


class Episode:
    """The books of one episode: id, seed, trial, steps, return, flags, last info, timings.

    A session's manual steps and both drive loops keep their accounting here; a
    finished episode becomes an :class:`~rlmesh.EpisodeResult` with :meth:`result`.

    >>> ep = Episode("e", 7, None, {})
    >>> ep.steps, ep.reward, ep.done
    (0, 0.0, False)
    """

    __slots__ = (
        "id",
        "last_info",
        "pred_s",
        "reward",
        "seed",
        "start",
        "step_s",
        "steps",
        "terminated",
        "trial",
        "truncated",
    )

    def __init__(
        self,
        episode_id: str = "",
        seed: int | None = None,
        trial: int | None = None,
        info: Mapping[str, Any] | None = None,
    ) -> None:
        self.id = episode_id
        self.seed = seed
        self.trial = trial
        self.steps = 0
        self.reward = 0.0
        self.terminated = False
        self.truncated = False
        self.last_info: Mapping[str, Any] = {} if info is None else info
        self.start = time.perf_counter()
        self.pred_s = 0.0
        self.step_s = 0.0

    @property
    def done(self) -> bool:
        """Whether the episode terminated or truncated."""
        return self.terminated or self.truncated

    def result(self, index: int, info: Mapping[str, Any] | None = None) -> EpisodeResult:
        """The finished episode's result; an episode that ended neither terminated nor truncated is truncated (EVAL-23)."""
        steps = self.steps
        return EpisodeResult(
            index,
            self.seed,
            steps,
            self.reward,
            self.terminated,
            self.truncated if (self.terminated or self.truncated) else True,
            success_from_info(self.last_info if info is None else info),
            time.perf_counter() - self.start,
            self.pred_s * 1e3 / steps if steps else 0.0,
            self.step_s * 1e3 / steps if steps else 0.0,
            self.trial,
        )
