"""The HTTP viewer during real runs: WebSocket push, reference routes, MJPEG, control, best effort (VIEW-9, VIEW-16..18).

Frames are counter-encoded (``rlmesh.view._synthetic``): the client decodes which
step each received picture shows, so the tests see drops, order and latency
without any wall-clock threshold.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import require
from rlmesh.numpy import Model
from rlmesh.view._synthetic import CounterEnv, read_counter

BOUND = 30.0  # seconds any single wait may take before the test fails


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def zero(obs: Any) -> Any:
    return np.zeros(2, np.float32)


def paced(obs: Any) -> Any:
    time.sleep(0.002)  # a policy that takes time, so a tab can keep up with a view fps
    return np.zeros(2, np.float32)


class RunInThread:
    """``rlmesh.run`` on a thread (the test thread is the browser tab)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._go, args=(fn,), daemon=True)
        self.thread.start()

    def _go(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as exc:
            self.error = exc

    def join(self) -> Any:
        self.thread.join(BOUND * 2)
        assert not self.thread.is_alive(), "the run did not finish"
        return self.result


def wait_port(port: int) -> None:
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"nothing listens on {port}")


def http_get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=BOUND)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def decode_jpeg(data: bytes) -> np.ndarray[Any, Any]:
    simplejpeg = require("simplejpeg")
    return np.asarray(simplejpeg.decode_jpeg(data, colorspace="RGB"))


async def ws_read(
    port: int,
    until: Callable[[list[Any], dict[str, Any]], bool],
    *,
    send: list[dict[str, Any]] | None = None,
    on_text: Callable[[dict[str, Any], Any], Any] | None = None,
    path: str = "/ws",
) -> tuple[list[Any], dict[str, Any]]:
    """Read frames (header, jpeg, receive time) and the newest JSON per type until ``until`` says so."""
    aiohttp = require("aiohttp")
    from rlmesh.view._http import FRAME_HEADER

    frames: list[Any] = []
    docs: dict[str, Any] = {}
    async with aiohttp.ClientSession() as cs, cs.ws_connect(f"http://127.0.0.1:{port}{path}") as ws:
        for doc in send or []:
            await ws.send_str(json.dumps(doc))
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline and not until(frames, docs):
            try:
                msg = await ws.receive(timeout=1.0)
            except asyncio.TimeoutError:
                continue
            if msg.type == aiohttp.WSMsgType.BINARY:
                frames.append(
                    (FRAME_HEADER.unpack_from(msg.data), msg.data[FRAME_HEADER.size :], time.time())
                )
            elif msg.type == aiohttp.WSMsgType.TEXT:
                doc = json.loads(msg.data)
                docs[doc["type"]] = doc
                if on_text is not None:
                    await on_text(doc, ws)
            else:
                break
    return frames, docs


def test_a_tab_reads_counter_frames_from_every_camera_in_order() -> None:
    """WebSocket push: JPEG markers, sizes, per-camera order, drop rate and latency (VIEW-16/18)."""
    require("aiohttp")
    port = free_port()
    env = CounterEnv(320, 240, cameras=2, episode_steps=150)
    run = RunInThread(
        lambda: rlmesh.run(
            Model(paced), env, max_episodes=2, view=rlmesh.View("http", port=port, fps=60)
        )
    )
    wait_port(port)
    frames, docs = asyncio.run(
        ws_read(port, lambda f, d: run.thread.is_alive() is False and len(f) > 0)
    )
    run.join()
    assert run.error is None
    assert docs["hello"]["sources"] == ["render", "cam0", "cam1"]
    by_cam: dict[int, list[int]] = {}
    latencies: list[float] = []
    for (kind, src, lane, _seq, stamp, w, h), data, recv in frames:
        assert kind == 1 and lane == 0
        assert data[:2] == b"\xff\xd8" and data[-2:] == b"\xff\xd9"  # a whole JPEG
        img = decode_jpeg(data)
        assert img.shape == (240, 320, 3)
        if w:  # the replay of the newest frame on connect carries no size
            assert (w, h) == (320, 240)
        n = read_counter(img)
        assert n in env.fed
        by_cam.setdefault(src, []).append(n)
        if stamp:
            latencies.append(recv - env.fed[n])
    assert set(by_cam) == {0, 1, 2}
    for counters in by_cam.values():
        assert counters == sorted(counters)  # never an older picture after a newer one
    shown = len(set(by_cam[0]))
    assert 0 < shown <= env.counter
    assert latencies and min(latencies) >= 0
    # the figures (drop rate, step-to-tab latency) are benchmarks/bench_view.py's to report


