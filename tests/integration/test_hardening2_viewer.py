"""Issue 28 items 8-9: the HTTP viewer against DNS rebinding, cross-origin control and connection floods.

Each test is the attack as a browser or a script would make it: requests whose ``Host``
is a rebound name, a page on another localhost port (or a sandboxed ``Origin: null``)
trying to drive the run, and connections that open and then say nothing, trickle a
header, or stop reading a stream. Counts, never wall-clock thresholds; every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import require
from rlmesh.numpy import Model
from rlmesh.view._synthetic import CounterEnv

pytestmark = pytest.mark.timeout(120)

BOUND = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def zero(obs: Any) -> Any:
    return np.zeros(2, np.float32)


def request(port: int, path: str, **headers: str) -> tuple[int, bytes]:
    """A GET with exactly these headers (``Host`` too, when given)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=BOUND)
    try:
        conn.putrequest("GET", path, skip_host="Host" in headers, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def ws_upgrade(port: int, **headers: str) -> int:
    """The status of a raw WebSocket upgrade of ``/ws`` (101 = accepted)."""
    lines = [
        "GET /ws HTTP/1.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
    ]
    headers.setdefault("Host", f"127.0.0.1:{port}")
    lines += [f"{k}: {v}" for k, v in headers.items()]
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = s.recv(4096)
    return int(head.split(b" ", 2)[1])


@pytest.fixture
def viewer_port(request: pytest.FixtureRequest) -> Iterator[int]:
    require("aiohttp")
    port = free_port()
    kwargs = getattr(request, "param", {})
    view = rlmesh.View("http", port=port, **kwargs)
    with rlmesh.session(
        Model(zero), CounterEnv(16, 16, cameras=1, episode_steps=5), view=view
    ) as sess:
        sess.run(max_episodes=1)
        yield port


def selected(port: int) -> int:
    return int(json.loads(request(port, "/sources.json")[1])["selected"])


# -- item 8: DNS rebinding ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/", "/hud.json", "/frame", "/sources.json", "/select?i=1", "/control?op=quit", "/nope"],
)
def test_a_rebound_host_name_is_refused_on_every_route(viewer_port: int, path: str) -> None:
    """After DNS rebinding the browser sends the attacker's name as Host: nothing is served."""
    port = viewer_port
    for host in (
        f"attacker.example:{port}",
        "attacker.example",
        f"127.0.0.1.nip.io:{port}",
        f"127.0.0.1:{port + 1}",
    ):
        status, body = request(port, path, Host=host)
        assert status == 403, (host, status, body[:200])
        assert b"allowed_hosts" in body
    assert ws_upgrade(port, Host=f"attacker.example:{port}") == 403
    assert selected(port) == 0  # /select?i=1 under the rebound name changed nothing


def test_the_viewers_own_names_are_served(viewer_port: int) -> None:
    port = viewer_port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
        assert request(port, "/hud.json", Host=host)[0] == 200, host
    assert ws_upgrade(port) == 101


@pytest.mark.parametrize("viewer_port", [{"allowed_hosts": ["gpu-box.lan"]}], indirect=True)
def test_a_name_the_user_allowed_is_served(viewer_port: int) -> None:
    port = viewer_port
    assert request(port, "/hud.json", Host=f"gpu-box.lan:{port}")[0] == 200
    assert request(port, "/hud.json", Host=f"other.lan:{port}")[0] == 403


@pytest.mark.parametrize("viewer_port", [{"token": "s3cret"}], indirect=True)
def test_with_a_token_the_token_decides(viewer_port: int) -> None:
    port = viewer_port
    assert request(port, "/hud.json?token=s3cret", Host=f"gpu-box.lan:{port}")[0] == 200
    assert request(port, "/hud.json", Host=f"gpu-box.lan:{port}")[0] == 403


def test_allowed_hosts_is_validated() -> None:
    with pytest.raises(ValueError, match="allowed_hosts"):
        rlmesh.View("http", allowed_hosts="box.lan")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="allowed_hosts"):
        rlmesh.View("http", allowed_hosts=[""])
    assert rlmesh.View("http", allowed_hosts=["a", "b"]).allowed_hosts == ("a", "b")


