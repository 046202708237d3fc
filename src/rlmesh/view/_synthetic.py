"""Synthetic scenes: the ``rlmesh view-test`` picture (CLI-1) and counter-encoded frames for tests and benchmarks.

:func:`counter_frame` paints a frame number as 24 black/white blocks in the top
band of an image (robust to JPEG at any quality >= 20); :func:`read_counter`
decodes it back, so a client that receives a frame knows exactly which step it
shows, hence the drop rate and the step-to-page latency.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..spaces import Box, Dict

__all__ = ["COUNTER_BITS", "CounterEnv", "counter_frame", "demo_frame", "read_counter"]

COUNTER_BITS = 24


def demo_frame(t: int, width: int = 240, height: int = 180) -> np.ndarray[Any, Any]:
    """A moving sinusoidal gradient with a bouncing 48x48 white box with a dark border (CLI-1)."""
    y = np.arange(height, dtype=np.float32)[:, None]
    x = np.arange(width, dtype=np.float32)[None, :]
    phase = t * 0.08
    r = 127.5 + 127.5 * np.sin(x / 23.0 + phase)
    g = 127.5 + 127.5 * np.sin(y / 17.0 - phase * 0.7)
    b = 127.5 + 127.5 * np.sin((x + y) / 31.0 + phase * 1.3)
    img = np.stack(np.broadcast_arrays(r, g, b), axis=-1).astype(np.uint8)
    box = 48
    span_x, span_y = max(1, width - box), max(1, height - box)
    bx = abs((t * 3) % (2 * span_x) - span_x)
    by = abs((t * 2) % (2 * span_y) - span_y)
    img[by : by + box, bx : bx + box] = 30
    img[by + 3 : by + box - 3, bx + 3 : bx + box - 3] = 255
    return img


def counter_frame(
    n: int, width: int = 640, height: int = 480, *, seed: int = 0
) -> np.ndarray[Any, Any]:
    """An RGB frame whose top band encodes ``n`` (mod ``2**24``) in blocks; the rest is a gradient."""
    img = np.empty((height, width, 3), np.uint8)
    img[:] = (np.arange(width, dtype=np.uint32)[None, :, None] * 255 // max(1, width - 1)).astype(
        np.uint8
    )
    img[:, :, 1] = (seed * 40 + n) % 256
    block = max(4, width // COUNTER_BITS)
    band = min(height, max(8, block))
    img[:band] = 0
    for bit in range(COUNTER_BITS):
        if (n >> bit) & 1:
            img[:band, bit * block : (bit + 1) * block] = 255
    return img


def read_counter(img: np.ndarray[Any, Any]) -> int:
    """The number :func:`counter_frame` painted into ``img`` (decoded from block centres)."""
    width = img.shape[1]
    block = max(4, width // COUNTER_BITS)
    band = min(img.shape[0], max(8, block))
    y = band // 2
    n = 0
    for bit in range(COUNTER_BITS):
        x = bit * block + block // 2
        if int(np.asarray(img[y, x]).mean()) >= 128:
            n |= 1 << bit
    return n


class CounterEnv:
    """A gymnasium-shaped env whose every observation and ``render()`` frame carries a step counter.

    ``cameras`` image observation leaves (``cam0``, ``cam1``...) each show the
    global counter; ``render()`` shows it too. ``fed[n]`` is the ``time.time()``
    at which frame ``n`` was produced, so a client can measure latency.
    """

    render_mode = "rgb_array"
    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}

    def __init__(
        self, width: int = 640, height: int = 480, *, cameras: int = 1, episode_steps: int = 1000
    ) -> None:
        self.width, self.height, self.cameras = width, height, cameras
        self.episode_steps = episode_steps
        self.observation_space = Dict(
            {f"cam{i}": Box(0, 255, (height, width, 3), "uint8") for i in range(cameras)}
            | {"t": Box(0.0, 1e9, (1,), "float32")}
        )
        self.action_space = Box(-1.0, 1.0, (2,), "float32")
        self.counter = 0
        self.t = 0
        self.fed: dict[int, float] = {}
        self._frames = [counter_frame(0, width, height, seed=i) for i in range(cameras)]

    def _obs(self) -> dict[str, Any]:
        self.counter += 1
        n = self.counter
        self.fed[n] = time.time()
        self._frames = [
            counter_frame(n, self.width, self.height, seed=i) for i in range(self.cameras)
        ]
        obs: dict[str, Any] = {f"cam{i}": f for i, f in enumerate(self._frames)}
        obs["t"] = np.array([self.t], np.float32)
        return obs

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        done = self.t >= self.episode_steps
        return self._obs(), 1.0, done, False, {"success": True} if done else {}

    def render(self) -> np.ndarray[Any, Any]:
        return self._frames[0]

    def close(self) -> None:
        pass
