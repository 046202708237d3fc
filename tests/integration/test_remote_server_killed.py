"""A server process killed mid-episode: the client gets a typed ConnectionError, never a hang.

CLT-12 (no reconnect; a dropped endpoint raises ``ConnectionError`` on the next call),
STYLE "Separate you from them": the first failure is ``ConnectionLost`` (the peer went
away), every later call ``SessionClosed``.
"""

from __future__ import annotations

import signal
import threading

import numpy as np
import pytest

import rlmesh.numpy as rnp
from rlmesh.errors import ConnectionLost, SessionClosed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_SIGKILL_of_the_server_mid_episode_gives_ConnectionLost_then_SessionClosed(
    serve_process, transport
):
    proc, address = serve_process("CartPole-v1", transport=transport)
    client = rnp.RemoteEnv(
        address, request_timeout_seconds=30
    )  # a bound, so a bug fails instead of hanging
    try:
        client.reset(seed=0)
        client.step(0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        with pytest.raises(ConnectionLost) as info:
            client.step(1)
        assert isinstance(info.value, ConnectionError)
        for call in (lambda: client.step(0), lambda: client.reset(), lambda: client.render()):
            with pytest.raises(SessionClosed) as later:
                call()
            assert isinstance(later.value, ConnectionError)
        client.close()  # closing a dead client is quiet
    finally:
        client.close()


def test_SIGKILL_of_a_vector_server_mid_episode_gives_ConnectionLost(serve_process):
    proc, address = serve_process("CartPole-v1", "--num-envs", "3")
    envs = rnp.RemoteVectorEnv(address, request_timeout_seconds=30)
    try:
        assert envs.num_envs == 3
        envs.reset(seed=0)
        envs.step(np.zeros(3, np.int64))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        with pytest.raises(ConnectionError) as info:
            envs.step(np.zeros(3, np.int64))
        assert isinstance(info.value, ConnectionLost)
        with pytest.raises(SessionClosed):
            envs.reset()
    finally:
        envs.close()


def test_a_client_without_a_request_timeout_also_fails_fast_when_the_server_dies(serve_process):
    proc, address = serve_process("CartPole-v1")
    client = rnp.RemoteEnv(address)
    try:
        client.reset(seed=0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        with pytest.raises(ConnectionLost):
            client.step(0)
    finally:
        client.close()


def test_a_server_killed_during_a_step_in_flight_gives_ConnectionLost_not_a_hang(serve_process):
    proc, address = serve_process("integration_envs:make_sleepy")
    client = rnp.RemoteEnv(address)
    killer = threading.Timer(0.5, proc.send_signal, args=(signal.SIGKILL,))
    try:
        client.reset()
        killer.start()
        with pytest.raises(ConnectionLost):
            client.step(1)  # blocked in recv when the process dies
        proc.wait(timeout=30)
    finally:
        killer.cancel()
        client.close()
