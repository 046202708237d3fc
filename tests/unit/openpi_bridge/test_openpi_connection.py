"""How ``PolicyClient``'s dial words a refused or unanswered upgrade (``rlmesh.openpi._connection``).

A stand-in for ``websockets.sync.client`` scripts each try's outcome, so the order of
"busy, then no answer at all" is pinned without a loaded machine to produce it; the real
server's 503 is exercised in ``tests/integration/openpi_bridge/test_openpi_bridge.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rlmesh.errors import AuthenticationFailed, ConnectFailed, EndpointBusy
from rlmesh.openpi import _connection, _deps

URL = "ws://127.0.0.1:9"


class _Response:
    def __init__(self, status: int, body: bytes) -> None:
        self.status_code = status
        self.body = body


class _Refused(Exception):
    """What ``websockets`` raises for a refused upgrade (``InvalidStatus``): a ``response``."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"server rejected WebSocket connection: HTTP {status}")
        self.response = _Response(status, body)


class _ScriptedClient:
    """``websockets.sync.client`` whose ``connect`` raises the scripted outcomes in turn."""

    def __init__(self, outcomes: list[BaseException]) -> None:
        self._outcomes: Iterator[BaseException] = iter(outcomes)
        self.tries = 0

    def connect(self, url: str, **kwargs: Any) -> Any:
        self.tries += 1
        raise next(self._outcomes)


def _dial(monkeypatch: pytest.MonkeyPatch, outcomes: list[BaseException]) -> _ScriptedClient:
    client = _ScriptedClient(outcomes)
    monkeypatch.setattr(_deps, "websockets_client", lambda: client)
    return client


def test_a_timeout_after_a_503_is_EndpointBusy_with_the_servers_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the server said "busy", then the retry's handshake ran out the connect timeout: the
    # endpoint is still busy (not unreachable), and the message carries the server's words
    client = _dial(monkeypatch, [_Refused(503, b"busy: 1 client at once"), TimeoutError()])
    with pytest.raises(EndpointBusy, match="busy: 1 client at once"):
        _connection.Connection._dial(URL, 30.0, 1 << 20, None)
    assert client.tries == 2


def test_a_timeout_with_no_503_before_it_is_ConnectFailed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _dial(monkeypatch, [TimeoutError()])
    with pytest.raises(ConnectFailed, match=r"within 30\.0s") as caught:
        _connection.Connection._dial(URL, 30.0, 1 << 20, None)
    assert not isinstance(caught.value, EndpointBusy)


def test_a_503_with_no_body_names_the_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    _dial(monkeypatch, [_Refused(503, b""), TimeoutError()])
    with pytest.raises(EndpointBusy, match="all its sessions are taken"):
        _connection.Connection._dial(URL, 30.0, 1 << 20, None)


def test_a_401_is_AuthenticationFailed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _dial(monkeypatch, [_Refused(401, b"wrong token")])
    with pytest.raises(AuthenticationFailed, match="wrong token"):
        _connection.Connection._dial(URL, 30.0, 1 << 20, None)
    assert client.tries == 1
