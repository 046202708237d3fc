"""A client and a server ``wire.Session`` driven against each other with no socket.

The bytes each side lays out are carried to the other as a transport would (prefix,
body, segments), so these tests exercise exactly what the serve loop and the client
session do, minus the I/O (h11's in-memory pair; SES-1..5, HS-1, docs/protocol.md s8).
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest

from rlmesh.errors import ProtocolException
from rlmesh.wire import answer_hello, frames, make_hello, messages as m
from rlmesh.wire.frames import PREFIX_SIZE, decode_prefix, split_body
from rlmesh.wire.session import (
    AWAIT_HELLO,
    BROKEN,
    CLIENT,
    CLOSED,
    LEGAL,
    READY,
    SERVER,
    FrameTooLarge,
    LocalProtocolError,
    Session,
)


def carry(buffers: list[Any]) -> frames.Frame:
    """What a transport does with one frame's buffers: bytes across, then a Frame."""
    raw = b"".join(bytes(memoryview(b).cast("B")) for b in buffers)
    plan = decode_prefix(raw[:PREFIX_SIZE])
    body = frames.new_body(plan)
    body[:] = np.frombuffer(raw, np.uint8, offset=PREFIX_SIZE)
    return split_body(plan, body)


def welcome_for(hello: m.Hello) -> Any:
    return answer_hello(hello, declared=None, service="env", component="test", session_id="s")


class Pair:
    """A client session and a server session joined back to back."""

    def __init__(self) -> None:
        self.client = Session(CLIENT)
        self.server = Session(SERVER)

    def request(self, msg: Any, segments: tuple[Any, ...] = ()) -> tuple[Any, frames.Frame]:
        frame = carry(self.client.send(msg, segments))
        return self.server.receive(frame), frame

    def reply(self, msg: Any, segments: tuple[Any, ...] = ()) -> tuple[Any, frames.Frame]:
        frame = carry(self.server.send(msg, segments))
        return self.client.receive(frame), frame

    def handshake(self) -> m.Welcome:
        hello, _ = self.request(make_hello("test", None))
        welcome, _ = self.reply(welcome_for(hello))
        assert isinstance(welcome, m.Welcome)
        return welcome


def test_handshake_moves_both_sides_to_READY_and_a_close_to_CLOSED() -> None:
    pair = Pair()
    assert pair.client.state is pair.server.state is AWAIT_HELLO
    hello, frame = pair.request(make_hello("test", None))
    assert isinstance(hello, m.Hello) and frame.request_id == 1
    assert pair.client.state is pair.server.state is AWAIT_HELLO  # nothing moves before the reply
    _, frame = pair.reply(welcome_for(hello))
    assert frame.request_id == 1
    assert pair.client.state is pair.server.state is READY
    _, _ = pair.request(m.Close(reason="done"))
    reply, _ = pair.reply(m.CloseReply())
    assert isinstance(reply, m.CloseReply)
    assert pair.client.state is pair.server.state is CLOSED
    with pytest.raises(LocalProtocolError, match="Step is not allowed in session state CLOSED"):
        pair.client.send(m.Step(action=[1]))


def test_reset_and_step_round_trip_with_segments_and_fresh_request_ids() -> None:
    pair = Pair()
    pair.handshake()
    reset, frame = pair.request(m.Reset(seeds=[7]))
    assert isinstance(reset, m.Reset) and reset.seeds == [7] and frame.request_id == 2
    obs = np.arange(4, dtype=np.float32)
    reply, frame = pair.reply(m.ResetReply(obs=[]), (obs,))
    assert isinstance(reply, m.ResetReply) and frame.request_id == 2
    np.testing.assert_array_equal(frame.segments[0].view(np.float32), obs)
    for rid in (3, 4, 5):
        step, frame = pair.request(m.Step(action=[1]))
        assert step.action == [1] and frame.request_id == rid
        reply, _ = pair.reply(m.StepReply(obs=[], reward=1.0), (obs,))
        assert reply.reward == 1.0
    assert pair.client.state is pair.server.state is READY
    assert pair.client.pending_id == pair.server.pending_id == 0


@pytest.mark.parametrize("refusal", [m.Busy(message="taken"), m.Incompatible(message="no")])
def test_a_refused_hello_closes_both_sides(refusal: Any) -> None:
    pair = Pair()
    pair.request(make_hello("test", None))
    reply, _ = pair.reply(refusal)
    assert isinstance(reply, type(refusal))  # an Incompatible decodes as a Refusal (reason "")
    assert pair.client.state is pair.server.state is CLOSED


def test_ping_and_shutdown_are_answered_before_hello() -> None:
    pair = Pair()
    pair.request(m.Ping())
    reply, _ = pair.reply(m.Pong(state="ready"))
    assert isinstance(reply, m.Pong) and pair.client.state is AWAIT_HELLO


def test_a_stale_reply_after_a_timeout_is_discarded_and_the_current_one_matched() -> None:
    """SES-3: the client gave up on request 2 and sent 3; the late reply to 2 is dropped."""
    pair = Pair()
    pair.handshake()
    pair.request(m.Reset())
    late = pair.server.send(m.ResetReply(obs=[]))  # ... which the client stopped waiting for
    pair.request(m.Reset(seeds=[1]))  # the client's next request (id 3)
    assert pair.client.receive(carry(late)) is None  # stale: discarded, state untouched
    assert pair.client.pending_id == 3 and pair.client.state is READY
    reply, frame = pair.reply(m.ResetReply(obs=[]))
    assert isinstance(reply, m.ResetReply) and frame.request_id == 3


