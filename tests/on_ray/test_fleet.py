"""EnvFleet on a local Ray: actors serve envs on the node's address, restart, and stop.

Each fleet endpoint is driven on its own with ``rlmesh.numpy.RemoteEnv`` /
``RemoteVectorEnv`` (no multi-endpoint client needed here).
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh.numpy as rnp
from rlmesh.authoring import EnvFactory
from rlmesh.errors import ConnectFailed
from rlmesh.ray import ActorLost, EnvFleet, FleetStartError
from rlmesh.transport.probe import ping

pytestmark = pytest.mark.ray

WAIT_SECONDS = 60.0  # bound of every poll below (Ray restarts an actor in about a second)


class CartPoleFactory(EnvFactory):
    """CartPole with a short episode limit: a factory binding that must reach every actor.

    (No ``ParamSpec``: a ``ParamSpec`` cannot be pickled yet, and this class travels by value.)
    """

    workflow_edition = "2026.06"

    def make(self, max_steps: int = 500) -> Any:
        return gym.make("CartPole-v1", max_episode_steps=max_steps)


@pytest.fixture(scope="module", autouse=True)
def _pickle_this_module_by_value(ray_local: Any) -> None:
    """The actors cannot import this test module: ship its factory class by value."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def actor_pids() -> set[int]:
    """PIDs of this machine's fleet actor processes (Ray titles them ``ray::EnvActor``)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read().startswith(b"ray::EnvActor"):
                    pids.add(int(entry))
        except OSError:
            continue
    return pids


def wait_until(predicate: Any, what: str, timeout: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting until {what}")
        time.sleep(0.05)


def refuses(address: str) -> bool:
    try:
        ping(address, timeout_seconds=1.0)
    except ConnectFailed:
        return True
    return False


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_each_actor_serves_a_scalar_env_on_the_node_ip_and_close_stops_them(ray_local: Any) -> None:
    before = actor_pids()
    fleet = EnvFleet("CartPole-v1", 3)
    try:
        addresses = fleet.addresses
        infos = fleet.info()
        node_ip = ray_local.util.get_node_ip_address()
        assert len(addresses) == 3 and len(set(addresses)) == 3
        assert all(
            a.startswith(f"{node_ip}:") for a in addresses
        )  # the node's IP as Ray reports it
        assert fleet.num_envs == 3 and len(fleet) == 3
        assert {i.pid for i in infos} <= actor_pids() - before  # one actor process each
        expected = gym.make("CartPole-v1")
        for seed, address in enumerate(addresses):
            env = rnp.RemoteEnv(
                address, token=fleet.token
            )  # every endpoint wants the fleet's token
            try:
                obs, _ = env.reset(seed=seed)
                np.testing.assert_array_equal(obs, expected.reset(seed=seed)[0])
                obs, reward, terminated, truncated, _ = env.step(1)
                np.testing.assert_array_equal(obs, expected.step(1)[0])
                assert reward == 1.0
            finally:
                env.close()
    finally:
        fleet.close()
    assert fleet.closed
    assert all(refuses(a) for a in addresses)  # every server stopped before close() returned
    wait_until(lambda: all(pid_gone(i.pid) for i in infos), "every actor process exited")
    with pytest.raises(ConnectionError, match="closed"):
        fleet.addresses  # noqa: B018


def test_lanes_per_actor_serve_one_vector_endpoint_like_make_vec(ray_local: Any) -> None:
    with EnvFleet("CartPole-v1", 2, lanes=3) as fleet:
        assert fleet.num_envs == 6
        assert [i.num_envs for i in fleet.info()] == [3, 3]
        local = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
        addresses = fleet.addresses
        for address in addresses:
            envs = rnp.RemoteVectorEnv(address, token=fleet.token)
            try:
                assert envs.num_envs == 3
                assert envs.env_contract.autoreset_mode == "NextStep"  # like gymnasium.make_vec
                np.testing.assert_array_equal(envs.reset(seed=7)[0], local.reset(seed=7)[0])
                for _ in range(30):  # through episode ends: NEXT_STEP autoreset on both sides
                    got, want = (
                        envs.step(np.ones(3, dtype=np.int64)),
                        local.step(np.ones(3, dtype=np.int64)),
                    )
                    for g, w in zip(got[:4], want[:4]):
                        np.testing.assert_array_equal(g, w)
            finally:
                envs.close()
    assert all(refuses(a) for a in addresses)


def test_an_env_factory_and_a_callable_get_their_kwargs_on_every_actor(ray_local: Any) -> None:
    make_short = functools.partial(gym.make, "CartPole-v1")
    for env in (CartPoleFactory, make_short):
        kwargs = {"max_steps": 4} if env is CartPoleFactory else {"max_episode_steps": 4}
        with EnvFleet(env, 2, env_kwargs=kwargs) as fleet:
            for address in fleet.addresses:
                client = rnp.RemoteEnv(address, token=fleet.token)
                try:
                    client.reset(seed=0)
                    truncated = [client.step(0)[3] for _ in range(4)]
                    assert truncated == [False, False, False, True]  # the binding reached the actor
                finally:
                    client.close()


class CartPoleMaker:
    """An env factory that is no EnvFactory subclass: anything with ``make()`` (seed types.SupportsMake)."""

    def __init__(self) -> None:
        self.prepared = False

    def prepare(self) -> None:
        self.prepared = True

    def make(self, max_steps: int = 500) -> Any:
        assert self.prepared
        return gym.make("CartPole-v1", max_episode_steps=max_steps)


def test_a_factory_class_with_make_serves_on_every_actor(ray_local: Any) -> None:
    with EnvFleet(CartPoleMaker, 2, env_kwargs={"max_steps": 3}) as fleet:
        for address in fleet.addresses:
            with rnp.RemoteEnv(address, token=fleet.token) as client:
                client.reset(seed=0)
                assert [client.step(0)[3] for _ in range(3)] == [False, False, True]


def test_an_env_that_cannot_be_built_fails_the_start_and_leaves_no_actor(ray_local: Any) -> None:
    before = actor_pids()
    with pytest.raises(FleetStartError, match="NoSuchEnv") as caught:
        EnvFleet("NoSuchEnv-v0", 2)
    assert "actor 0" in str(caught.value)
    wait_until(lambda: actor_pids() <= before, "the failed fleet's actors exited")


def test_an_env_that_cannot_be_pickled_is_refused_before_any_actor_starts(ray_local: Any) -> None:
    before = actor_pids()
    lock = threading.Lock()
    with pytest.raises(
        TypeError,
        match=r"EnvFleet sends the env to another process, but .*'lock'.* cannot be pickled",
    ):
        EnvFleet(lambda: (lock, gym.make("CartPole-v1"))[1], 2)
    assert actor_pids() <= before


def test_an_actor_killed_with_sigkill_is_restarted_and_serves_at_its_new_address(
    ray_local: Any,
) -> None:
    with EnvFleet("CartPole-v1", 2, max_restarts=2) as fleet:
        old = fleet.info()
        os.kill(old[1].pid, signal.SIGKILL)
        wait_until(lambda: pid_gone(old[1].pid), "the killed actor process is gone")
        new = fleet.info()  # waits for Ray's restart
        assert new[0] == old[0]  # the other actor is untouched
        assert new[1].incarnation != old[1].incarnation and new[1].restarted
        assert new[1].pid != old[1].pid
        assert fleet.addresses[1] == new[1].address
        if new[1].address != old[1].address:
            assert refuses(old[1].address)
        env = rnp.RemoteEnv(new[1].address, token=fleet.token)
        try:
            np.testing.assert_array_equal(
                env.reset(seed=3)[0], gym.make("CartPole-v1").reset(seed=3)[0]
            )
            assert env.step(0)[1] == 1.0
        finally:
            env.close()


def test_ray_kill_with_restart_gives_the_fleet_a_new_incarnation(ray_local: Any) -> None:
    with EnvFleet("CartPole-v1", 1) as fleet:
        old = fleet.info()[0]
        ray_local.kill(fleet.actors[0], no_restart=False)
        wait_until(
            lambda: fleet.info()[0].incarnation != old.incarnation,
            "the fleet reports the restarted actor",
        )
        new = fleet.info()[0]
        assert new.restarted
        env = rnp.RemoteEnv(new.address, token=fleet.token)
        try:
            env.reset(seed=0)
            assert env.step(1)[1] == 1.0
        finally:
            env.close()


def test_an_actor_without_restarts_left_is_reported_lost_by_index(ray_local: Any) -> None:
    with EnvFleet("CartPole-v1", 2, max_restarts=0) as fleet:
        victim = fleet.info()[1]
        os.kill(victim.pid, signal.SIGKILL)
        wait_until(lambda: pid_gone(victim.pid), "the killed actor process is gone")
        with pytest.raises(ActorLost, match=r"actor 1 .*max_restarts=0") as caught:
            fleet.addresses  # noqa: B018
        assert caught.value.index == 1
        assert isinstance(caught.value, ConnectionError)
    assert fleet.closed


def test_the_context_manager_stops_every_actor_even_on_error(ray_local: Any) -> None:
    with pytest.raises(RuntimeError, match="user code failed"), EnvFleet("CartPole-v1", 2) as fleet:
        infos = fleet.info()
        raise RuntimeError("user code failed")
    assert all(refuses(i.address) for i in infos)
    wait_until(lambda: all(pid_gone(i.pid) for i in infos), "every actor process exited")