def test_reference_routes_mjpeg_and_404() -> None:
    """VIEW-16: /, /frame, /sources.json, /hud.json, /select, /skip, /episodes.json, /mjpeg, 404."""
    require("aiohttp")
    port = free_port()
    env = CounterEnv(64, 48, cameras=1, episode_steps=100_000)
    view = rlmesh.View("http", port=port, fps=30)
    with rlmesh.session(Model(paced), env, view=view) as sess:
        run = RunInThread(lambda: sess.run(max_episodes=2))
        wait_port(port)
        status, headers, body = http_get(port, "/?x=1")
        assert (
            status == 200
            and headers["content-type"].startswith("text/html")
            and b"rlmesh view" in body
        )
        deadline = time.monotonic() + BOUND
        body = b""
        while not body and time.monotonic() < deadline:
            status, headers, body = http_get(port, "/frame?t=123")
        assert status == 200 and headers["content-type"] == "image/jpeg" and body[:2] == b"\xff\xd8"
        assert json.loads(http_get(port, "/sources.json")[2]) == {
            "sources": ["render", "cam0"],
            "selected": 0,
            "lanes": 1,
            "lane": 0,
        }
        hud = json.loads(http_get(port, "/hud.json")[2])
        assert (
            hud["episode"] == 1
            and hud["episodes"] == 2
            and hud["width"] == 64
            and hud["height"] == 48
        )
        assert json.loads(http_get(port, "/select?i=1")[2]) == {"ok": True}
        assert json.loads(http_get(port, "/sources.json")[2])["selected"] == 1
        assert json.loads(http_get(port, "/select?i=9")[2]) == {
            "ok": True
        }  # out of range: ignored, still ok
        assert json.loads(http_get(port, "/sources.json")[2])["selected"] == 1
        status, _, body = http_get(port, "/nope")
        assert status == 404 and body == b"not found"
        # MJPEG: a multipart stream of JPEG parts
        with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as s:
            s.sendall(
                f"GET /mjpeg?source=0 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
            )  # its own Host (issue 28)
            buf = b""
            while buf.count(b"--rlmeshframe") < 2 and len(buf) < 10_000_000:
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        assert b"multipart/x-mixed-replace; boundary=rlmeshframe" in buf
        part = buf.split(b"--rlmeshframe", 2)[1]
        head, _, rest = part.partition(b"\r\n\r\n")
        assert b"Content-Type: image/jpeg" in head and rest[:2] == b"\xff\xd8"
        assert json.loads(http_get(port, "/skip")[2]) == {"ok": True}  # ends episode 1 ...
        deadline = time.monotonic() + BOUND
        while (
            json.loads(http_get(port, "/hud.json")[2])["episode"] != 2
            and time.monotonic() < deadline
        ):
            time.sleep(0.02)
        assert json.loads(http_get(port, "/skip")[2]) == {"ok": True}  # ... and episode 2
        result = run.join()
        eps = json.loads(http_get(port, "/episodes.json")[2])
    assert run.error is None
    assert [e.truncated for e in result.episodes] == [True, True]
    assert all(e.steps < 100_000 for e in result.episodes)
    assert eps["episodes"] == 2 and [r["outcome"] for r in eps["rows"]] == ["timeout", "timeout"]
    with pytest.raises(OSError):  # VIEW-10: the server stopped with the session
        socket.create_connection(("127.0.0.1", port), timeout=2.0).close()


