"""EnvFleet on a simulated 3-node Ray cluster (``ray.cluster_utils.Cluster`` on loopback)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh.numpy as rnp
from rlmesh.ray import EnvFleet, FleetStartTimeout

pytestmark = pytest.mark.ray


def drive(address: str, seed: int, token: str) -> None:
    env = rnp.RemoteEnv(address, token=token)
    try:
        np.testing.assert_array_equal(
            env.reset(seed=seed)[0], gym.make("CartPole-v1").reset(seed=seed)[0]
        )
        assert env.step(0)[1] == 1.0
    finally:
        env.close()


def test_the_default_spread_places_one_actor_on_each_node(ray_cluster3: Any) -> None:
    with EnvFleet("CartPole-v1", 3) as fleet:
        infos = fleet.info()
        assert len({i.node_id for i in infos}) == 3  # SPREAD: the nodes in turn
        for seed, info in enumerate(infos):
            drive(info.address, seed, fleet.token)


def test_one_cpu_per_actor_puts_one_actor_on_each_node(ray_cluster3: Any) -> None:
    with EnvFleet("CartPole-v1", 3, lanes=2, resources={"CPU": 1}) as fleet:
        infos = fleet.info()
        assert len({i.node_id for i in infos}) == 3  # every node has 1 CPU: one actor each
        assert fleet.num_envs == 6
        for info in infos:
            envs = rnp.RemoteVectorEnv(info.address, token=fleet.token)
            try:
                assert envs.reset(seed=0)[0].shape == (2, 4)
            finally:
                envs.close()


def test_more_actors_than_the_cluster_can_place_time_out_clearly(ray_cluster3: Any) -> None:
    with pytest.raises(FleetStartTimeout, match=r"resources.*ray status") as caught:
        EnvFleet("CartPole-v1", 4, resources={"CPU": 1}, start_timeout_seconds=5)
    assert isinstance(caught.value, TimeoutError)
    # the placed actors were stopped: the whole cluster can host a new 3-actor fleet at once
    with EnvFleet("CartPole-v1", 3, resources={"CPU": 1}, start_timeout_seconds=60) as fleet:
        assert len(fleet.addresses) == 3


def test_an_actor_whose_node_is_lost_restarts_on_another_node(ray_cluster3: Any) -> None:
    # last in this module: it removes a node from the shared cluster
    # half a CPU each: at most two actors fit on the head, so one is always off it (SPREAD
    # alone is best effort and, on a loaded machine, may leave all three on the head)
    with EnvFleet("CartPole-v1", 3, max_restarts=2, resources={"CPU": 0.5}) as fleet:
        before = fleet.info()
        workers = {n.node_id: n for n in ray_cluster3.worker_nodes}
        victim = next((i for i in before if i.node_id in workers), None)
        assert victim is not None, "SPREAD placed no actor off the head node"
        ray_cluster3.remove_node(workers[victim.node_id])
        after = fleet.info()  # waits for the restart elsewhere
        moved = after[victim.index]
        assert moved.node_id != victim.node_id and moved.restarted
        drive(moved.address, 0, fleet.token)
        for i in range(3):
            if i != victim.index and before[i].node_id != victim.node_id:
                assert after[i].incarnation == before[i].incarnation
