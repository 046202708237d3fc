"""metadata["render_modes"] agrees across the Gymnasium flavour's handles (issue 29 item 13).

A Gymnasium env's ``render_modes`` lists the modes ``make(render_mode=...)`` accepts (and
``check_env`` re-makes the env with each). A remote handle renders what the server's env
was made with, so the Gymnasium scalar and vector clients both list exactly that mode; the
env's own list is what the numpy client reports.
"""

from __future__ import annotations

import gymnasium as gym

import rlmesh.gymnasium as rg
import rlmesh.numpy as rnp
from rlmesh.serve import Lanes


def test_the_gymnasium_scalar_and_lanes_clients_agree_and_the_numpy_client_has_the_envs_list(
    serve,
) -> None:
    own = gym.make("CartPole-v1").metadata["render_modes"]
    assert own == ["human", "rgb_array"]
    scalar = serve(gym.make("CartPole-v1"))
    lanes = serve(Lanes([gym.make("CartPole-v1") for _ in range(2)]))
    with rg.RemoteEnv(scalar.address) as env, rg.RemoteVectorEnv(lanes.address) as envs:
        assert env.metadata["render_modes"] == envs.metadata["render_modes"] == []
        assert env.render_mode is None and envs.render_mode is None
    with rnp.RemoteEnv(scalar.address) as env, rnp.RemoteVectorEnv(lanes.address) as envs:
        assert env.metadata["render_modes"] == envs.metadata["render_modes"] == own


def test_a_served_rgb_array_env_lists_that_mode_on_both_gymnasium_handles(serve) -> None:
    scalar = serve(gym.make("CartPole-v1", render_mode="rgb_array"))
    lanes = serve(Lanes([gym.make("CartPole-v1", render_mode="rgb_array") for _ in range(2)]))
    with rg.RemoteEnv(scalar.address) as env, rg.RemoteVectorEnv(lanes.address) as envs:
        assert env.metadata["render_modes"] == envs.metadata["render_modes"] == ["rgb_array"]