# -- item 9: same-origin control ------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://127.0.0.1:{other}"},  # a page on another localhost port
        {"Origin": "http://localhost:{other}"},
        {"Origin": "null"},  # a sandboxed iframe, a file:// page
        {"Sec-Fetch-Site": "same-site"},  # an <img> from another localhost port: no Origin sent
        {"Referer": "http://127.0.0.1:{other}/evil.html"},
    ],
    ids=[
        "origin-other-port",
        "origin-localhost-other-port",
        "origin-null",
        "sec-fetch-same-site",
        "referer-other-port",
    ],
)
def test_another_origin_cannot_drive_the_run(viewer_port: int, headers: dict[str, str]) -> None:
    port = viewer_port
    hdrs = {k: v.format(other=port + 1) for k, v in headers.items()}
    for path in ("/select?i=1", "/skip", "/control?op=pause", "/control?op=quit"):
        status, body = request(port, path, **hdrs)
        assert status == 403, (path, hdrs, status, body[:200])
    assert selected(port) == 0
    if "Origin" in hdrs:
        assert ws_upgrade(port, **hdrs) == 403


def test_the_page_itself_and_scripts_can_drive_the_run(viewer_port: int) -> None:
    port = viewer_port
    own = f"http://127.0.0.1:{port}"
    assert request(port, "/select?i=1", Origin=own, **{"Sec-Fetch-Site": "same-origin"})[0] == 200
    assert selected(port) == 1
    assert (
        request(port, "/select?i=0", Referer=own + "/")[0] == 200
    )  # an older browser: Referer only
    assert request(port, "/select?i=1")[0] == 200  # curl
    assert selected(port) == 1
    assert ws_upgrade(port, Origin=own) == 101


# -- item 9: idle connections and stream floods -----------------------------------------------------


def _closed_by_server(s: socket.socket) -> bool:
    try:
        while True:
            if not s.recv(65536):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_idle_connections_are_closed_after_the_idle_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Silent sockets, trickled headers, finished keep-alive requests and WebSockets that never
    answer a ping: every one is closed once the (shortened) idle bound has passed."""
    require("aiohttp")
    monkeypatch.setattr("rlmesh.view._http.IDLE_SECONDS", 0.5, raising=False)
    port = free_port()
    view = rlmesh.View("http", port=port)
    with rlmesh.session(
        Model(zero), CounterEnv(16, 16, cameras=1, episode_steps=5), view=view
    ) as sess:
        sess.run(max_episodes=1)
        host = f"127.0.0.1:{port}"
        socks: list[socket.socket] = []
        try:
            for i in range(40):
                s = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
                kind = i % 4
                if kind == 1:  # slowloris: half a header, never finished
                    s.sendall(f"GET /hud.json HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode())
                elif kind == 2:  # one request answered, then the keep-alive connection idles
                    s.sendall(f"GET /hud.json HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
                    assert s.recv(65536).startswith(b"HTTP/1.1 200")
                elif kind == 3:  # a tab that upgrades and then never reads nor answers pings
                    s.sendall(
                        (
                            f"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
                        ).encode()
                    )
                s.setblocking(False)
                socks.append(s)
            deadline = time.monotonic() + 20.0  # 40x the bound; the count below is the assertion
            open_now = len(socks)
            while time.monotonic() < deadline:
                open_now = sum(not _closed_by_server(s) for s in socks)
                if open_now == 0:
                    break
                time.sleep(0.2)
            assert open_now == 0, f"{open_now} of {len(socks)} idle connections were still open"
            assert request(port, "/hud.json")[0] == 200  # the viewer still serves
        finally:
            for s in socks:
                s.close()


def test_tabs_and_streams_beyond_the_cap_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    require("aiohttp")
    monkeypatch.setattr("rlmesh.view._http.MAX_STREAMS", 4, raising=False)
    port = free_port()
    view = rlmesh.View("http", port=port)
    with rlmesh.session(
        Model(zero), CounterEnv(16, 16, cameras=1, episode_steps=5), view=view
    ) as sess:
        sess.run(max_episodes=1)
        socks = []
        statuses = []
        try:
            for _ in range(10):
                s = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
                s.sendall(
                    f"GET /mjpeg?source=0 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
                )
                statuses.append(int(s.recv(4096).split(b" ", 2)[1]))
                socks.append(s)
        finally:
            for s in socks:
                s.close()
    assert statuses.count(200) == 4 and statuses.count(503) == 6, statuses
