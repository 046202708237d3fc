"""Messages that point the right way: one recipe, the one that fits where the user stands.

- ``gymnasium.make_vec("rlmesh/Remote-v0", num_envs=4, address=...)`` on a one-env endpoint
  names ``--num-envs 4`` or ``--sessions 4`` with ``vectorization_mode="sync"`` (it said
  "Use RemoteEnv instead");
- a distributed run with more workers than the endpoint's sessions says "at most K
  workers" (it suggested ``wait_for_slot=True``, which ``run()`` cannot take);
- ``LanesLost`` gives one recovery recipe (it mixed the fleet's ``reset()`` with the inner
  client's ``reconnect(i)``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
import rlmesh.gymnasium  # registers rlmesh/Remote-v0
from rlmesh.errors import ConnectionLost, EndpointBusy, EndpointLost
from rlmesh.ray._actor import ActorInfo
from rlmesh.ray._vector import FleetVectorEnv

pytestmark = pytest.mark.slow  # servers, session workers and run workers in child processes


def test_make_vec_on_a_one_env_endpoint_names_num_envs_or_sessions_with_sync(serve: Any) -> None:
    server = serve(gym.make("CartPole-v1"))
    with pytest.raises(ValueError) as caught:
        gym.make_vec("rlmesh/Remote-v0", num_envs=4, address=server.address)
    text = str(caught.value)
    assert "--num-envs 4" in text and "--sessions 4" in text
    assert 'vectorization_mode="sync"' in text
    assert "Use RemoteEnv instead" not in text
    assert server.address.removeprefix("tcp://") in text


def test_the_sessions_recipe_of_that_message_works() -> None:
    server = rlmesh.EnvServer("CartPole-v1", "127.0.0.1:0", sessions=4).start()
    try:
        envs = gym.make_vec(
            "rlmesh/Remote-v0", num_envs=4, vectorization_mode="sync", address=server.address
        )
        try:
            obs, _ = envs.reset(seed=3)
            local = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
            np.testing.assert_array_equal(obs, local.reset(seed=3)[0])
            local.close()
        finally:
            envs.close()
    finally:
        server.shutdown()


@pytest.mark.parametrize("sessions", [1, 2])
def test_more_workers_than_sessions_says_at_most_that_many_workers(
    serve: Any, sessions: int
) -> None:
    if sessions == 1:
        server = serve(gym.make("CartPole-v1"))
    else:
        server = rlmesh.EnvServer("CartPole-v1", "127.0.0.1:0", sessions=sessions).start()
    workers = sessions + 1
    try:
        with pytest.raises(EndpointBusy) as caught:
            rlmesh.run(rlmesh.RANDOM_SAMPLE, server.address, seeds=range(100_000), workers=workers)
    finally:
        server.shutdown()
    text = str(caught.value)
    plural = "s" if sessions > 1 else ""
    assert f"at most {sessions} worker{plural} (workers={sessions}, --workers {sessions})" in text
    assert f"--sessions {workers}" in text
    assert "wait_for_slot" not in text


def test_LanesLost_gives_one_recovery_recipe() -> None:
    envs = object.__new__(FleetVectorEnv)  # no Ray: only the message is under test
    envs._infos = [  # nothing listens at these addresses: both actors are lost
        ActorInfo(i, f"127.0.0.1:{port}", 2, "node", 0, "a", False) for i, port in enumerate((1, 2))
    ]
    try:
        raise EndpointLost(
            "endpoint 0 (127.0.0.1:1) was lost: the peer closed the connection. The other "
            "endpoints are still connected: call reconnect(0) (then reset()) to dial it again, "
            "or close() to close all",
            address="127.0.0.1:1",
            index=0,
            lanes=range(0, 2),
        ) from ConnectionLost("the peer closed the connection")
    except EndpointLost as inner:
        lost = envs._lost_error(inner)
    text = str(lost)
    assert lost.lanes == [0, 1, 2, 3]
    assert "ConnectionLost: the peer closed the connection" in text  # the cause
    assert text.count("reset()") == 1 and "reconnect(" not in text and "close()" not in text
