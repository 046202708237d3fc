"""HS-6: ``Configure`` has one handler, in the serve loop, the same for every service.

An env endpoint and a model endpoint both echo a valid workflow edition and both end
the session on one that is not an edition (the model service used to echo anything).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

import rlmesh.numpy as rnp
from rlmesh.client._session import ClientSession
from rlmesh.errors import InvalidAction, SessionClosed
from rlmesh.serve import EnvServer, ModelServer
from rlmesh.transport import resolve_address
from rlmesh.wire import messages as m


class Zero(rnp.Model):
    def predict(self, obs: Any) -> int:
        return 0


def _server(service: str) -> Any:
    if service == "env":
        return EnvServer(gym.make("CartPole-v1"), "127.0.0.1:0").start()
    return ModelServer(Zero(), "127.0.0.1:0").start()


def _session(server: Any, service: str) -> ClientSession:
    return ClientSession.connect(
        resolve_address(server.address, bind=False),
        service=service,
        component="test",
        declared=None,
        connect_timeout=10.0,
        request_timeout=10.0,
        noun=f"a {service}",
    )


@pytest.mark.parametrize("service", ["env", "model"])
def test_configure_echoes_a_valid_edition_on_every_service(service: str) -> None:
    server = _server(service)
    try:
        session = _session(server, service)
        reply, _ = session.request(m.Configure(edition="2026.06"))
        assert isinstance(reply, m.ConfigureReply) and reply.edition == "2026.06"
        reply, _ = session.request(m.Configure(edition="  "))  # blank: no pin
        assert reply.edition == ""
        session.close()
    finally:
        server.shutdown()


@pytest.mark.parametrize("service", ["env", "model"])
def test_configure_with_a_malformed_edition_ends_the_session_on_every_service(service: str) -> None:
    server = _server(service)
    try:
        session = _session(server, service)
        with pytest.raises(InvalidAction) as info:
            session.request(m.Configure(edition="not an edition"))
        assert not info.value.recoverable
        with pytest.raises(SessionClosed):
            session.request(m.Ping())
        # the endpoint itself keeps serving
        again = _session(server, service)
        again.close()
    finally:
        server.shutdown()
