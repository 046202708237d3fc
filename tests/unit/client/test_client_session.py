"""``ClientSession`` over an in-memory connection: handshake, requests, errors, endings.

The session is built on a connection whose peer is a scripted server (``_memory``):
the env answers with real values; the error paths get canned frames.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlmesh.client._dial import check_timeout
from rlmesh.client._session import ClientSession
from rlmesh.errors import (
    ConnectFailed,
    ConnectionLost,
    EndpointBusy,
    EnvironmentException,
    HandshakeError,
    InvalidAction,
    ProtocolException,
    RequestTimeout,
    SessionClosed,
)
from rlmesh.transport import parse_connect_address
from rlmesh.wire import frames, messages as m
from rlmesh.wire.session import LocalProtocolError

from ._memory import Network, error, hang_up, raw, reply, silence, wrong

ENV = "tcp://env.test:1"


def _cartpole(net: Network, address: str = ENV) -> Any:
    return net.serve_env(gym.make("CartPole-v1"), address)


def open_session(net: Network, address: str = ENV, **kwargs: Any) -> ClientSession:
    """A session on an in-memory connection (the constructor says Hello over it)."""
    options: dict[str, Any] = dict(
        service="env",
        component="test",
        declared=None,
        connect_timeout=1.0,
        request_timeout=1.0,
        noun="an env",
        address=parse_connect_address(address),
    )
    options.update(kwargs)
    return ClientSession(net.connect(address), **options)


def connect(net: Network, address: str = ENV, **kwargs: Any) -> ClientSession:
    options: dict[str, Any] = dict(
        service="env",
        component="test",
        declared=None,
        connect_timeout=1.0,
        request_timeout=1.0,
        noun="an env",
    )
    options.update(kwargs)
    return ClientSession.connect(parse_connect_address(address), **options)


def _obs(frame: frames.Frame) -> np.ndarray[Any, Any]:
    return frame.segments[0].view(np.float32)


# -- handshake -----------------------------------------------------------------------------


def test_the_session_says_hello_on_the_connection_it_is_given_and_reads_the_contract(
    net: Network,
) -> None:
    _cartpole(net)
    session = open_session(net)
    assert session.welcome.service == "env"
    assert session.welcome.contract["observation_space"]["kind"] == "box"
    assert not session.closed
    reset, frame = session.request(m.Reset(seeds=[3]))
    assert isinstance(reset, m.ResetReply)
    expected, _ = gym.make("CartPole-v1").reset(seed=3)
    np.testing.assert_array_equal(_obs(frame), expected)
    step, frame = session.call(m.Step(action=[1]))
    assert step.reward == 1.0 and not step.terminated
    records = session.close()
    assert session.closed
    assert [(r.step_count, r.truncated, r.seed) for r in records] == [
        (1, True, 3)
    ]  # the open episode, cut short


def test_a_session_without_an_address_still_words_its_errors(net: Network) -> None:
    ep = _cartpole(net)
    ep.then(error("INTERNAL", "no"))
    with pytest.raises(
        ConnectFailed, match=r"an env at 'an open connection', but the handshake failed \(no\)"
    ):
        ClientSession(
            net.connect(ENV),
            service="env",
            component="t",
            declared=None,
            connect_timeout=None,
            request_timeout=None,
            noun="an env",
        )


def test_a_busy_endpoint_refuses_the_handshake_and_the_connection_is_closed(net: Network) -> None:
    ep = _cartpole(net)
    first = open_session(net)
    conn = net.connect(ENV)
    with pytest.raises(
        EndpointBusy, match=f"an env at '{ENV}' is busy: environment already has an active session"
    ):
        ClientSession(
            conn,
            service="env",
            component="t",
            declared=None,
            connect_timeout=1.0,
            request_timeout=1.0,
            noun="an env",
            address=parse_connect_address(ENV),
        )
    assert conn.closed
    first.close()
    assert ep.active is None
    open_session(net).close()  # the slot is free again


@pytest.mark.parametrize(
    ("answer", "raises", "words"),
    [
        (
            reply(m.Incompatible(message="generation 9 only")),
            HandshakeError,
            "handshake failed: generation 9 only",
        ),
        (error("INTERNAL", "boom"), ConnectFailed, "but the handshake failed \\(boom\\)"),
        (hang_up(), ConnectFailed, "but the handshake failed \\(the peer closed the connection\\)"),
        (raw(b"not a frame at all, just words" * 2), ConnectFailed, "but the handshake failed"),
        (wrong(m.Pong(state="ready")), ConnectFailed, "peer answered Hello with Pong"),
        (
            silence(),
            RequestTimeout,
            "remote environment connect timed out after 1.000s \\(handshake with tcp://",
        ),
    ],
)
def test_a_failed_handshake_raises_a_typed_worded_error_and_closes_the_connection(
    net: Network, answer: Any, raises: type[BaseException], words: str
) -> None:
    _cartpole(net).then(answer)
    conn = net.connect(ENV)
    with pytest.raises(raises, match=words):
        ClientSession(
            conn,
            service="env",
            component="t",
            declared=None,
            connect_timeout=1.0,
            request_timeout=1.0,
            noun="an env",
            address=parse_connect_address(ENV),
        )
    assert conn.closed


def test_connect_dials_then_handshakes(net: Network) -> None:
    _cartpole(net)
    session = connect(net)
    assert session.address == parse_connect_address(ENV)
    assert session.welcome.service == "env"
    session.close()


def test_connect_words_an_address_nobody_serves_and_a_dial_that_times_out(net: Network) -> None:
    with pytest.raises(
        ConnectFailed,
        match=r"could not connect to an env at 'tcp://nobody.test:1'; is the EnvServer running",
    ):
        connect(net, "tcp://nobody.test:1")
    net.refuse("tcp://slow.test:1", TimeoutError("timed out"))
    with pytest.raises(
        RequestTimeout,
        match=r"remote model connect timed out after 0.250s \(dialing tcp://slow.test:1\); is the ModelServer",
    ) as info:
        connect(net, "tcp://slow.test:1", service="model", noun="a model", connect_timeout=0.25)
    assert info.value.timeout_seconds == 0.25


def test_connect_checks_the_frame_limit_setting_before_dialing(
    net: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cartpole(net)
    monkeypatch.setenv(frames.MAX_FRAME_BYTES_ENV, "lots")
    with pytest.raises(ValueError):
        connect(net)
    assert net.dialled == []


def test_connect_raises_busy_at_once_unless_asked_to_wait_for_a_slot(net: Network) -> None:
    ep = _cartpole(net)
    busy = m.Busy(message="all sessions taken")
    ep.then(reply(busy))
    with pytest.raises(EndpointBusy, match=r"is busy: all sessions taken$"):
        connect(net)
    assert len(net.dialled) == 1
    ep.then(reply(busy), reply(busy))  # then a free slot
    session = connect(net, wait_for_slot=True)
    assert len(net.dialled) == 4 and session.welcome.service == "env"
    session.close()


def test_waiting_for_a_slot_gives_up_when_the_connect_timeout_passes(net: Network) -> None:
    _cartpole(net)
    holder = connect(net)
    with pytest.raises(EndpointBusy, match=r"is busy: .* \(waited 0.050s for a free session\)"):
        connect(net, wait_for_slot=True, connect_timeout=0.05)
    assert len(net.dialled) >= 2  # it asked again
    holder.close()


def test_a_handshake_that_times_out_while_waiting_for_a_slot_is_still_busy(net: Network) -> None:
    # the endpoint said Busy, then the time ran out during a retry's handshake: what the
    # user waited for was a free session, so it is EndpointBusy, not a RequestTimeout
    ep = _cartpole(net)
    ep.then(reply(m.Busy(message="all sessions taken")), silence())
    with pytest.raises(
        EndpointBusy, match=r"all sessions taken \(waited 0.100s for a free session\)"
    ):
        connect(net, wait_for_slot=True, connect_timeout=0.1)
    ep.then(silence())  # never busy: a silent endpoint is a timeout as before
    with pytest.raises(RequestTimeout):
        connect(net, wait_for_slot=True, connect_timeout=0.05)


# -- requests and their errors ---------------------------------------------------------------


def test_send_then_receive_is_request_in_two_halves(net: Network) -> None:
    _cartpole(net)
    session = open_session(net)
    session.send(m.Reset(seeds=[0]))
    reply_, frame = session.receive()
    assert isinstance(reply_, m.ResetReply) and _obs(frame).shape == (4,)
    session.close()


@pytest.mark.parametrize("road", ["request", "call"])
def test_a_recoverable_server_error_raises_its_type_and_the_session_goes_on(
    net: Network, road: str
) -> None:
    ep = _cartpole(net)
    session = open_session(net)
    session.request(m.Reset(seeds=[0]))
    ep.then(error("INVALID_ACTION", "action 7 is not in Discrete(2)", op="step"))
    with pytest.raises(InvalidAction, match="action 7") as info:
        getattr(session, road)(m.Step(action=[7]))
    assert info.value.recoverable and info.value.op == "step"
    assert not session.closed
    step, _ = getattr(session, road)(m.Step(action=[0]))
    assert step.reward == 1.0


@pytest.mark.parametrize("road", ["request", "call"])
def test_a_fatal_server_error_ends_the_session(net: Network, road: str) -> None:
    ep = _cartpole(net)
    session = open_session(net)
    session.request(m.Reset(seeds=[0]))
    ep.then(error("INTERNAL", "the env crashed", recoverable=False, op="step"))
    with pytest.raises(EnvironmentException, match=r"\[INTERNAL\] the env crashed") as info:
        getattr(session, road)(m.Step(action=[0]))
    assert not info.value.recoverable
    assert session.closed
    with pytest.raises(SessionClosed, match="the session ended after a fatal env error"):
        getattr(session, road)(m.Step(action=[0]))
    assert session.close() == []  # closing a finished session is quiet


def test_a_server_protocol_error_raises_protocol_exception_and_ends_the_session(
    net: Network,
) -> None:
    ep = _cartpole(net)
    session = open_session(net)
    ep.then(error("PROTOCOL", "header does not decode"))
    with pytest.raises(ProtocolException, match="header does not decode"):
        session.request(m.Reset())
    with pytest.raises(SessionClosed, match="the server reported a protocol error"):
        session.request(m.Reset())


@pytest.mark.parametrize("road", ["request", "call"])
@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (wrong(m.ResetReply(obs=[])), "peer answered Step with ResetReply"),
        (raw(b"\x00" * 64), "magic"),
    ],
)
def test_a_reply_that_is_not_an_answer_ends_the_session(
    net: Network, road: str, answer: Any, words: str
) -> None:
    ep = _cartpole(net)
    session = open_session(net)
    session.request(m.Reset(seeds=[0]))
    ep.then(answer)
    with pytest.raises(ProtocolException, match=words):
        getattr(session, road)(m.Step(action=[0]))
    assert session.closed
    with pytest.raises(SessionClosed, match="protocol error"):
        session.request(m.Ping())


@pytest.mark.parametrize("road", ["request", "call"])
def test_a_peer_that_hangs_up_ends_the_session(net: Network, road: str) -> None:
    ep = _cartpole(net)
    session = open_session(net)
    session.request(m.Reset(seeds=[0]))
    ep.then(hang_up())
    with pytest.raises(ConnectionLost, match="the peer closed the connection"):
        getattr(session, road)(m.Step(action=[0]))
    assert session.closed
    with pytest.raises(SessionClosed, match="connection closed: the peer closed the connection"):
        getattr(session, road)(m.Step(action=[0]))


@pytest.mark.parametrize("road", ["request", "call"])
def test_sending_to_a_peer_that_is_gone_ends_the_session(net: Network, road: str) -> None:
    ep = _cartpole(net)
    session = open_session(net)
    session.request(m.Reset(seeds=[0]))
    ep.connections[0].hang_up()
    with pytest.raises(ConnectionLost, match="Broken pipe"):
        getattr(session, road)(m.Step(action=[0]))
    assert session.closed


@pytest.mark.parametrize("road", ["request", "call"])
def test_a_timeout_leaves_the_session_usable_and_the_late_reply_is_discarded(
    net: Network, road: str
) -> None:
    """SES-3: the late answer to the step that timed out never passes for the next one's."""
    ep = _cartpole(net)
    session = open_session(net)
    _, frame = session.request(m.Reset(seeds=[5]))
    first = _obs(frame).copy()
    ep.then(silence(late=True))
    with pytest.raises(
        RequestTimeout, match=r"remote environment call timed out after 0.200s"
    ) as info:
        getattr(session, road)(m.Step(action=[0]), timeout=0.2)
    assert info.value.timeout_seconds == 0.2
    assert not session.closed
    reply_, frame = getattr(session, road)(m.Reset(seeds=[5]), timeout=0.2)
    assert isinstance(reply_, m.ResetReply)  # not the stale StepReply
    np.testing.assert_array_equal(_obs(frame), first)


