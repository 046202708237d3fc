"""A fleet's vector env: lanes match make_vec, a dead actor's lanes are reported, reset reconnects.

A fleet of several actors is driven by ``RemoteVectorEnv([addr, ...])`` over its endpoints;
a one-actor fleet with several lanes is dialed by its one address.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh.numpy as rnp
from rlmesh.ray import EnvFleet, FleetVectorEnv, LanesLost

pytestmark = pytest.mark.ray

WAIT_SECONDS = 60.0


def kill_actor(fleet: EnvFleet, index: int) -> None:
    pid = fleet.info()[index].pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, "the killed actor process did not exit"
        time.sleep(0.05)


def assert_same_step(got: tuple[Any, ...], want: tuple[Any, ...]) -> None:
    for g, w in zip(got[:4], want[:4]):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_gymnasium_vector_env_of_one_actor_matches_make_vec(ray_local: Any) -> None:
    with EnvFleet("CartPole-v1", 1, lanes=3) as fleet:
        envs = fleet.vector_env("gymnasium")
        local = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
        try:
            assert isinstance(envs, gym.vector.VectorEnv) and isinstance(envs, FleetVectorEnv)
            assert envs.num_envs == 3 and envs.single_action_space == local.single_action_space
            np.testing.assert_array_equal(envs.reset(seed=11)[0], local.reset(seed=11)[0])
            rng = np.random.default_rng(0)
            for _ in range(40):
                actions = rng.integers(0, 2, size=3)
                assert_same_step(envs.step(actions), local.step(actions))
        finally:
            envs.close()


def test_gymnasium_vector_wrappers_take_the_fleet_env_as_is(ray_local: Any) -> None:
    def episodes(envs: Any) -> list[float]:
        envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
        envs.reset(seed=0)
        returns: list[float] = []
        for _ in range(60):
            info = envs.step(np.zeros(2, dtype=np.int64))[4]
            if "episode" in info:
                returns += info["episode"]["r"][info["_episode"]].tolist()
        envs.close()
        return returns

    with EnvFleet("CartPole-v1", 1, lanes=2) as fleet:
        got = episodes(fleet.vector_env("gymnasium"))
    assert got and got == episodes(
        gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    )


def test_a_killed_actor_is_reported_by_lanes_and_reset_reconnects(ray_local: Any) -> None:
    with EnvFleet("CartPole-v1", 1, lanes=2, max_restarts=1) as fleet:
        envs = fleet.vector_env("numpy")
        try:
            old_address = envs.wrapped.address
            envs.reset(seed=1)
            envs.step(np.array([0, 1]))
            kill_actor(fleet, 0)
            with pytest.raises(LanesLost) as caught:
                envs.step(np.array([0, 1]))
            lost = caught.value
            assert isinstance(lost, ConnectionError)
            assert (lost.actors, lost.lanes) == ([0], [0, 1])
            assert lost.addresses == [old_address.removeprefix("tcp://")]
            assert "actor 0" in str(lost) and "lanes 0..1" in str(lost) and "reset()" in str(lost)
            assert envs.lost_lanes == [0, 1]
            with pytest.raises(LanesLost):  # still lost until reset() is called
                envs.step(np.array([0, 1]))
            obs, _ = envs.reset(seed=5)  # waits for the restart, reconnects, resets
            local = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
            np.testing.assert_array_equal(obs, local.reset(seed=5)[0])
            assert envs.reconnects == 1 and envs.lost_lanes == []
            assert envs.wrapped.address.removeprefix("tcp://") == fleet.addresses[0]
            assert_same_step(envs.step(np.array([1, 0])), local.step(np.array([1, 0])))
        finally:
            envs.close()


def test_reset_itself_reconnects_when_the_actor_died_between_episodes(ray_local: Any) -> None:
    with EnvFleet("CartPole-v1", 1, lanes=2) as fleet:
        envs = fleet.vector_env("numpy")
        try:
            envs.reset(seed=0)
            kill_actor(fleet, 0)
            obs, _ = envs.reset(seed=2)
            local = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
            np.testing.assert_array_equal(obs, local.reset(seed=2)[0])
            assert envs.reconnects == 1
        finally:
            envs.close()


def test_unknown_flavour_is_refused(ray_local: Any) -> None:
    with (
        EnvFleet("CartPole-v1", 1, lanes=2) as fleet,
        pytest.raises(ValueError, match="flavour must be one of"),
    ):
        fleet.vector_env("tensorflow")


@pytest.mark.parametrize("flavour", ["numpy", "gymnasium"])
def test_vector_env_over_three_actors_matches_make_vec_step_for_step(
    ray_local: Any, flavour: str
) -> None:
    with EnvFleet("CartPole-v1", 3) as fleet:
        envs = fleet.vector_env(flavour)
        local = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
        try:
            assert envs.num_envs == 3
            np.testing.assert_array_equal(np.asarray(envs.reset(seed=4)[0]), local.reset(seed=4)[0])
            rng = np.random.default_rng(1)
            for _ in range(40):
                actions = rng.integers(0, 2, size=3)
                assert_same_step(envs.step(actions), local.step(actions))
        finally:
            envs.close()


@pytest.mark.parametrize("flavour", ["torch", "jax"])
def test_vector_env_in_the_framework_flavours(ray_local: Any, flavour: str) -> None:
    pytest.importorskip(flavour)
    with EnvFleet("CartPole-v1", 2, lanes=2) as fleet:
        envs = fleet.vector_env(flavour)
        try:
            obs, _ = envs.reset(seed=0)
            assert tuple(obs.shape) == (4, 4)
            out = envs.step(np.array([0, 1, 0, 1]))
            assert tuple(out[1].shape) == (4,)
        finally:
            envs.close()


def test_one_of_three_actors_killed_loses_only_its_lanes_and_reset_reconnects(
    ray_local: Any,
) -> None:
    with EnvFleet("CartPole-v1", 3, lanes=2) as fleet:
        envs = fleet.vector_env("numpy")
        try:
            envs.reset(seed=0)
            kill_actor(fleet, 1)
            with pytest.raises(LanesLost) as caught:
                envs.step(np.zeros(6, dtype=np.int64))
            assert (caught.value.actors, caught.value.lanes) == ([1], [2, 3])
            obs, _ = envs.reset(seed=9)
            local = gym.make_vec("CartPole-v1", num_envs=6, vectorization_mode="sync")
            np.testing.assert_array_equal(obs, local.reset(seed=9)[0])
            assert_same_step(
                envs.step(np.ones(6, dtype=np.int64)), local.step(np.ones(6, dtype=np.int64))
            )
        finally:
            envs.close()


@pytest.mark.parametrize("flavour", ["numpy", "gymnasium"])
def test_split_stepping_after_a_killed_actor_raises_LanesLost_like_step(
    ray_local: Any, flavour: str
) -> None:
    with EnvFleet("CartPole-v1", 3, lanes=2) as fleet:
        envs = fleet.vector_env(flavour)
        try:
            envs.reset(seed=0)
            old = fleet.info()[1].address
            kill_actor(fleet, 1)
            envs.step_async(np.zeros(6, dtype=np.int64))
            with pytest.raises(LanesLost) as caught:
                envs.step_wait()
            err = caught.value
            assert (err.actors, err.addresses, err.lanes) == ([1], [old], [2, 3])
            assert envs.lost_lanes == [2, 3]
            with pytest.raises(LanesLost):  # the same state as after step(): until reset()
                envs.step_async(np.zeros(6, dtype=np.int64))
            with pytest.raises(LanesLost):
                envs.step(np.zeros(6, dtype=np.int64))
            obs, _ = envs.reset(seed=9)
            local = gym.make_vec("CartPole-v1", num_envs=6, vectorization_mode="sync")
            np.testing.assert_array_equal(obs, local.reset(seed=9)[0])
            envs.step_async(np.ones(6, dtype=np.int64))
            assert_same_step(envs.step_wait(), local.step(np.ones(6, dtype=np.int64)))
            assert envs.lost_lanes == []
        finally:
            envs.close()


class StandInVectorEnv:
    """A minimal ``RemoteVectorEnv([addr, ...])`` over scalar endpoints (no autoreset), standing in
    for the multi-endpoint client until it is merged. On a lost endpoint it closes every session,
    the harshest thing a client could do: the fleet must still blame only the dead actor."""

    def __init__(self, addresses: list[str], token: str | None = None) -> None:
        self.envs = [rnp.RemoteEnv(a, token=token) for a in addresses]
        self.num_envs = len(self.envs)
        self.single_observation_space = self.envs[0].observation_space

    def reset(self, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        return np.stack(
            [e.reset(seed=None if seed is None else seed + i)[0] for i, e in enumerate(self.envs)]
        ), {}

    def step(self, actions: Any) -> tuple[Any, ...]:
        try:
            out = [e.step(int(a)) for e, a in zip(self.envs, actions)]
        except ConnectionError:
            self.close()
            raise
        return (*(np.stack([np.asarray(o[k]) for o in out]) for k in range(4)), {})

    def close(self) -> None:
        for e in self.envs:
            e.close()


def test_many_actors_with_a_stand_in_client_lose_only_the_dead_actors_lanes(
    ray_local: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlmesh.ray import _vector

    monkeypatch.setitem(
        _vector._FACADES, "numpy", type("Facade", (), {"RemoteVectorEnv": StandInVectorEnv})
    )
    with EnvFleet("CartPole-v1", 3) as fleet:
        envs = fleet.vector_env("numpy")
        try:
            envs.reset(seed=0)
            envs.step([0, 1, 0])
            kill_actor(fleet, 1)
            with pytest.raises(LanesLost) as caught:
                envs.step([1, 0, 1])
            assert (caught.value.actors, caught.value.lanes) == ([1], [1])
            obs, _ = envs.reset(seed=3)
            want = np.stack([gym.make("CartPole-v1").reset(seed=3 + i)[0] for i in range(3)])
            np.testing.assert_array_equal(obs, want)
            assert envs.reconnects == 1
            assert envs.step([0, 0, 0])[1].tolist() == [1.0, 1.0, 1.0]
        finally:
            envs.close()
