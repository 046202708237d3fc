"""A real browser on the HTTP viewer: headless Chromium loads the page during a run (VIEW-16/17, issue 14).

Chromium (Debian ``chromium``) is driven over the DevTools protocol with aiohttp's
WebSocket client: no browser download, no Playwright. The test checks that the
picture is not blank, that the HUD text and the episode table are there, and saves
the screenshot that ``docs/viewer.md`` shows.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import require, require_tool
from rlmesh.numpy import Model

pytestmark = pytest.mark.e2e

BOUND = 90.0
DOCS = Path(__file__).resolve().parents[2] / "docs"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,860",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Arm:
    """A toy 'robot arm' scene: a gradient floor, a moving target and a gripper, reward by distance."""

    render_mode = "rgb_array"
    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}

    def __init__(self) -> None:
        from rlmesh.spaces import Box

        self.observation_space = Box(-1.0, 1.0, (4,), "float32")
        self.action_space = Box(-1.0, 1.0, (2,), "float32")
        self.t = 0
        self.pos = np.zeros(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        self.rng = np.random.default_rng(seed)
        self.goal = self.rng.uniform(-0.8, 0.8, 2)
        self.pos = np.zeros(2)
        return self._obs(), {}

    def _obs(self) -> Any:
        return np.concatenate([self.pos, self.goal]).astype(np.float32)

    def step(self, action: Any) -> Any:
        time.sleep(0.01)
        self.t += 1
        self.pos = np.clip(self.pos + 0.05 * np.asarray(action, dtype=np.float64), -1, 1)
        dist = float(np.linalg.norm(self.pos - self.goal))
        done = dist < 0.08
        return self._obs(), -dist, done, self.t >= 150, {"success": done}

    def render(self) -> Any:
        h, w = 360, 480
        img = np.zeros((h, w, 3), np.uint8)
        img[:, :, 0] = np.linspace(20, 60, w, dtype=np.uint8)[None, :]
        img[:, :, 2] = np.linspace(40, 110, h, dtype=np.uint8)[:, None]

        def px(p: Any) -> tuple[int, int]:
            return int((p[1] + 1) / 2 * (h - 1)), int((p[0] + 1) / 2 * (w - 1))

        gy, gx = px(self.goal)
        img[max(0, gy - 10) : gy + 10, max(0, gx - 10) : gx + 10] = (60, 220, 90)
        y, x = px(self.pos)
        img[max(0, y - 8) : y + 8, max(0, x - 8) : x + 8] = (250, 200, 40)
        img[h // 2, :] = img[:, w // 2] = (90, 90, 90)
        return img


def policy(obs: Any) -> Any:
    direction = obs[2:] - obs[:2]
    return np.clip(direction * 1.5 + np.random.default_rng().normal(0, 0.6, 2), -1, 1).astype(
        np.float32
    )


async def _cdp(ws_url: str, page_url: str) -> tuple[str, str, bytes]:
    aiohttp = require("aiohttp")
    async with aiohttp.ClientSession() as cs, cs.ws_connect(ws_url, max_msg_size=64 << 20) as ws:
        ids = iter(range(1, 10_000))

        async def call(method: str, **params: Any) -> Any:
            i = next(ids)
            await ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
            while True:
                msg = json.loads((await ws.receive(timeout=BOUND)).data)
                if msg.get("id") == i:
                    if "error" in msg:
                        raise AssertionError(f"{method}: {msg['error']}")
                    return msg.get("result", {})

        async def evaluate(expr: str) -> Any:
            return (await call("Runtime.evaluate", expression=expr, returnByValue=True))[
                "result"
            ].get("value")

        await call("Page.enable")
        await call("Page.navigate", url=page_url)
        deadline = time.monotonic() + BOUND
        frames, rows = 0, 0
        while time.monotonic() < deadline:  # wait for pictures and at least two finished episodes
            frames = int(await evaluate("window.rlmeshFrames || 0"))
            rows = int(await evaluate("document.querySelectorAll('#eps tbody tr').length"))
            if frames >= 10 and rows >= 2:
                break
            await asyncio.sleep(0.2)
        assert frames >= 10, f"the page received {frames} frames"
        hud = str(await evaluate("document.getElementById('hud').textContent"))
        rate = str(await evaluate("document.getElementById('rate').textContent"))
        shot = await call("Page.captureScreenshot", format="png")
        return hud, rate, base64.b64decode(shot["data"])


def test_headless_chromium_shows_the_picture_and_the_hud() -> None:
    require("aiohttp")
    pil = require("PIL.Image")
    chromium = (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or require_tool("chromium", "the browser test")
    )
    port = free_port()
    profile = tempfile.mkdtemp(prefix="rlmesh-chromium-")
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            # long enough for any browser start-up; the test quits it from the page's route
            result["run"] = rlmesh.run(
                Model(policy),
                Arm(),
                seeds=list(range(5000)),
                view=rlmesh.View("http", port=port, fps=20),
            )
        except BaseException as exc:
            result["error"] = exc

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    browser = subprocess.Popen(
        [chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        active = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + BOUND
        while not (active.exists() and active.read_text().strip()) and time.monotonic() < deadline:
            assert browser.poll() is None, "chromium exited"
            time.sleep(0.1)
        devtools_port = int(active.read_text().split()[0])
        import urllib.request

        targets = json.loads(
            urllib.request.urlopen(
                f"http://127.0.0.1:{devtools_port}/json/list", timeout=BOUND
            ).read()
        )
        page = next(t for t in targets if t.get("type") == "page")
        hud, rate, png = asyncio.run(
            _cdp(page["webSocketDebuggerUrl"], f"http://127.0.0.1:{port}/")
        )
        urllib.request.urlopen(f"http://127.0.0.1:{port}/control?op=quit", timeout=BOUND).read()
    finally:
        os.killpg(browser.pid, signal.SIGTERM)
        try:
            browser.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(browser.pid, signal.SIGKILL)
        shutil.rmtree(profile, ignore_errors=True)
        runner.join(BOUND)
    assert not runner.is_alive()
    assert (
        result.get("error") is None and "run" in result
    )  # the quit above ends the run with its RunResult
    assert "step " in hud and "model " in hud and "steps/s" in hud and "480x360" in hud
    assert "ep " in hud and "seed " in hud
    assert "episodes" in rate or "%" in rate
    shot = np.asarray(pil.open(io.BytesIO(png)).convert("RGB"))
    assert shot.shape[0] > 400 and shot.shape[1] > 800
    # the main picture: the stage's pixels vary (not a blank/black box) and show the scene's colours
    stage = shot[120:480, 20:700]
    assert stage.std() > 20
    yellow = (stage[:, :, 0] > 200) & (stage[:, :, 1] > 150) & (stage[:, :, 2] < 100)
    assert yellow.sum() > 20  # the gripper made it to the page
    if (
        os.environ.get("RLMESH_UPDATE_SCREENSHOTS") == "1"
    ):  # refresh docs/viewer-browser.png on request only
        (DOCS / "viewer-browser.png").write_bytes(png)  # (a test run leaves the checkout clean)


async def _probe_small_camera(ws_url: str, page_url: str) -> dict[str, Any]:
    aiohttp = require("aiohttp")
    async with aiohttp.ClientSession() as cs, cs.ws_connect(ws_url, max_msg_size=64 << 20) as ws:
        ids = iter(range(1, 10_000))

        async def call(method: str, **params: Any) -> Any:
            i = next(ids)
            await ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
            while True:
                msg = json.loads((await ws.receive(timeout=BOUND)).data)
                if msg.get("id") == i:
                    if "error" in msg:
                        raise AssertionError(f"{method}: {msg['error']}")
                    return msg.get("result", {})

        async def evaluate(expr: str) -> Any:
            return (await call("Runtime.evaluate", expression=expr, returnByValue=True))[
                "result"
            ].get("value")

        await call("Page.enable")
        await call("Page.navigate", url=page_url)
        deadline = time.monotonic() + BOUND
        got: dict[str, Any] = {}
        while time.monotonic() < deadline:
            got = (
                await evaluate(  # None until the page has loaded (the expression throws)
                    "({scale: window.rlmeshMainScale || 0,"
                    " w: document.getElementById('main').getBoundingClientRect().width,"
                    " h: document.getElementById('main').getBoundingClientRect().height,"
                    " rendering: document.getElementById('main').style.imageRendering,"
                    " legend: [...document.querySelectorAll('#action .legend text')].map(t => t.textContent),"
                    " axes: document.querySelectorAll('#action .axes line, #reward .axes line').length,"
                    " rewardLegend: [...document.querySelectorAll('#reward .legend text')].map(t => t.textContent)})"
                )
                or {}
            )
            if got.get("scale") and got.get("legend"):
                break
            await asyncio.sleep(0.2)
        return got


def test_a_small_camera_fills_the_panel_by_whole_pixels_and_the_plots_have_axes_and_legends() -> (
    None
):
    require("aiohttp")
    chromium = (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or require_tool("chromium", "the browser test")
    )
    from rlmesh.view._synthetic import CounterEnv

    port = free_port()
    profile = tempfile.mkdtemp(prefix="rlmesh-chromium-")
    result: dict[str, Any] = {}

    def paced(obs: Any) -> Any:
        time.sleep(0.01)
        return np.array([0.5, -0.25], np.float32)

    def run() -> None:
        try:
            result["run"] = rlmesh.run(Model(paced), CounterEnv(32, 24, cameras=1, episode_steps=100_000), max_episodes=1,
                                       view=rlmesh.View("http", port=port, fps=20))  # fmt: skip
        except BaseException as exc:
            result["error"] = exc

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    browser = subprocess.Popen(
        [chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        active = Path(profile) / "DevToolsActivePort"
        deadline = time.monotonic() + BOUND
        while not (active.exists() and active.read_text().strip()) and time.monotonic() < deadline:
            assert browser.poll() is None, "chromium exited"
            time.sleep(0.1)
        devtools_port = int(active.read_text().split()[0])
        targets = json.loads(
            urllib.request.urlopen(
                f"http://127.0.0.1:{devtools_port}/json/list", timeout=BOUND
            ).read()
        )
        page = next(t for t in targets if t.get("type") == "page")
        got = asyncio.run(
            _probe_small_camera(page["webSocketDebuggerUrl"], f"http://127.0.0.1:{port}/")
        )
    finally:
        try:  # always end the run: a run left going would keep a thread in this process for the tests after
            urllib.request.urlopen(f"http://127.0.0.1:{port}/control?op=quit", timeout=BOUND).read()
        except OSError:
            pass
        os.killpg(browser.pid, signal.SIGTERM)
        try:
            browser.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(browser.pid, signal.SIGKILL)
        shutil.rmtree(profile, ignore_errors=True)
        runner.join(BOUND)
    assert not runner.is_alive() and result.get("error") is None
    assert got["scale"], got
    scale = got["scale"]
    assert scale >= 2 and scale == int(scale)  # scaled up by whole pixels
    assert (got["w"], got["h"]) == (32 * scale, 24 * scale)  # aspect kept
    assert got["rendering"] == "pixelated"  # nearest-neighbour
    assert got["legend"] == ["a[0]", "a[1]"] and got["rewardLegend"] == ["reward per step"]
    assert got["axes"] >= 4  # x and y axes on both plots
