"""A client facing a broken or hostile server: typed errors, never a hang (CLT-3, CLT-12, ERR-4).

The "server" here is a raw socket that speaks just enough of the protocol (a real
``Welcome`` with a real contract) and then misbehaves in one specific way. STYLE
"Separate you from them": malformed peer input surfaces as ``ProtocolException``; after
it the session is over and every later call raises ``SessionClosed`` (a
``ConnectionError``) at once.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from integration_envs import CountdownEnv

import rlmesh
import rlmesh.numpy as rnp
from rlmesh.errors import ConnectFailed, ProtocolException, SessionClosed
from rlmesh.transport import Connection
from rlmesh.wire import frames, handshake, messages as m

pytestmark = pytest.mark.timeout(30)

CONTRACT = rlmesh.EnvServer(CountdownEnv(3), close_env_on_shutdown=False)
CONTRACT_DICT = CONTRACT.env_contract.to_dict()
CONTRACT.shutdown()

Misbehave = Callable[[Connection, Any, int], None]  # (conn, request message, request id)


@pytest.fixture
def fake_server() -> Iterator[Callable[[Misbehave | None, bytes | None], str]]:
    """``fake_server(on_request, raw_handshake_reply) -> address``; one connection, then done."""
    listeners: list[socket.socket] = []
    threads: list[threading.Thread] = []

    def start(on_request: Misbehave | None, raw_handshake_reply: bytes | None = None) -> str:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        listeners.append(listener)

        def run() -> None:
            sock, _ = listener.accept()
            sock.settimeout(10)
            conn = Connection(sock, frames.DEFAULT_LIMITS)
            try:
                frame = conn.recv_frame()
                assert frame is not None
                if raw_handshake_reply is not None:
                    sock.sendall(raw_handshake_reply)
                    return
                hello = m.decode_header(frame)
                welcome = handshake.answer_hello(
                    hello,
                    declared=None,
                    service="env",
                    component="rlmesh-env",
                    session_id="fake",
                    contract=CONTRACT_DICT,
                )
                conn.send(m.encode_message(welcome, frame.request_id))
                while on_request is not None:
                    frame = conn.recv_frame()
                    assert frame is not None
                    on_request(conn, m.decode_header(frame), frame.request_id)
            except Exception:
                pass  # the client went away: the fake is done
            finally:
                conn.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)
        return f"127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for listener in listeners:
        listener.close()
    for thread in threads:
        thread.join(5)


def reply_with_garbage(conn: Connection, msg: Any, rid: int) -> None:
    conn.sock.sendall(b"RM\x01" + bytes(range(200)))


def reply_with_the_wrong_kind(conn: Connection, msg: Any, rid: int) -> None:
    conn.send(m.encode_message(m.Pong(state="ready"), rid))


def reply_with_a_short_observation(conn: Connection, msg: Any, rid: int) -> None:
    import numpy as np

    conn.send(m.encode_message(m.ResetReply(obs=[]), rid, [np.zeros(3, np.uint8)]))


def hang_up(conn: Connection, msg: Any, rid: int) -> None:
    conn.close()
    raise ConnectionError


@pytest.mark.parametrize(
    "misbehave",
    [reply_with_garbage, reply_with_the_wrong_kind, reply_with_a_short_observation],
    ids=["garbage", "wrong-kind", "short-observation"],
)
def test_a_malformed_reply_is_a_ProtocolException_and_the_session_is_over(fake_server, misbehave):
    client = rnp.RemoteEnv(fake_server(misbehave), request_timeout_seconds=10)
    with pytest.raises(ProtocolException):
        client.reset()
    with pytest.raises(SessionClosed) as later:
        client.reset()
    assert isinstance(later.value, ConnectionError)
    client.close()


def test_a_server_hanging_up_mid_session_is_ConnectionLost(fake_server):
    client = rnp.RemoteEnv(fake_server(hang_up), request_timeout_seconds=10)
    with pytest.raises(ConnectionError):
        client.reset()
    with pytest.raises(SessionClosed):
        client.step(0)


@pytest.mark.parametrize(
    "raw",
    [b"HTTP/1.1 400 Bad Request\r\n\r\n", b"", b"RM" + bytes(100)],
    ids=["http", "hang-up", "bad-version"],
)
def test_a_peer_that_is_not_an_rlmesh_server_fails_the_handshake_with_ConnectFailed(
    fake_server, raw
):
    address = fake_server(None, raw)
    with pytest.raises(
        ConnectFailed, match=r"connected to an env at '.*', but the handshake failed"
    ) as info:
        rnp.RemoteEnv(address, connect_timeout_seconds=5)
    assert isinstance(info.value, ConnectionError)
    assert "is the EnvServer running" not in str(
        info.value
    )  # CLT-3: it is running, it is just not us
