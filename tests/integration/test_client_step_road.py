"""The client's straight step road (issue 24) keeps every behaviour of the general path.

``step()`` writes its one-buffer frame straight to the socket and reads the reply inline
(``ClientSession.call``); these tests drive that road into its rare branches with a
socket stand-in: a partial send, a refused send, a send that times out, a stale reply
after a timeout, and an env's info keys that shadow the runtime ones.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from integration_envs import BlockingEnv

import rlmesh.numpy as rnp
from rlmesh.errors import ConnectionLost, RequestTimeout, SessionClosed

pytestmark = pytest.mark.timeout(60)


class FlakySocket:
    """A socket whose next ``send`` misbehaves once (``mode``), then behaves."""

    def __init__(self, sock: socket.socket, mode: str) -> None:
        self._sock = sock
        self.mode = mode
        self.sends = 0

    def send(self, data: Any, *args: Any) -> int:
        self.sends += 1
        mode, self.mode = self.mode, ""
        if mode == "partial":  # the kernel took only the first bytes
            return self._sock.send(memoryview(data)[:5], *args)
        if mode == "broken":
            raise BrokenPipeError(32, "Broken pipe")
        if mode == "timeout":
            raise TimeoutError("timed out")
        return self._sock.send(data, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


@pytest.fixture(autouse=True)
def _sockets_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMESH_BUSY_POLL_US", "0")  # no shared-memory rings: the socket road


def _on_the_road(client: Any) -> None:
    """Step until the session is past its ring countdown, so ``step`` takes the straight road."""
    for _ in range(4):
        client.step(0)
    session = client._session
    assert (
        session._attach_after <= 0 and session._pending_attach is None and session.conn.shm is None
    )


def _flaky(client: Any, mode: str) -> FlakySocket:
    conn = client._session.conn
    flaky = FlakySocket(conn.sock, mode)
    conn.sock = flaky
    return flaky


def test_a_partial_send_on_the_straight_road_sends_the_rest_of_the_frame(serve):
    server = serve(BlockingEnv())
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        _on_the_road(client)
        flaky = _flaky(client, "partial")
        obs, *_ = client.step(0)
        assert flaky.sends >= 2  # the first send was cut short and the rest followed
        assert obs.tolist() == [5]  # the server read one whole, valid frame
        obs, *_ = client.step(0)
        assert obs.tolist() == [6]


def test_a_refused_send_on_the_straight_road_is_ConnectionLost_then_SessionClosed(serve):
    server = serve(BlockingEnv())
    client = rnp.RemoteEnv(server.address)
    client.reset()
    _on_the_road(client)
    _flaky(client, "broken")
    with pytest.raises(ConnectionLost, match="the peer closed the connection"):
        client.step(0)
    assert client.closed
    with pytest.raises(SessionClosed):
        client.step(0)
    client.close()


def test_a_send_timeout_on_the_straight_road_is_RequestTimeout_and_ends_the_session(serve):
    server = serve(BlockingEnv())
    client = rnp.RemoteEnv(server.address, request_timeout_seconds=5)
    client.reset()
    _on_the_road(client)
    _flaky(client, "timeout")
    with pytest.raises(RequestTimeout, match="while sending"):
        client.step(0)
    assert client.closed  # a frame cut mid-send cannot be resumed
    client.close()


def test_a_stale_reply_after_a_timeout_is_discarded_on_the_straight_road(serve):
    env = BlockingEnv()
    server = serve(env)
    with rnp.RemoteEnv(server.address, request_timeout_seconds=0.3) as client:
        client.reset()
        _on_the_road(client)
        with pytest.raises(RequestTimeout):
            client.step(1)  # step #5 blocks in the env
        env.release.set()
        obs, *_ = client.step(0)
        assert obs.tolist() == [6]  # step #6's own reply, not the late one of step #5
        assert client._session.conn._timeout == pytest.approx(0.3)


class ShadowingEnv(gym.Env):  # type: ignore[type-arg]
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return np.zeros(2, np.float32), 1.0, True, False, {"completed_episodes": "mine"}


def test_an_env_info_key_shadows_the_runtime_key_on_the_straight_road(serve, caplog):
    server = serve(ShadowingEnv())
    with (
        rnp.RemoteEnv(server.address) as client,
        caplog.at_level(logging.WARNING, logger="rlmesh.client"),
    ):
        client.reset()
        for _ in range(2):
            _obs, _r, terminated, _t, info = client.step(0)
            assert terminated
            assert info["completed_episodes"] == "mine"  # the env's own key wins (INFO-3)
            assert len(info["episode_ids"]) == 1  # the other runtime key is still there
            client.reset()
    assert (
        sum(
            "completed_episodes" in r.getMessage() and "shadows" in r.getMessage()
            for r in caplog.records
        )
        == 1
    )
