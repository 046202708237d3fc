"""Episode books of the env driver (AR-4..AR-9): counts, rewards and records per lane and mode."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from rlmesh.serve._driven import driven_env
from rlmesh.serve._driver import Driver, RequestFailed
from rlmesh.wire import messages as m


class Scripted:
    """A 2-lane vector env: lane i ends every ``lengths[i]`` steps; reward 1 per counted step."""

    def __init__(self, mode: str, lengths: tuple[int, int] = (2, 3)) -> None:
        self.num_envs = 2
        self.single_observation_space = spaces.Box(-10, 10, (1,), np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.observation_space = self.single_observation_space
        self.action_space = self.single_action_space
        self.metadata = {"autoreset_mode": mode}
        self.lengths = lengths
        self.t = [0, 0]
        self.pending = [False, False]

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        self.t = [0, 0]
        return np.zeros((2, 1), np.float32), {}

    def step(self, action: Any) -> Any:
        rew, term = np.ones(2), np.zeros(2, bool)
        for i in range(2):
            if self.pending[i]:  # NEXT_STEP: this step is the autoreset
                self.pending[i], self.t[i], rew[i] = False, 0, 0.0
                continue
            self.t[i] += 1
            if self.t[i] == self.lengths[i]:
                term[i] = True
                if self.metadata["autoreset_mode"] == "NextStep":
                    self.pending[i] = True
                elif self.metadata["autoreset_mode"] == "SameStep":
                    self.t[i] = 0
        return np.zeros((2, 1), np.float32), rew, term, np.zeros(2, bool), {}

    def close(self) -> None:
        pass


def drive(mode: str, steps: int) -> list[m.EpisodeRecord]:
    d = Driver(driven_env(Scripted(mode)))
    d.begin_session()
    d.reset(m.Reset(episode_ids=["a0", "b0"]))
    out: list[m.EpisodeRecord] = []
    seg = [np.zeros(2, np.int64).view(np.uint8)]
    for _ in range(steps):
        reply, _ = d.step(m.Step(action=[]), seg)
        out.extend(reply.completed)
    return out


def test_next_step_lanes_count_only_their_own_steps() -> None:
    records = drive("NextStep", 7)
    got = [(r.env_index, r.step_count, r.cumulative_reward) for r in records]
    # lane 0 ends at steps 2 and 5 (3 and 6 are its autoresets); lane 1 at 3 and 7 (4 autoresets)
    assert got == [(0, 2, 2.0), (1, 3, 3.0), (0, 2, 2.0), (1, 3, 3.0)]


def test_same_step_lanes_restart_on_the_ending_step() -> None:
    records = drive("SameStep", 6)
    assert [(r.env_index, r.step_count) for r in records] == [
        (0, 2),
        (1, 3),
        (0, 2),
        (0, 2),
        (1, 3),
    ]


def test_disabled_lanes_stay_done_and_stop_counting() -> None:
    records = drive("Disabled", 6)
    assert [(r.env_index, r.step_count, r.terminated) for r in records] == [
        (0, 2, True),
        (1, 3, True),
    ]


def test_ending_a_session_truncates_the_episodes_in_flight() -> None:
    d = Driver(driven_env(Scripted("NextStep", (50, 50))))
    d.begin_session()
    d.reset(m.Reset(episode_ids=["a", "b"]))
    d.step(m.Step(action=[]), [np.zeros(2, np.int64).view(np.uint8)])
    final = d.end_session()
    assert [(r.episode_id, r.step_count, r.truncated) for r in final] == [
        ("a", 1, True),
        ("b", 1, True),
    ]


def test_an_autoreset_step_that_reports_done_breaks_the_next_step_contract() -> None:
    env = Scripted("NextStep", (1, 5))
    d = Driver(driven_env(env))
    d.begin_session()
    d.reset(m.Reset(episode_ids=["a", "b"]))
    seg = [np.zeros(2, np.int64).view(np.uint8)]
    d.step(m.Step(action=[]), seg)  # lane 0 ends -> pending
    env.pending = [False, False]  # the env "forgets" to autoreset lane 0 and ends it again
    env.t[0] = 0
    with pytest.raises(RequestFailed, match="NEXT_STEP autoreset contract violated on lane 0"):
        d.step(m.Step(action=[]), seg)


def test_a_lane_reset_after_idling_counts_only_its_new_episode() -> None:
    env = Scripted("Disabled", (2, 50))
    d = Driver(driven_env(env))
    d.begin_session()
    d.reset(m.Reset(episode_ids=["a", "b"]))
    seg = [np.zeros(2, np.int64).view(np.uint8)]
    for _ in range(
        5
    ):  # lane 0 ends at step 2, then idles (the env still pays it reward) for 3 steps
        d.step(m.Step(action=[]), seg)
    env.t[0] = 0
    d.reset(m.Reset(env_indices=[0], episode_ids=["a2"]))
    completed: list[m.EpisodeRecord] = []
    for _ in range(2):
        reply, _ = d.step(m.Step(action=[]), seg)
        completed.extend(reply.completed)
    assert [(r.episode_id, r.step_count, r.cumulative_reward) for r in completed] == [
        ("a2", 2, 2.0)
    ]
    final = d.end_session()
    assert [(r.episode_id, r.step_count, r.cumulative_reward) for r in final] == [("b", 7, 7.0)]


class ScriptedLists(Scripted):
    """The same lanes, their rewards and flags as plain lists (a duck-typed vector env)."""

    def step(self, action: Any) -> Any:
        obs, rew, term, trunc, info = super().step(action)
        return obs, rew.tolist(), term.tolist(), trunc.tolist(), info


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_a_vector_env_answering_in_lists_keeps_the_same_books_and_sends_the_same_lanes(
    mode: str,
) -> None:
    def run(env: Any) -> tuple[list[Any], list[Any]]:
        d = Driver(driven_env(env))
        d.begin_session()
        d.reset(m.Reset(episode_ids=["a0", "b0"]))
        seg = [np.zeros(2, np.int64).view(np.uint8)]
        records, lanes = [], []
        for _ in range(7):
            reply, segs = d.step(m.Step(action=[]), seg)
            records += [(r.env_index, r.step_count, r.cumulative_reward) for r in reply.completed]
            lanes.append([bytes(memoryview(s).cast("B")) for s in segs[1:]])  # rewards, flags
        return records, lanes

    arrays, lists = run(Scripted(mode)), run(ScriptedLists(mode))
    assert lists == arrays
    assert arrays[0]  # lanes ended, and were booked
    assert any(flags[1] != bytes(2) for flags in arrays[1])  # a termination flag went out
