"""Lanes autoreset like gymnasium.make_vec (issue 12; DESIGN "lanes autoreset NEXT_STEP by default")."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlmesh._envkit.classify import autoreset_name
from rlmesh.serve import Lanes
from rlmesh.serve._driven import DrivenLanes, driven_env


class Countdown(gym.Env):  # type: ignore[type-arg]
    """Episodes of ``length`` steps; obs ``[t]``; reward 1 per step."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, length: int) -> None:
        self.length = length
        self.observation_space = gym.spaces.Box(0, 100, (1,), np.int64)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.resets = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.t = 0
        self.resets += 1
        return np.array([0]), {"reset": True}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.array([self.t]), 1.0, self.t >= self.length, False, {"t": self.t}


def test_a_plain_list_of_lanes_autoresets_next_step_and_says_so_in_metadata() -> None:
    view = driven_env([Countdown(2), Countdown(3)])
    assert isinstance(view, DrivenLanes)
    assert view.autoreset == "NextStep" and view.metadata["autoreset_mode"] == "NextStep"


def test_next_step_lanes_reset_on_the_step_after_they_end_with_reward_zero() -> None:
    view = driven_env([Countdown(1), Countdown(3)])
    view.reset([], None, [])
    _, rew, term, _, _ = view.step(np.array([0, 0]))
    assert term.tolist() == [True, False] and rew.tolist() == [1.0, 1.0]
    obs, rew, term, _, info = view.step(np.array([0, 0]))  # lane 0's autoreset step
    assert [int(o[0]) for o in obs] == [0, 2]
    assert rew.tolist() == [0.0, 1.0] and term.tolist() == [False, False]
    assert info["final_info"][0] == {"reset": True}
    _, rew, term, _, _ = view.step(np.array([0, 0]))  # lane 0 earns reward again
    assert rew.tolist() == [1.0, 1.0] and term.tolist() == [True, True]


def test_same_step_lanes_reset_at_once_and_carry_the_terminal_obs() -> None:
    lanes = [Countdown(1), Countdown(2)]
    view = driven_env(Lanes(lanes, autoreset="same-step"))
    assert view.autoreset == "SameStep"
    view.reset([], None, [])
    obs, rew, term, _, info = view.step(np.array([0, 0]))
    assert term.tolist() == [True, False] and rew.tolist() == [1.0, 1.0]
    assert int(obs[0][0]) == 0  # already the next episode
    assert int(info["final_obs"][0][0]) == 1 and info["final_obs"][1] is None
    assert info["final_info"][0] == {"t": 1} and info["reset_info"][0] == {"reset": True}
    assert lanes[0].resets == 2


def test_disabled_lanes_stay_done_until_reset() -> None:
    lanes = [Countdown(1), Countdown(3)]
    view = driven_env(Lanes(lanes, autoreset="disabled"))
    view.reset([], None, [])
    view.step(np.array([0, 0]))
    _, _, term, _, _ = view.step(np.array([0, 0]))
    assert term.tolist() == [True, False] and lanes[0].resets == 1


def test_a_partial_reset_clears_a_pending_autoreset() -> None:
    lanes = [Countdown(1), Countdown(3)]
    view = driven_env(lanes)
    view.reset([], None, [])
    view.step(np.array([0, 0]))
    view.reset([], None, [0])
    _, rew, term, _, _ = view.step(np.array([0, 0]))
    assert rew.tolist() == [1.0, 1.0] and term.tolist() == [True, False]


@pytest.mark.parametrize(
    ("given", "wire"),
    [
        ("next-step", "NextStep"),
        ("SAME_STEP", "SameStep"),
        ("Disabled", "Disabled"),
        (gym.vector.AutoresetMode.DISABLED, "Disabled"),
    ],
)
def test_autoreset_names_accept_cli_wire_and_gymnasium_spellings(given: Any, wire: str) -> None:
    assert autoreset_name(given) == wire


def test_an_unknown_autoreset_mode_names_the_choices() -> None:
    with pytest.raises(ValueError, match="next-step"):
        autoreset_name("sometimes")