def test_a_reply_read_a_few_bytes_at_a_time_is_whole(net: Network) -> None:
    ep = net.serve_env(_image_env(), ENV)
    session = open_session(net)
    ep.connections[0].chunk = 5
    _, frame = session.request(m.Reset(seeds=[0]))
    assert frame.segments[0].nbytes == 32 * 32 * 3
    _, frame = session.call(m.Step(action=[0]))
    assert frame.segments[0].nbytes == 32 * 32 * 3
    session.close()


def test_a_request_the_protocol_forbids_now_is_refused_before_sending(net: Network) -> None:
    ep = _cartpole(net)
    session = open_session(net)
    seen = len(ep.requests)
    with pytest.raises(LocalProtocolError, match="Hello is not allowed in session state READY"):
        session.request(m.Hello(generation="x", peer=m.PeerInfo(), editions=[]))
    assert len(ep.requests) == seen and not session.closed
    pong, _ = session.request(m.Ping())
    assert pong.state == "ready"


# -- endings ---------------------------------------------------------------------------------


def test_close_is_bounded_and_idempotent_even_when_the_server_does_not_answer(net: Network) -> None:
    ep = _cartpole(net)
    session = open_session(net, request_timeout=0.05)
    ep.then(silence())
    assert session.close("bye") == []
    assert session.closed
    assert session.close() == []
    with pytest.raises(
        SessionClosed, match="this client was closed; create a new one to reconnect"
    ):
        session.request(m.Ping())


