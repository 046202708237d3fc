"""A fleet's vector env reports lost lanes the same way from ``step()`` and from its two halves.

No Ray here: a stand-in fleet reports three in-process endpoints (unix sockets) as its
actors; "killing" actor 1 shuts its server down, and its "restart" serves a fresh env on a
new address with a new incarnation, as Ray would. ``step_async`` + ``step_wait`` must then
raise the same :class:`LanesLost` (``actors``, ``addresses``, ``lanes``) as ``step()``,
keep raising it until ``reset()`` reconnects, and ``lost_lanes`` must name the lanes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.errors import LanesLost
from rlmesh.ray import ActorInfo, FleetVectorEnv


class StandInFleet:
    """What :class:`FleetVectorEnv` asks of a fleet: ``info()``, one :class:`ActorInfo` per actor."""

    def __init__(self, serve: Callable[..., Any], n: int) -> None:
        self.serve = serve
        self.servers = [serve(gym.make("CartPole-v1"), transport="unix") for _ in range(n)]
        self.incarnations = [f"i{k}.0" for k in range(n)]

    def info(self) -> list[ActorInfo]:
        return [
            ActorInfo(k, s.address, 1, "node", 0, self.incarnations[k], False)
            for k, s in enumerate(self.servers)
        ]

    def kill(self, k: int) -> None:
        self.servers[k].shutdown()

    def restart(self, k: int) -> None:
        self.servers[k] = self.serve(gym.make("CartPole-v1"), transport="unix")
        self.incarnations[k] += ".r"


def reference(seed: int) -> np.ndarray[Any, Any]:
    return np.stack([gym.make("CartPole-v1").reset(seed=seed + i)[0] for i in range(3)])


def test_split_stepping_after_a_lost_actor_raises_LanesLost_like_step(
    serve: Callable[..., Any],
) -> None:
    fleet = StandInFleet(serve, 3)
    envs = FleetVectorEnv(fleet, "numpy", {})  # type: ignore[arg-type]
    try:
        envs.reset(seed=0)
        envs.step_async(np.array([0, 1, 0]))
        envs.step_wait()
        old = fleet.info()[1].address
        fleet.kill(1)
        envs.step_async(np.array([1, 0, 1]))  # sent; the loss surfaces when gathering
        with pytest.raises(LanesLost) as caught:
            envs.step_wait()
        err = caught.value
        assert (err.actors, err.addresses, err.lanes) == ([1], [old], [1])
        assert envs.lost_lanes == [1]
        # the same error and state as step(): every later half raises it again
        with pytest.raises(LanesLost) as again:
            envs.step_async(np.array([1, 0, 1]))
        assert again.value is err
        with pytest.raises(LanesLost):
            envs.step_wait()
        with pytest.raises(LanesLost):
            envs.step(np.array([1, 0, 1]))
        fleet.restart(1)
        obs, _ = envs.reset(seed=3)  # reconnects every endpoint
        np.testing.assert_array_equal(obs, reference(3))
        assert envs.lost_lanes == [] and envs.reconnects == 1
        envs.step_async(np.array([0, 0, 0]))
        assert envs.step_wait()[1].tolist() == [1.0, 1.0, 1.0]
    finally:
        envs.close()
