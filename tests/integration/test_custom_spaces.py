"""Custom Gymnasium spaces, served and in-process, numpy and gymnasium flavours (GYM-1, GYM-6).

A subclass of a space rlmesh knows travels as that space (``MissionText(Text)`` as Text,
``Pixels(Box)`` as Box). Any other ``gymnasium.Space`` subclass of the env's own
(MiniGrid's ``MissionSpace``) is served as it is, as an opaque space: its values travel
as plain data and its ``sample``/``contains`` are answered by the env's own space
(``tests/integration/test_minigrid.py`` drives the real MiniGrid). Gymnasium's own
kinds rlmesh cannot carry (Sequence, Graph, OneOf) are refused with ``UnsupportedSpace``
(a ``TypeError``) naming the space, where it sits and the conversion, before the server
binds or resets the env. In-process nothing travels, so such an env runs as it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from custom_space_envs import MISSIONS, GridEnv, MissionSpace, MissionText, make_sequence
from gymnasium.utils.env_checker import check_env

import rlmesh
import rlmesh.gymnasium as rg
import rlmesh.numpy as rnp
from rlmesh.errors import UnsupportedSpace
from rlmesh.spaces import Box, Text, from_gymnasium_space

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]

HERE = Path(__file__).resolve().parent


def test_subclasses_of_known_spaces_convert_as_their_base() -> None:
    env = GridEnv(MissionText())
    space = from_gymnasium_space(env.observation_space)
    assert isinstance(space["mission"], Text) and isinstance(space["image"], Box)
    assert repr(space["mission"]) == 'Text(1, 18, charset=" abcdefghijklmnopqrstuvwxyz")'


def test_a_served_text_subclass_reaches_the_numpy_client_as_text(serve: Any) -> None:
    server = serve(GridEnv(MissionText()))
    with rnp.RemoteEnv(server.address) as env:
        assert isinstance(env.observation_space["mission"], Text)
        obs, _ = env.reset(seed=0)
        assert obs["mission"] == "get the red key" and obs["image"].shape == (7, 7, 3)
        obs, reward, *_ = env.step(2)
        assert obs["mission"] == "get the red key" and obs["direction"] == 1 and reward == 2.0


def test_a_served_text_subclass_is_a_gymnasium_text_on_the_gymnasium_client(serve: Any) -> None:
    server = serve(GridEnv(MissionText()))
    with rg.RemoteEnv(server.address) as env:
        mission = env.observation_space["mission"]
        assert isinstance(mission, gym.spaces.Text) and mission.contains("go to the goal")
        assert isinstance(env.observation_space["image"], gym.spaces.Box)
        check_env(env, skip_render_check=True)
        obs, _ = env.reset(seed=1)
        assert env.observation_space.contains(obs)


def test_in_process_a_text_subclass_runs_and_the_policy_gets_the_string() -> None:
    seen: list[str] = []

    def policy(obs: Any) -> int:
        seen.append(obs["mission"])
        return 1

    result = rlmesh.run(rnp.Model(policy), GridEnv(MissionText()), seeds=[0, 1])
    assert (
        result.total_steps == 6
        and seen[0] == "get the red key"
        and seen[-1] == "open the blue door"
    )


def _refused(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    exc = excinfo.value
    assert isinstance(exc, UnsupportedSpace) and isinstance(exc, TypeError)
    assert exc.space_type == "Sequence"
    return str(exc)


def test_a_sequence_space_is_refused_before_the_server_binds() -> None:
    env = make_sequence()
    with pytest.raises(UnsupportedSpace) as excinfo:
        rlmesh.EnvServer(env, address="127.0.0.1:0")
    text = _refused(excinfo)
    assert text.startswith("Unsupported space type: Sequence at observation_space['mission']")
    assert "gymnasium.ObservationWrapper" in text and "pad a Sequence" in text
    assert env.resets == 0


def test_an_unknown_space_is_served_as_an_opaque_space_answered_by_the_env(serve: Any) -> None:
    server = serve(GridEnv(MissionSpace()))
    with rnp.RemoteEnv(server.address) as env:
        mission = env.observation_space["mission"]
        assert repr(mission) == "Opaque(custom_space_envs.MissionSpace)"
        obs, _ = env.reset(seed=1)
        assert obs["mission"] == "open the blue door"
        assert mission.contains("go to the goal") and not mission.contains("fly")
        assert env.observation_space.contains(obs)
        mission.seed(7)
        first = [mission.sample() for _ in range(5)]
        mission.seed(7)
        assert [mission.sample() for _ in range(5)] == first  # repeatable
        assert set(first) <= set(MISSIONS)


def test_in_process_an_unknown_space_runs_as_it_is() -> None:
    """Nothing travels in-process: the env's own space samples and checks, the policy gets its values."""
    seen: list[str] = []

    def policy(obs: Any) -> int:
        seen.append(obs["mission"])
        return 0

    env = GridEnv(MissionSpace())
    result = rlmesh.run(rnp.Model(policy), env, seeds=[2])
    assert result.total_steps == 3 and seen == ["go to the goal"] * 3
    assert (
        rlmesh.run(rlmesh.RANDOM_SAMPLE, GridEnv(MissionSpace()), max_episodes=1).total_steps == 3
    )


def test_the_documented_workaround_serves_it(serve: Any) -> None:
    """Wrapping the env so the mission space is a Text (what the message says) makes it servable."""

    class MissionAsText(gym.ObservationWrapper):  # type: ignore[type-arg]
        def __init__(self, env: gym.Env) -> None:  # type: ignore[type-arg]
            super().__init__(env)
            spaces = dict(env.observation_space.spaces)  # type: ignore[attr-defined]
            spaces["mission"] = gym.spaces.Text(
                64, min_length=0, charset="abcdefghijklmnopqrstuvwxyz "
            )
            self.observation_space = gym.spaces.Dict(spaces)

        def observation(self, observation: Any) -> Any:
            return observation

    server = serve(MissionAsText(GridEnv(MissionSpace())))
    with rg.RemoteEnv(server.address) as env:
        obs, _ = env.reset(seed=0)
        assert obs["mission"] == "get the red key"


def test_rlmesh_serve_prints_the_refusal_in_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rlmesh.cli", "serve", "custom_space_envs:make_sequence", "--address", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if "Sequence" in line]
    assert lines and "UnsupportedSpace" in lines[0] and "observation_space['mission']" in lines[0]
    assert "Traceback" not in proc.stderr


def test_values_of_a_box_subclass_round_trip(serve: Any) -> None:
    server = serve(GridEnv(MissionText()))
    with rnp.RemoteEnv(server.address) as env:
        env.reset(seed=0)
        obs, *_ = env.step(0)
        assert obs["image"].dtype == np.uint8 and int(obs["image"][0, 0, 0]) == 1