def test_detach_drops_the_connection_without_a_close_round_trip(net: Network) -> None:
    ep = _cartpole(net)
    session = open_session(net)
    seen = len(ep.requests)
    session.detach()
    assert session.closed and len(ep.requests) == seen
    assert ep.active is None  # the server saw the connection go


def test_shutdown_closes_the_session_when_the_endpoint_accepts(net: Network) -> None:
    ep = _cartpole(net)
    ep.shutdown_allowed = False
    session = open_session(net)
    assert session.shutdown("done") is False
    assert not session.closed
    ep.shutdown_allowed = True
    assert session.shutdown("done") is True
    assert session.closed and ep.shut_down
    with pytest.raises(SessionClosed, match="the endpoint was shut down"):
        session.request(m.Ping())


def test_fail_ends_the_session_after_a_reply_that_did_not_decode(net: Network) -> None:
    _cartpole(net)
    session = open_session(net)
    session.fail(ProtocolException("observation has 3 bytes, expected 16"))
    with pytest.raises(SessionClosed, match="protocol error: observation has 3 bytes"):
        session.request(m.Ping())


# -- timeouts --------------------------------------------------------------------------------


def test_check_timeout_takes_none_zero_or_a_positive_number() -> None:
    assert check_timeout("t", None) is None
    assert check_timeout("t", 0) is None  # 0: wait forever
    assert check_timeout("t", 2) == 2.0
    with pytest.raises(ValueError, match="t must be a non-negative finite float or None"):
        check_timeout("t", -1)
    with pytest.raises(ValueError):
        check_timeout("t", float("nan"))
    with pytest.raises(TypeError, match="got bool"):
        check_timeout("t", True)
    with pytest.raises(TypeError, match="got str"):
        check_timeout("t", "1")  # type: ignore[arg-type]