def test_pause_single_step_skip_and_quit_over_the_socket() -> None:
    require("aiohttp")
    port = free_port()
    env = CounterEnv(32, 32, cameras=1, episode_steps=100_000)
    run = RunInThread(
        lambda: rlmesh.run(
            Model(zero), env, max_episodes=3, view=rlmesh.View("http", port=port, fps=50)
        )
    )
    wait_port(port)
    seen: dict[str, Any] = {"phase": "pause"}

    async def drive(doc: dict[str, Any], ws: Any) -> None:
        if doc["type"] != "hud":
            return
        phase = seen["phase"]
        if phase == "pause" and doc["step"] >= 1:  # the run is under way
            await ws.send_str(json.dumps({"op": "pause"}))
            seen["phase"] = "paused?"
        elif phase == "paused?" and doc["paused"]:
            seen["at"] = (doc["episode"], doc["step"])
            seen["counter"] = env.counter
            seen["phase"] = "confirm"
            seen["confirm"] = 0
            seen["moves"] = 0
        elif phase == "confirm":
            here = ((doc["episode"], doc["step"]), env.counter)
            if here != (seen["at"], seen["counter"]) and seen["moves"] == 0:
                # the pause is taken at the next step boundary: a HUD sent as the op arrived
                # may show the state before it, once
                seen["at"], seen["counter"] = here
                seen["moves"] = 1
                return
            assert here == (seen["at"], seen["counter"])  # blocked
            seen["confirm"] += 1
            if seen["confirm"] >= 3:
                await ws.send_str(json.dumps({"op": "step"}))
                seen["phase"] = "stepped?"
        elif phase == "stepped?" and doc["step"] == seen["at"][1] + 1 and doc["paused"]:
            assert env.counter == seen["counter"] + 1  # exactly one env step
            await ws.send_str(json.dumps({"op": "skip"}))
            seen["phase"] = "skipped?"
        elif phase == "skipped?" and doc["episode"] == seen["at"][0] + 1:
            assert doc["paused"]  # the next episode starts paused at its first step boundary
            await ws.send_str(json.dumps({"op": "quit"}))
            seen["phase"] = "quit"

    asyncio.run(
        ws_read(
            port, lambda f, d: seen["phase"] == "quit" or not run.thread.is_alive(), on_text=drive
        )
    )
    run.join()
    assert seen["phase"] == "quit"
    # quit ends the run with the finished episodes (episode 1, skipped), not an interrupt
    assert run.error is None
    assert run.result.num_episodes == 1 and run.result.episodes[0].truncated


def test_a_tab_that_never_reads_does_not_hold_up_the_run() -> None:
    """A stalled tab fills its socket and skips frames; the run and a live tab go on to the end."""
    require("aiohttp")
    port = free_port()
    env = CounterEnv(640, 480, cameras=1, episode_steps=400)
    done = threading.Event()
    run = RunInThread(
        lambda: (
            rlmesh.run(
                Model(paced),
                env,
                max_episodes=1,
                view=rlmesh.View("http", port=port, fps=200, quality=95),
            ),
            done.set(),
        )[0]
    )
    wait_port(port)
    stalled = socket.create_connection(("127.0.0.1", port), timeout=BOUND)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sendall(
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )  # ... and never reads again
    try:
        frames, _ = asyncio.run(ws_read(port, lambda f, d: done.is_set()))
        result = run.join()
    finally:
        stalled.close()
    assert run.error is None and result.total_steps == 400
    last = max(read_counter(decode_jpeg(data)) for _h, data, _t in frames)
    assert (
        last > env.counter // 2
    )  # the live tab kept up past the point the stalled one stopped reading


def test_a_port_in_use_is_a_warning_and_the_run_goes_on() -> None:
    require("aiohttp")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.warns(
            UserWarning, match=f"rlmesh view: HTTP backend failed to bind port {port}"
        ):
            result = rlmesh.run(
                Model(zero),
                CounterEnv(16, 16, episode_steps=5),
                max_episodes=2,
                view=rlmesh.View("http", port=port),
            )
    assert result.total_steps == 10


def test_a_token_is_required_when_one_is_set() -> None:
    require("aiohttp")
    port = free_port()
    view = rlmesh.View("http", port=port, token="s3cret")
    with rlmesh.session(Model(zero), CounterEnv(16, 16, episode_steps=5), view=view) as sess:
        sess.run(max_episodes=1)
        assert http_get(port, "/hud.json")[0] == 403
        assert http_get(port, "/?token=wrong")[0] == 403
        assert http_get(port, "/hud.json?token=s3cret")[0] == 200