def test_a_reply_with_no_request_in_flight_is_ignored() -> None:
    pair = Pair()
    pair.handshake()
    stray = carry(frames.encode_frame(m.Pong.KIND, 9, b"\x90"))
    assert pair.client.receive(stray) is None


def test_a_request_before_hello_is_a_ProtocolException_that_breaks_the_server_side() -> None:
    client = Session(CLIENT)
    with pytest.raises(
        LocalProtocolError, match="Step is not allowed in session state AWAIT_HELLO"
    ):
        client.send(m.Step(action=[0]))
    assert client.state is AWAIT_HELLO and client.pending_id == 0  # nothing was sent
    server = Session(SERVER)
    frame = carry(m_encode(m.Step(action=[0]), rid=5))
    with pytest.raises(ProtocolException, match="Step is not allowed in session state AWAIT_HELLO"):
        server.receive(frame)
    assert server.state is BROKEN
    # the server may still answer the offending request with an Error (its id echoed) ...
    answer = carry(server.send(m.Error(code=14, message="bad", recoverable=False)))
    assert answer.request_id == 5
    # ... and then accepts nothing more (an error freezes the state)
    with pytest.raises(ProtocolException, match="not allowed in session state BROKEN"):
        server.receive(carry(m_encode(m.Ping(), rid=6)))


def m_encode(msg: Any, rid: int) -> list[Any]:
    return m.encode_message(msg, rid)


def test_a_reply_of_the_wrong_kind_breaks_the_client_session() -> None:
    pair = Pair()
    pair.handshake()
    pair.request(m.Step(action=[1]))
    wrong = carry(m_encode(m.ResetReply(obs=[]), rid=pair.client.pending_id))
    with pytest.raises(ProtocolException, match="peer answered Step with ResetReply"):
        pair.client.receive(wrong)
    assert pair.client.state is BROKEN


def test_a_server_cannot_send_a_reply_that_answers_another_request() -> None:
    pair = Pair()
    pair.handshake()
    pair.request(m.Step(action=[1]))
    with pytest.raises(LocalProtocolError, match="ResetReply answers Step"):
        pair.server.send(m.ResetReply(obs=[]))
    assert pair.server.state is READY  # nothing was sent: the right reply still may be
    reply, _ = pair.reply(m.StepReply(obs=[]))
    assert isinstance(reply, m.StepReply)
    with pytest.raises(LocalProtocolError, match="answers no request in flight"):
        pair.server.send(m.StepReply(obs=[]))


def test_a_recoverable_error_keeps_the_session_and_a_fatal_one_breaks_both_sides() -> None:
    pair = Pair()
    pair.handshake()
    pair.request(m.Step(action=[9]))
    err, _ = pair.reply(m.Error(code=2, message="bad action", recoverable=True))
    assert isinstance(err, m.Error)
    assert pair.client.state is pair.server.state is READY
    pair.request(m.Step(action=[1]))
    err, _ = pair.reply(m.Error(code=10, message="env died", recoverable=False))
    assert not err.recoverable
    assert pair.client.state is pair.server.state is BROKEN


def test_a_header_that_does_not_decode_breaks_the_receiving_side() -> None:
    server = Session(SERVER)
    garbage = carry(frames.encode_frame(m.Hello.KIND, 1, b"\xc1"))  # 0xc1 is never valid msgpack
    with pytest.raises(ProtocolException):
        server.receive(garbage)
    assert server.state is BROKEN


def test_a_reply_over_max_frame_bytes_is_refused_and_an_error_answers_instead() -> None:
    pair = Pair()
    pair.server.max_frame_bytes = 1024
    pair.handshake()
    pair.request(m.Step(action=[1]))
    with pytest.raises(FrameTooLarge) as info:
        pair.server.send(m.StepReply(obs=[]), (np.zeros(4096, np.uint8),))
    assert info.value.nbytes > 4096
    err, frame = pair.reply(m.Error(code=10, message="too big", recoverable=False))
    assert isinstance(err, m.Error) and frame.request_id == 2  # the Error answers the Step
    assert pair.client.state is BROKEN


def test_request_ids_are_never_zero_and_wrap_at_32_bits() -> None:
    client = Session(CLIENT)
    client._next_id = 0xFFFFFFFF  # type: ignore[attr-defined]
    buffers = client.send(m.Ping())
    assert carry(buffers).request_id == 1  # 0 means "no request": it is skipped


def test_role_must_be_client_or_server() -> None:
    with pytest.raises(ValueError, match="role must be"):
        Session("peer")


def test_a_session_state_pickles_and_copies_as_itself() -> None:
    # the state table (LEGAL, REPLIES) is keyed by the state objects: a copy must be the state
    assert repr(READY) == "READY"
    assert pickle.loads(pickle.dumps(READY)) is READY
    assert copy.copy(READY) is READY and copy.deepcopy(READY) is READY
    assert LEGAL[copy.deepcopy(READY)] is LEGAL[READY]