def _image_env() -> Any:
    from gymnasium import spaces

    class Camera(gym.Env[Any, Any]):
        observation_space = spaces.Box(0, 255, (32, 32, 3), np.uint8)
        action_space = spaces.Discrete(2)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            super().reset(seed=seed)
            return self.observation_space.sample(), {}

        def step(self, action: Any) -> Any:
            return self.observation_space.sample(), 0.0, False, False, {}

    return Camera()


# -- the socket underneath ---------------------------------------------------------------------


class Interrupted(BaseException):
    """Stands in for KeyboardInterrupt arriving mid-handshake."""


def test_an_interrupt_during_the_handshake_still_closes_the_connection(net: Network) -> None:
    def interrupt(server: Any, frame: Any) -> None:
        raise Interrupted

    _cartpole(net).then(interrupt)
    conn = net.connect(ENV)
    with pytest.raises(Interrupted):
        ClientSession(
            conn,
            service="env",
            component="t",
            declared=None,
            connect_timeout=1.0,
            request_timeout=1.0,
            noun="an env",
        )
    assert conn.closed


@pytest.mark.parametrize("road", ["request", "call"])
def test_a_socket_that_takes_a_few_bytes_at_a_time_still_gets_whole_frames(
    net: Network, road: str
) -> None:
    ep = net.serve_env(_image_env(), ENV)
    session = open_session(net)
    ep.connections[0].take = 7
    _, frame = session.request(m.Reset(seeds=[0]))
    reply_, frame = getattr(session, road)(m.Step(action=[1]))
    assert isinstance(reply_, m.StepReply) and frame.segments[0].nbytes == 32 * 32 * 3
    session.close()


