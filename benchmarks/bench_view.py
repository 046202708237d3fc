"""Live viewer cost (issue 14): what the viewer costs the run's thread, and how fast a step reaches a tab.

For each case a session drives a cheap env (precomputed 640x480 frames, so the
viewer's cost is not hidden behind the env's) with and without ``view="http"``
at 30 fps, while 1 or 10 tabs (WebSocket clients in a separate process, like a
browser) read every pushed frame. Reported per case:

- ``hook us/step``: wall time spent inside the viewer's hook on the run's thread,
  per step (the throttled fetch included);
- ``wall us/step``: run wall time per step with the viewer minus without (the hook
  plus any GIL contention from the encoder and the server threads);
- ``latency p50/p95``: from the frame's grab on the run's thread (right after the
  env step) to its arrival in the tab, in ms;
- ``frames/s``: frames a tab received per second, per camera;
- ``cpu%``: the run process's CPU (all its threads) without / with the viewer.

Usage: ``python benchmarks/bench_view.py [--steps N] [--repeat R]``. On a shared
machine only the same-run comparison means anything.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import rlmesh
from rlmesh.numpy import Model
from rlmesh.spaces import Box, Dict
from rlmesh.view import _core
from rlmesh.view._synthetic import demo_frame

CLIENT = r"""
import asyncio, json, sys, time
import aiohttp
port, tabs = int(sys.argv[1]), int(sys.argv[2])
HDR = 20
lat, counts = [], [0] * tabs
async def tab(i):
    async with aiohttp.ClientSession() as cs:
        for _ in range(300):
            try:
                ws = await cs.ws_connect(f"http://127.0.0.1:{port}/ws", max_msg_size=1 << 26)
                break
            except Exception:
                await asyncio.sleep(0.05)
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY:
                now = time.time()
                import struct
                stamp = struct.unpack_from("<d", msg.data, 8)[0]
                if stamp:
                    counts[i] += 1
                    if i == 0:
                        lat.append(now - stamp)
            elif msg.type != aiohttp.WSMsgType.TEXT:
                break
async def main():
    await asyncio.gather(*(tab(i) for i in range(tabs)))
