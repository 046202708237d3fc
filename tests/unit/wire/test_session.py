"""Sessions and handshakes without sockets: a client and a server state machine side by side."""

from __future__ import annotations

import pytest

from rlmesh._build import PROTOCOL_GENERATION, select_edition
from rlmesh.errors import ProtocolException
from rlmesh.wire import answer_hello, make_hello, messages as m
from rlmesh.wire.session import AWAIT_HELLO, BROKEN, CLOSED, READY, SessionState


class WirePair:
    """Client and server session states; ``exchange`` checks both directions."""

    def __init__(self) -> None:
        self.client = SessionState()
        self.server = SessionState()

    def exchange(self, request: int, reply: int) -> None:
        self.client.check_request(request)
        self.server.check_request(request)
        self.server.on_reply(request, reply)
        self.client.on_reply(request, reply)
        assert self.client.state is self.server.state


def test_handshake_then_requests_then_close() -> None:
    pair = WirePair()
    pair.exchange(m.Ping.KIND, m.Pong.KIND)  # readiness before Hello
    assert pair.client.state is AWAIT_HELLO
    pair.exchange(m.Hello.KIND, m.Welcome.KIND)
    assert pair.client.state is READY
    pair.exchange(m.Reset.KIND, m.ResetReply.KIND)
    pair.exchange(m.Step.KIND, m.Error.KIND)  # a recoverable error keeps the session
    pair.exchange(m.Step.KIND, m.StepReply.KIND)
    pair.exchange(m.Close.KIND, m.CloseReply.KIND)
    assert pair.client.state is CLOSED
    with pytest.raises(ProtocolException, match="not allowed in session state CLOSED"):
        pair.client.check_request(m.Step.KIND)


@pytest.mark.parametrize("refusal", [m.Busy.KIND, m.Incompatible.KIND])
def test_refusals_close_the_session(refusal: int) -> None:
    pair = WirePair()
    pair.exchange(m.Hello.KIND, refusal)
    assert pair.server.state is CLOSED


def test_requests_before_hello_are_protocol_errors() -> None:
    with pytest.raises(ProtocolException, match="Step is not allowed in session state AWAIT_HELLO"):
        SessionState().check_request(m.Step.KIND)


def test_a_mismatched_reply_breaks_the_session() -> None:
    s = SessionState()
    s.check_request(m.Hello.KIND)
    s.on_reply(m.Hello.KIND, m.Welcome.KIND)
    with pytest.raises(ProtocolException, match="answered Step with ResetReply"):
        s.on_reply(m.Step.KIND, m.ResetReply.KIND)
    assert s.state is BROKEN


def test_server_selects_the_highest_mutual_edition() -> None:
    welcome = answer_hello(make_hello("c", None), declared=None, service="env", component="s", session_id="x")
    assert isinstance(welcome, m.Welcome) and welcome.selected == "2026.06"


def test_generation_mismatch_is_incompatible() -> None:
    hello = m.Hello(generation="rlmesh-wire-v1", peer=m.PeerInfo(), editions=["2026.06"])
    answer = answer_hello(hello, declared=None, service="env", component="s", session_id="x")
    assert isinstance(answer, m.Incompatible)
    assert f"not compatible with server {PROTOCOL_GENERATION}" in answer.message


def test_no_mutual_edition_names_both_offers() -> None:
    hello = m.Hello(generation=PROTOCOL_GENERATION, peer=m.PeerInfo(), editions=["2030.01"], preferred="2030.01")
    answer = answer_hello(hello, declared=None, service="env", component="s", session_id="x")
    assert isinstance(answer, m.Incompatible) and "no mutual workflow edition" in answer.message


def test_wrong_service_is_incompatible() -> None:
    answer = answer_hello(make_hello("c", None, service="model"), declared=None, service="env", component="s", session_id="x")
    assert isinstance(answer, m.Incompatible) and "serves the env service; the client asked for the model service" in answer.message


def test_edition_ordering_puts_cohorts_above_their_base() -> None:
    assert select_edition(["2026.06", "2026.06-0.1.0-rc.5"], ["2026.06", "2026.06-0.1.0-rc.5"]) == "2026.06-0.1.0-rc.5"
    assert select_edition(["2026.06", "2026.06-rc"], ["2026.06", "2026.06-rc"], ceilings=["2026.06"]) == "2026.06"
    assert select_edition(["2026.06"], ["2025.12"]) is None
