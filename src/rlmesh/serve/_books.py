"""A driver's episode books: where each lane's episode stands and what it has earned (AR-4..AR-7).

Kept apart from the driver (``rlmesh.serve._driver``), which moves lanes between the
states and records an episode when one ends.
"""

from __future__ import annotations

import enum
import time
from typing import Any

import numpy as np

from ..wire import messages as m

__all__ = ["ACTIVE", "IDLE", "PENDING", "LaneState"]


class LaneState(enum.IntEnum):
    """Where a lane's episode stands (AR-4..AR-6)."""

    ACTIVE = 0  # mid-episode: its steps and rewards count
    PENDING = 1  # ended under NEXT_STEP autoreset: the next step is the env's reset of it
    IDLE = 2  # not started, or ended with no autoreset owed: waits for an explicit reset


ACTIVE, PENDING, IDLE = (
    LaneState.ACTIVE,
    LaneState.PENDING,
    LaneState.IDLE,
)  # module-level: hot-path lookups


class _Lane:
    """Identity of one lane's current episode."""

    __slots__ = ("episode_id", "seed", "start_ns", "start_step")

    def __init__(self) -> None:
        self.episode_id = ""
        self.seed: int | None = None
        self.start_ns = 0
        self.start_step = 0


class _Books:
    """Per-lane episode state (AR-4).

    Lane states are a plain list plus the (usually short) list of lanes that are
    not mid-episode, so a step touches only those; step counts derive from one
    shared step counter and rewards accumulate in one float64 array. A step where
    every lane is mid-episode costs one increment and one vector add
    (bench_vector.py).
    """

    def __init__(self, n: int) -> None:
        self.lanes = [_Lane() for _ in range(n)]
        self.state: list[LaneState] = [IDLE] * n
        self.waiting = list(range(n))  # lanes whose state is not ACTIVE, ascending
        self.clock = 0  # steps taken by the endpoint while lanes were active
        self.reward = np.zeros(n, dtype=np.float64)
        self.extra_steps = [0] * n  # per-lane step corrections (steps taken while others idled)

    def reset_all(self) -> None:
        n = len(self.lanes)
        self.state = [IDLE] * n
        self.waiting = list(range(n))

    def start(self, i: int, episode_id: str, seed: int | None, now_ns: int | None = None) -> None:
        lane = self.lanes[i]
        lane.episode_id = episode_id
        lane.seed = seed
        lane.start_ns = time.time_ns() if now_ns is None else now_ns
        lane.start_step = self.clock
        self.extra_steps[i] = 0
        self.reward[i] = 0.0
        if self.state[i] != ACTIVE:
            self.state[i] = ACTIVE
            self.waiting.remove(i)

    def park(self, i: int, st: LaneState) -> None:
        """Lane ``i`` leaves ACTIVE for PENDING (awaiting its autoreset) or IDLE."""
        if self.state[i] == ACTIVE:
            self.waiting.append(i)
            self.waiting.sort()
        self.state[i] = st

    def steps(self, i: int) -> int:
        return self.clock - self.lanes[i].start_step + self.extra_steps[i]

    def record(
        self, i: int, terminated: bool, truncated: bool, final_info: Any, now_ns: int | None = None
    ) -> m.EpisodeRecord:
        lane = self.lanes[i]
        return m.EpisodeRecord(
            episode_id=lane.episode_id,
            seed=lane.seed,
            env_index=i,
            step_count=self.steps(i),
            cumulative_reward=float(self.reward[i]),
            terminated=terminated,
            truncated=truncated,
            start_timestamp_ns=lane.start_ns,
            end_timestamp_ns=time.time_ns() if now_ns is None else now_ns,
            final_info=final_info,
        )
