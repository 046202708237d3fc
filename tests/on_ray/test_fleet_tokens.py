"""Fleets and ``workers=`` runs on Ray use tokens without the user passing one (issue 36).

Every fleet endpoint requires the fleet's random token; ``vector_env()`` and a ``workers=``
run over the fleet send it by themselves; a client of ``fleet.addresses`` without it is refused.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

import rlmesh
import rlmesh.numpy as rnp
from rlmesh.errors import AuthenticationFailed
from rlmesh.ray import EnvFleet
from rlmesh.serve import ServeOptions, ping

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module", autouse=True)
def _pickle_this_module_by_value(ray_local: Any) -> None:
    """The workers cannot import this test module: ship its policy by value (both picklers)."""
    import sys

    import cloudpickle
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def balance(obs: Any) -> int:
    return int(obs[2] + 0.5 * obs[3] > 0)


def test_a_fleet_makes_a_token_and_sends_it_itself(ray_local: Any) -> None:
    with EnvFleet("CartPole-v1", 2) as fleet:
        token = fleet.token
        assert isinstance(token, str) and len(token) >= 32
        address = fleet.addresses[0]
        with pytest.raises(AuthenticationFailed):  # a stranger on the node's address
            rnp.RemoteEnv(address)
        assert ping(address).authenticated is False  # it learns the health state only
        with rnp.RemoteEnv(address, token=token) as env:
            env.reset(seed=0)
            env.step(0)
        envs = fleet.vector_env("numpy")  # no token passed: the fleet's travels along
        envs.reset(seed=0)
        envs.step([0, 1])
        envs.close()
    with EnvFleet("CartPole-v1", 1) as other:
        assert other.token != token  # a fleet's own


def test_a_fleet_takes_the_token_it_is_given(ray_local: Any) -> None:
    with EnvFleet("CartPole-v1", 1, options=ServeOptions(token="team-token")) as fleet:
        assert fleet.token == "team-token"
        with rnp.RemoteEnv(fleet.addresses[0], token="team-token") as env:
            env.reset(seed=1)


def test_a_workers_run_on_ray_over_a_fleet_uses_its_token(ray_local: Any) -> None:
    seeds = list(range(6))
    one = rlmesh.run(balance, gym.make("CartPole-v1"), seeds=seeds)
    with EnvFleet("CartPole-v1", 2) as fleet:
        many = rlmesh.run(balance, fleet, seeds=seeds, workers=rlmesh.Workers(n=2, backend="ray"))
        with pytest.raises(AuthenticationFailed):  # the bare addresses: no token, refused
            rlmesh.run(
                balance,
                fleet.addresses,
                seeds=seeds[:1],
                workers=rlmesh.Workers(n=2, backend="ray"),
            )
    assert [(e.seed, e.steps, e.reward) for e in many.episodes] == [
        (e.seed, e.steps, e.reward) for e in one.episodes
    ]