def test_non_loopback_hosts_draw_a_token() -> None:
    from rlmesh.view._core import Viewer
    from rlmesh.view._http import HttpBackend, ssh_hint
    from rlmesh.view._sources import FrameSource

    require("aiohttp")
    v = Viewer([FrameSource("c", "leaf", "c", lambda o, lane: None)], fps=5)
    backend = HttpBackend(v, host="192.0.2.1", port=1)  # never started: only the token rule
    assert backend.token and len(backend.token) >= 16
    assert HttpBackend(v, host="127.0.0.1", port=1).token is None
    assert (
        ssh_hint(8123, {"SSH_CONNECTION": "a 1 b 22", "USER": "u"})
        == "ssh -L 8123:127.0.0.1:8123 u@b"
    )


def test_a_vector_env_streams_every_lane() -> None:
    gym = require("gymnasium")
    require("aiohttp")

    class Cam(gym.Env):  # type: ignore[misc]
        metadata = {"render_modes": ["rgb_array"]}
        render_mode = "rgb_array"

        def __init__(self) -> None:
            self.observation_space = gym.spaces.Box(0, 255, (24, 32, 3), np.uint8)
            self.action_space = gym.spaces.Discrete(2)
            self.t = 0

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            self.t = 0
            return np.zeros((24, 32, 3), np.uint8), {}

        def step(self, action: Any) -> Any:
            self.t += 1
            time.sleep(0.002)
            return np.full((24, 32, 3), self.t, np.uint8), 1.0, self.t >= 60, False, {}

        def render(self) -> Any:
            return np.full((24, 32, 3), 200, np.uint8)

    venv = gym.vector.SyncVectorEnv([Cam, Cam, Cam])
    port = free_port()
    run = RunInThread(
        lambda: rlmesh.run(
            rlmesh.RANDOM_SAMPLE, venv, max_episodes=6, view=rlmesh.View("http", port=port, fps=100)
        )
    )
    wait_port(port)
    frames, docs = asyncio.run(
        ws_read(
            port,
            lambda f, d: (
                {(h[1], h[2]) for h, _, _ in f} >= {(s, lane) for s in (0, 1) for lane in range(3)}
                or not run.thread.is_alive()
            ),
        )
    )
    run.join()
    assert run.error is None
    assert docs["hello"]["lanes"] == 3 and docs["hello"]["sources"] == ["render", "observation"]
    assert {(h[1], h[2]) for h, _, _ in frames} >= {(s, lane) for s in (0, 1) for lane in range(3)}


def test_a_served_env_shows_its_render_and_image_leaves_through_the_client(
    serve: Callable[..., Any],
) -> None:
    """VIEW-3/5 over a real connection: render(env_index=...) on the client, leaves from the contract."""
    require("aiohttp")
    server = serve(CounterEnv(48, 32, cameras=1, episode_steps=40))
    port = free_port()
    run = RunInThread(
        lambda: rlmesh.run(
            Model(paced),
            server.address,
            max_episodes=3,
            view=rlmesh.View("http", port=port, fps=100),
        )
    )
    wait_port(port)
    frames, docs = asyncio.run(
        ws_read(
            port,
            lambda f, d: {h[1] for h, _, _ in f if h[6]} >= {0, 1} or not run.thread.is_alive(),
        )
    )
    run.join()
    assert run.error is None
    assert docs["hello"]["sources"] == ["render", "cam0"]
    for (_k, _src, _l, _s, stamp, w, h), data, _t in frames:
        if stamp:
            assert (w, h) == (48, 32) and decode_jpeg(data).shape == (32, 48, 3)
    assert {h[1] for h, _, _ in frames if h[4]} >= {0, 1}


def test_cross_site_requests_are_refused() -> None:
    """Another web site cannot make the browser drive or watch the run (CSRF, cross-site WebSocket)."""
    import http.client

    require("aiohttp")
    port = free_port()
    with rlmesh.session(
        Model(zero), CounterEnv(16, 16, episode_steps=5), view=rlmesh.View("http", port=port)
    ) as sess:
        sess.run(max_episodes=1)

        def status(path: str, **headers: str) -> int:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=BOUND)
            try:
                conn.request("GET", path, headers=headers)
                return conn.getresponse().status
            finally:
                conn.close()

        assert status("/skip", **{"Sec-Fetch-Site": "cross-site"}) == 403
        assert status("/ws", Origin="https://evil.example") == 403
        assert status("/hud.json", Origin=f"http://127.0.0.1:{port}") == 200  # the page itself
        assert status("/hud.json", **{"Sec-Fetch-Site": "same-origin"}) == 200
        assert status("/hud.json") == 200  # curl, scripts