asyncio.run(main())
print(json.dumps({"lat": lat, "counts": counts}))
"""


class FastCams:
    """``cameras`` image leaves (and ``render``) of precomputed 640x480 frames; stepping is nearly free."""

    render_mode = "rgb_array"
    metadata: dict[str, Any] = {}

    def __init__(self, cameras: int) -> None:
        # a smooth synthetic scene (a rendered frame encodes in ~3 ms; random noise would take ~19 ms)
        self.frames = [
            np.ascontiguousarray(np.repeat(np.repeat(demo_frame(40 * i), 3, 0), 3, 1)[:480, :640])
            for i in range(max(1, cameras))
        ]
        self.cameras = cameras
        self.observation_space = Dict(
            {f"cam{i}": Box(0, 255, (480, 640, 3), "uint8") for i in range(cameras)}
            or {"x": Box(0, 1, (1,))}
        )
        self.action_space = Box(-1.0, 1.0, (2,), "float32")
        self.obs = {f"cam{i}": self.frames[i] for i in range(cameras)} or {
            "x": np.zeros(1, np.float32)
        }

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return self.obs, {}

    sleep = 0.0

    def step(self, action: Any) -> Any:
        if self.sleep:
            time.sleep(self.sleep)  # a simulator / remote env: the GIL is free while it works
        return self.obs, 0.0, False, False, {}

    def render(self) -> Any:
        return self.frames[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ACTION = np.zeros(2, np.float32)


def policy(obs: Any) -> Any:
    return ACTION


def one(cameras: int, tabs: int, seconds: float, env_ms: float) -> dict[str, float]:
    env = FastCams(cameras)
    env.sleep = env_ms / 1e3
    # render is the first source; with cameras=4 the page gets render + 3 leaves = 4 cameras
    if cameras > 1:
        env.observation_space = Dict(
            {f"cam{i}": Box(0, 255, (480, 640, 3), "uint8") for i in range(cameras - 1)}
        )
        env.obs = {f"cam{i}": env.frames[i + 1] for i in range(cameras - 1)}
    else:
        env.observation_space = Dict({"x": Box(0.0, 1.0, (1,))})
        env.obs = {"x": np.zeros(1, np.float32)}
    with rlmesh.session(Model(policy), env) as sess:  # baseline: no viewer
        sess.run(max_episodes=1, max_episode_steps=200)
        c0, t0 = time.process_time(), time.perf_counter()
        steps = sess.run(max_episodes=1, max_episode_seconds=seconds).total_steps
        base = (time.perf_counter() - t0) / steps
        base_cpu = (time.process_time() - c0) / (time.perf_counter() - t0)
    port = free_port()
    hook = [0.0]
    orig = _core.Viewer.step

    def timed(self: Any, *a: Any) -> bool:
        t = time.perf_counter()
        r = orig(self, *a)
        hook[0] += time.perf_counter() - t
        return r

    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, str(port), str(tabs)], stdout=subprocess.PIPE, text=True
    )
    try:
        with rlmesh.session(
            Model(policy), env, view=rlmesh.View("http", port=port, fps=30)
        ) as sess:
            sess.run(max_episodes=1, max_episode_steps=200)  # starts the viewer
            http = next(b for b in sess._viewer.backends if b.name == "http")
            deadline = time.monotonic() + 30
            while len(http.clients) < tabs and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.3)
            _core.Viewer.step = timed  # type: ignore[method-assign]
            try:
                c0, t0 = time.process_time(), time.perf_counter()
                steps = sess.run(max_episodes=1, max_episode_seconds=seconds).total_steps
                wall = time.perf_counter() - t0
                view_cpu = (time.process_time() - c0) / wall
            finally:
                _core.Viewer.step = orig  # type: ignore[method-assign]
            time.sleep(0.3)
        out, _ = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
    doc = json.loads(out.strip().splitlines()[-1])
    lat = np.array(doc["lat"]) * 1e3
    seconds = wall + 0.5
    return {
        "base_us": base * 1e6,
        "wall_us": wall / steps * 1e6,
        "hook_us": hook[0] / steps * 1e6,
        "lat_p50": float(np.percentile(lat, 50)) if lat.size else float("nan"),
        "lat_p95": float(np.percentile(lat, 95)) if lat.size else float("nan"),
        "fps_per_cam": min(doc["counts"]) / max(1, cameras) / seconds,
        "cpu_base": 100 * base_cpu,
        "cpu_view": 100 * view_cpu,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--seconds", type=float, default=4.0, help="length of each timed run")
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args(argv)
    cases = [("1 camera, 1 tab", 1, 1), ("4 cameras, 1 tab", 4, 1), ("1 camera, 10 tabs", 1, 10)]
    print(f"viewer at 30 fps, 640x480 JPEG q75, {args.seconds:g} s per run, cpus={os.cpu_count()}")
    print(
        f"{'env step':<9} {'case':<18} {'no view us/step':>15} {'view us/step':>13} {'extra us':>9} {'hook us':>8} {'p50 ms':>7} {'p95 ms':>7} {'fps/cam':>8} {'cpu% off/on':>12}"
    )
    for env_ms in (0.0, 1.0):
        for label, cams, tabs in cases:
            for _ in range(args.repeat):
                r = one(cams, tabs, args.seconds, env_ms)
                print(
                    f"{'free' if not env_ms else f'{env_ms:g} ms':<9} {label:<18} {r['base_us']:>15.1f} {r['wall_us']:>13.1f} {r['wall_us'] - r['base_us']:>9.1f} "
                    f"{r['hook_us']:>8.1f} {r['lat_p50']:>7.1f} {r['lat_p95']:>7.1f} {r['fps_per_cam']:>8.1f} {r['cpu_base']:>6.0f}/{r['cpu_view']:<5.0f}",
                    flush=True,
                )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