@pytest.mark.parametrize("road", ["request", "call"])
def test_a_send_that_times_out_ends_the_session(net: Network, road: str) -> None:
    ep = _cartpole(net)
    session = open_session(net)
    session.request(m.Reset(seeds=[0]))
    ep.connections[0].send_error = TimeoutError("timed out")
    with pytest.raises(RequestTimeout, match=r"call timed out after 0.300s while sending"):
        getattr(session, road)(m.Step(action=[0]), timeout=0.3)
    assert session.closed
    with pytest.raises(SessionClosed, match="a request could not be sent before the timeout"):
        session.receive()


@pytest.mark.parametrize("road", ["request", "call"])
def test_a_send_the_socket_refuses_is_a_lost_connection(net: Network, road: str) -> None:
    ep = _cartpole(net)
    session = open_session(net)
    session.request(m.Reset(seeds=[0]))
    ep.connections[0].send_error = OSError(5, "Input/output error")
    with pytest.raises(ConnectionLost, match="sending failed"):
        getattr(session, road)(m.Step(action=[0]))
    assert session.closed


def test_an_interrupt_while_sending_ends_the_session(net: Network) -> None:
    ep = _cartpole(net)
    session = open_session(net)
    ep.connections[0].send_error = Interrupted()
    with pytest.raises(Interrupted):
        session.request(m.Reset(seeds=[0]))
    with pytest.raises(SessionClosed, match="the connection broke while a request was being sent"):
        session.request(m.Ping())


# -- shared-memory rings (same host) -----------------------------------------------------------


def _ring_offer(net: Network, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A same-host endpoint offering rings, and a client that busy-polls (rings pay only then)."""
    import socket

    from rlmesh.transport import shm

    if not shm.shm_supported():
        pytest.skip("no shared memory on this platform")
    monkeypatch.setenv("RLMESH_BUSY_POLL_US", "1000")
    monkeypatch.setattr("rlmesh.transport.busypoll._usable_cpus", lambda: 2)
    monkeypatch.setattr(
        "rlmesh.transport.busypoll.threading.active_count", lambda: 1
    )  # no other thread
    caps = {shm.OFFER_KEY: "1", shm.TOKEN_KEY: "secret"}
    return net.serve_env(gym.make("CartPole-v1"), ENV, capabilities=caps, family=socket.AF_UNIX)


def test_rings_are_offered_after_a_probe_and_a_declined_offer_leaves_the_session_on_its_socket(
    net: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    ep = _ring_offer(net, monkeypatch)
    session = open_session(net, request_timeout=None)
    local = gym.make("CartPole-v1")
    _, frame = session.request(m.Reset(seeds=[1]))
    np.testing.assert_array_equal(_obs(frame), local.reset(seed=1)[0])
    for action in (0, 1, 1, 0):
        _, frame = session.call(m.Step(action=[action]))
        np.testing.assert_array_equal(_obs(frame), local.step(action)[0])
    kinds = [
        type(r).__name__.removeprefix("Auth") for r in ep.requests
    ]  # every Hello decodes as AuthHello
    assert kinds == [
        "Hello",
        "Reset",
        "Step",
        "Attach",
        "Step",
        "Step",
        "Step",
    ]  # asked once, before the third request
    session.close()


def test_an_error_answering_the_ring_offer_reaches_the_caller(
    net: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    ep = _ring_offer(net, monkeypatch)
    session = open_session(net, request_timeout=None)
    session.request(m.Reset(seeds=[1]))
    session.request(m.Step(action=[0]))
    ep.on(m.Attach, error("UNSUPPORTED", "no rings here"))
    with pytest.raises(EnvironmentException, match="no rings here"):
        session.request(m.Step(action=[0]))
    step, _ = session.request(m.Step(action=[0]))  # still on the socket, still usable
    assert step.reward == 1.0
    session.close()


def test_a_peer_lost_while_answering_the_ring_offer_ends_the_session(
    net: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    ep = _ring_offer(net, monkeypatch)
    session = open_session(net, request_timeout=None)
    session.request(m.Reset(seeds=[1]))
    session.request(m.Step(action=[0]))
    ep.on(m.Attach, hang_up())
    with pytest.raises(ConnectionLost):
        session.request(m.Step(action=[0]))
    assert session.closed
