"""Sessions: one client at a time, refusals at handshake, readiness probes, ``rlmesh health``.

Covers SES-1/SES-2 with the DESIGN decision (a second client is refused at handshake
with ``EndpointBusy``, a ``ConnectionError``), SES-5/SES-6 (a new session starts
clean), CLT-10 (close detaches only this client), RDY-2/OPP-3 (``ping`` works before
``Hello`` and while busy) and the ``rlmesh health`` command (exit 0 / 1).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import gymnasium as gym
import pytest
from integration_envs import CountdownEnv

import rlmesh
import rlmesh.numpy as rnp
from conftest import child_env
from rlmesh import cli
from rlmesh.errors import ConnectFailed, EndpointBusy, RequestTimeout, SessionClosed
from rlmesh.serve import Health, ping, wait_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(60)]


def wait_until_ready(address: str, budget_seconds: float = 10.0) -> Health:
    """Ping until the endpoint reports its session free (bounded in time)."""
    deadline = time.monotonic() + budget_seconds
    while True:
        health = ping(address)
        if health.state == "ready" or time.monotonic() > deadline:
            return health
        time.sleep(0.01)


def test_second_client_refused_with_EndpointBusy_while_the_first_is_connected(serve):
    server = serve(CountdownEnv(5))
    first = rnp.RemoteEnv(server.address)
    try:
        first.reset()
        with pytest.raises(EndpointBusy, match="busy") as info:
            rnp.RemoteEnv(server.address)
        assert isinstance(info.value, ConnectionError)
        assert "only one client" in str(info.value)
        # the refusal did not disturb the first client's session
        obs, *_ = first.step(0)
        assert obs.tolist() == [1]
    finally:
        first.close()


def test_the_session_is_freed_after_the_first_client_closes(serve):
    env = CountdownEnv(5)
    server = serve(env)
    with rnp.RemoteEnv(server.address) as first:
        first.reset()
        first.step(0)
    assert env.closed == 0  # SRV-43: a client close never closes the env
    with rnp.RemoteEnv(server.address) as second:  # CLT-10: close() waited for the server
        obs, _ = second.reset()
        assert obs.tolist() == [0]


def test_the_session_is_freed_after_a_client_drops_without_closing(serve):
    server = serve(CountdownEnv(5))
    first = rnp.RemoteEnv(server.address)
    first.reset()
    first._session.detach()  # the process "died": no Close round trip
    assert wait_until_ready(server.address).state == "ready"
    with rnp.RemoteEnv(server.address) as second:
        second.reset()


def test_a_closed_client_raises_SessionClosed_and_close_is_idempotent(serve):
    server = serve(CountdownEnv(5))
    env = rnp.RemoteEnv(server.address)
    env.reset()
    env.close()
    env.close()
    assert env.closed
    with pytest.raises(SessionClosed, match="not connected") as info:
        env.step(0)
    assert isinstance(info.value, ConnectionError)
    with pytest.raises(ConnectionError):
        env.reset()


def test_ping_is_answered_before_Hello_and_while_another_client_holds_the_session(serve):
    server = serve(gym.make("CartPole-v1"))
    health = ping(server.address)
    assert isinstance(health, Health)
    assert (health.state, health.service, health.address) == ("ready", "env", server.address)
    assert health.latency_ms >= 0
    with rnp.RemoteEnv(server.address) as env:
        env.reset()
        assert ping(server.address).state == "busy"
        env.step(0)  # the probe did not take the session
    assert wait_until_ready(server.address).state == "ready"
    assert wait_ready(server.address, timeout_seconds=5).service == "env"


def test_ping_of_a_dead_address_raises_ConnectFailed():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # a port nobody listens on once s is closed
    with pytest.raises(ConnectFailed) as info:
        ping(f"127.0.0.1:{port}", timeout_seconds=2)
    assert isinstance(info.value, ConnectionError)
    with pytest.raises(RequestTimeout):
        wait_ready(f"127.0.0.1:{port}", timeout_seconds=0.2, interval_seconds=0.05)


def test_a_new_session_starts_clean_after_the_previous_one_ended_mid_episode(serve):
    server = serve([CountdownEnv(3) for _ in range(2)])
    with rnp.RemoteVectorEnv(server.address) as envs:
        _, info = envs.reset()
        first_ids = info["episode_ids"]
        envs.step([0, 0])
    with rnp.RemoteVectorEnv(server.address) as envs:
        _, info = envs.reset()
        assert set(info["episode_ids"]).isdisjoint(first_ids)  # SES-6
        obs, _, _, _, info = envs.step([0, 0])
        assert info["completed_episodes"] == 0  # no stale episode from the old session


def test_each_connection_has_its_own_env_id(serve):
    server = serve(CountdownEnv(3))
    with rnp.RemoteEnv(server.address) as a:
        first = a.env_id
    with rnp.RemoteEnv(server.address) as b:
        assert b.env_id != first
        assert b.env_contract.id == "UnknownEnv-v1"  # CLT-7: env_id is not the env's name


# -- rlmesh health (CLI) ---------------------------------------------------------------------


def test_rlmesh_health_exits_0_for_a_serving_endpoint_and_1_for_nothing(serve, capsys):
    server = serve(CountdownEnv(3))
    assert cli.main(["health", server.address]) == 0
    assert "serving: env" in capsys.readouterr().out
    server.shutdown()
    assert cli.main(["health", server.address, "--timeout", "2"]) == 1
    assert "not serving" in capsys.readouterr().err


def test_rlmesh_health_as_a_command_exits_0_then_1_after_the_server_stopped(serve):
    server = serve(CountdownEnv(3))
    cmd = [sys.executable, "-m", "rlmesh.cli", "health", server.address, "--timeout", "5"]
    ok = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    server.shutdown()
    bad = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    assert "not serving" in bad.stderr


def test_rlmesh_health_reports_a_busy_endpoint_as_serving(serve, capsys):
    server = serve(CountdownEnv(3))
    with rlmesh.RemoteEnv(server.address):
        assert cli.main(["health", server.address]) == 0
    assert "busy" in capsys.readouterr().out


def test_the_client_reports_the_negotiated_workflow_edition(serve):
    server = serve(CountdownEnv(3))
    with rnp.RemoteEnv(server.address) as env:
        assert env.selected_workflow_edition == "2026.06"
    with rnp.RemoteEnv(server.address, workflow_edition="2026.06") as env:
        assert env.selected_workflow_edition == "2026.06"
    with pytest.raises(ValueError, match=r"2099\.01"):
        rnp.RemoteEnv(server.address, workflow_edition="2099.01")
    with rnp.RemoteEnv(server.address) as env:  # the refusal left the session free
        env.reset()
