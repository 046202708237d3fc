"""The real MiniGrid, served as it is: its ``MissionSpace`` travels as an opaque space.

``MiniGrid-Empty-5x5-v0`` declares ``Dict(direction, image, mission=MissionSpace(...))``,
a ``gymnasium.Space`` subclass rlmesh does not know. ``rlmesh serve`` serves it
unchanged; a client sees the mission as a plain string, and the mission space's
``sample``/``contains`` are answered by the env's own space on the server.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import rlmesh
import rlmesh.gymnasium as rg
import rlmesh.numpy as rnp
from conftest import require

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]  # a server in a child process

ENV_ID = "MiniGrid-Empty-5x5-v0"


@pytest.fixture
def address(serve_process: Any) -> str:
    require("minigrid", "MiniGrid, served as it is")
    _, addr = serve_process(ENV_ID, "--package", "minigrid")
    return addr


def local_env() -> Any:
    import minigrid  # noqa: F401  # registers the MiniGrid ids

    return gym.make(ENV_ID)


def test_minigrid_is_served_as_it_is_and_its_mission_space_answers(address: str) -> None:
    with rnp.RemoteEnv(address) as env:
        mission = env.observation_space["mission"]
        assert repr(mission) == "Opaque(minigrid.core.mission.MissionSpace)"
        assert repr(env.observation_space["image"]) == "Box(0, 255, (7, 7, 3), uint8)"
        obs, _ = env.reset(seed=0)
        assert obs["mission"] == "get to the green goal square"
        assert env.observation_space.contains(obs)
        assert mission.contains("get to the green goal square") and not mission.contains("x")
        mission.seed(5)
        assert mission.sample() == "get to the green goal square"


def test_check_env_passes_on_the_gymnasium_client(address: str) -> None:
    with rg.RemoteEnv(address) as env:
        assert isinstance(env.observation_space["mission"], gym.spaces.Space)
        check_env(env, skip_render_check=True)


def test_a_remote_trajectory_matches_the_local_one(address: str) -> None:
    local = local_env()
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 3, size=150).tolist()  # left, right, forward: the goal gets reached
    ends = 0
    with rnp.RemoteEnv(address) as remote:
        a_obs, _ = local.reset(seed=3)
        b_obs, _ = remote.reset(seed=3)
        for t, action in enumerate(actions):
            assert_same_obs(a_obs, b_obs, t)
            a_obs, a_r, a_te, a_tr, _ = local.step(action)
            b_obs, b_r, b_te, b_tr, _ = remote.step(action)
            assert (a_r, a_te, a_tr) == (b_r, b_te, b_tr), t
            if a_te or a_tr:
                ends += 1
                a_obs, _ = local.reset(seed=10 + t)
                b_obs, _ = remote.reset(seed=10 + t)
    assert ends >= 1  # the comparison crossed an episode end


def test_run_gives_the_same_result_local_and_served(address: str) -> None:
    def policy(obs: Any) -> int:
        assert obs["mission"] == "get to the green goal square"
        return int(obs["image"][3, 5, 0] == 8) * 2 or (2 if obs["direction"] % 2 == 0 else 1)

    served = rlmesh.run(rnp.Model(policy), address, seeds=range(3), max_episode_steps=30)
    local = rlmesh.run(rnp.Model(policy), local_env(), seeds=range(3), max_episode_steps=30)
    assert [(e.steps, e.reward, e.terminated) for e in served.episodes] == [
        (e.steps, e.reward, e.terminated) for e in local.episodes
    ]


def assert_same_obs(a: dict[str, Any], b: dict[str, Any], t: int) -> None:
    assert list(a) and set(a) == set(b), t
    np.testing.assert_array_equal(a["image"], b["image"], err_msg=f"step {t}")
    assert int(a["direction"]) == int(b["direction"]) and a["mission"] == b["mission"], t
