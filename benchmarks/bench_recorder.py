"""Benchmark: the Recorder's encoded frames per second and the run's slowdown with a camera.

Scenarios (one env with an rgb ``render()``, driven by ``rlmesh.run(RANDOM_SAMPLE, ...)``
with ``rec.capture(cameras=["render"])`` hooks, then ``rec.export``):

- ``encode``: an env that costs nothing per step, so the run is as fast as the recorder
  lets it be; encoded fps = frames / (run + export wall time), for 224x224 and 640x480.
  Each measurement first runs a 10-step warm-up episode into the same recorder, so
  one-off start-up (the encoder process, imports) is not counted, for either side.
- ``slowdown``: an env whose step burns ``--step-ms`` of CPU (a simulator's step and
  render); the run's wall time with one 224x224 camera recorded versus ``cameras=[]``.

Only the public API shared with the reference is used (``rlmesh.recorder.Recorder``,
``capture``, ``rlmesh.run``, ``export``), so the same file runs under the reference's
venv: ``--peer /tmp/peer`` (from ``../shared/bench/setup_peer.sh``) runs each measurement
there too, alternating A/B within one invocation (only same-run ratios mean anything on
a shared machine).

Run: ``python benchmarks/bench_recorder.py [--frames N] [--reps R] [--step-ms MS] [--peer DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Args:
    frames: int = 300
    """Frames (= env steps, one episode) per encode measurement."""
    peer_frames: int = 60
    """Frames per measurement under the reference (it encodes ~20 fps)."""
    reps: int = 3
    """Repetitions per scenario (the median is reported)."""
    step_ms: float = 10.0
    """CPU time one env step burns in the slowdown scenario (a simulator step + render)."""
    slow_steps: int = 300
    """Steps per slowdown measurement."""
    peer: str = ""
    """Venv of the reference implementation (``/tmp/peer``); empty = ours only."""


def frames_for(h: int, w: int, n: int = 30) -> list[np.ndarray]:
    """``n`` distinct render frames: gradients, a moving box and mild texture (a plausible sim render)."""
    rng = np.random.default_rng(0)
    y = np.linspace(30, 200, h, dtype=np.float32)[:, None, None]
    x = np.linspace(30, 220, w, dtype=np.float32)[None, :, None]
    base = (y * np.array([1.0, 0.6, 0.3]) + x * np.array([0.2, 0.5, 0.8])) / 1.6
    base = base + rng.normal(0, 6, (h, w, 3))
    out = []
    for t in range(n):
        img = base.copy()
        s = max(8, h // 6)
        r0, c0 = (h // 2 + int(h / 4 * np.sin(t / 5))) % (h - s), (t * w // n) % (w - s)
        img[r0 : r0 + s, c0 : c0 + s] = (230, 80, 60)
        out.append(np.clip(img, 0, 255).astype(np.uint8))
    return out


class RenderEnv:
    """One episode of ``length`` steps; ``render()`` cycles precomputed frames; steps burn ``step_ms``."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}
    render_mode = "rgb_array"

    def __init__(self, frames: list[np.ndarray], length: int, step_ms: float = 0.0) -> None:
        import gymnasium as gym

        self.frames = frames
        self.length = length
        self.step_s = step_ms / 1e3
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.obs = np.zeros(4, np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.t = 0
        return self.obs, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.step_s:
            end = time.perf_counter() + self.step_s
            while time.perf_counter() < end:  # CPU-bound, like a simulator
                pass
        self.t += 1
        return self.obs, 1.0, self.t >= self.length, False, {}

    def render(self) -> np.ndarray:
        return self.frames[self.t % len(self.frames)]


def measure(h: int, w: int, steps: int, step_ms: float, record: bool) -> dict[str, float]:
    """One recorded (or metrics-only) episode after a 10-step warm-up episode with the same
    recorder (one-off start-up costs excluded): run seconds and run+export seconds."""
    import rlmesh
    from rlmesh.recorder import Recorder

    frames = frames_for(h, w)
    tmp = tempfile.mkdtemp(prefix="rlmesh-bench-rec-")
    try:
        rec = Recorder(fps=30, quality=60)
        hooks = rec.capture(model="bench", env="render", cameras=["render"] if record else [])
        env = RenderEnv(frames, 10, step_ms)
        with rlmesh.session(rlmesh.RANDOM_SAMPLE, env) as sess:
            sess.run(seeds=[0], hooks=hooks)
            env.length = steps
            t0 = time.perf_counter()
            sess.run(seeds=[1], hooks=hooks)
            t1 = time.perf_counter()
        rec.export(os.path.join(tmp, "bundle"))
        t2 = time.perf_counter()
        rec.close()
        return {"run_s": t1 - t0, "total_s": t2 - t0}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def child_main(spec: str) -> None:
    """``--child JSON``: one measurement, printed as JSON (used to run under the peer venv)."""
    import warnings

    warnings.simplefilter("ignore")
    kw = json.loads(spec)
    print(json.dumps(measure(**kw)))


def run_in(python: str, **kw: Any) -> dict[str, float]:
    out = subprocess.run(
        [python, __file__, "--child", json.dumps(kw)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "RLMESH_WORKFLOW_EDITION": "", "SVT_LOG": "1"},
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in vars(Args()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.child:
        child_main(ns.child)
        return
    args = Args(**{k: v for k, v in vars(ns).items() if k != "child"})
    impls = {"ours": sys.executable}
    if args.peer:
        impls["reference"] = str(Path(args.peer) / "bin" / "python")

    print(f"encoded frames per second (one camera, run + export; median of {args.reps})")
    enc: dict[tuple[str, str], float] = {}
    for h, w in ((224, 224), (480, 640)):
        samples: dict[str, list[float]] = {k: [] for k in impls}
        for _ in range(args.reps):
            for name, python in impls.items():
                n = args.frames if name == "ours" else args.peer_frames
                r = run_in(python, h=h, w=w, steps=n, step_ms=0.0, record=True)
                samples[name].append(n / r["total_s"])
        for name, vals in samples.items():
            enc[(name, f"{w}x{h}")] = statistics.median(vals)
            print(
                f"  {name:9s} {w}x{h}: {statistics.median(vals):8.1f} fps  (samples {', '.join(f'{v:.1f}' for v in vals)})"
            )
        if "reference" in impls:
            ratio = enc[("ours", f"{w}x{h}")] / enc[("reference", f"{w}x{h}")]
            print(f"  speedup {w}x{h}: {ratio:.1f}x")

    print(
        f"\nrun slowdown, one 224x224 camera, env step = {args.step_ms} ms CPU, {args.slow_steps} steps"
    )
    for name, python in impls.items():
        steps = args.slow_steps if name == "ours" else min(args.slow_steps, args.peer_frames)
        base, recd = [], []
        for _ in range(args.reps):
            base.append(
                run_in(python, h=224, w=224, steps=steps, step_ms=args.step_ms, record=False)[
                    "run_s"
                ]
            )
            recd.append(
                run_in(python, h=224, w=224, steps=steps, step_ms=args.step_ms, record=True)[
                    "run_s"
                ]
            )
        b, r = statistics.median(base), statistics.median(recd)
        print(
            f"  {name:9s} metrics only {b * 1e3 / steps:7.2f} ms/step, recording {r * 1e3 / steps:7.2f} ms/step: "
            f"slowdown {100 * (r / b - 1):+.1f}%"
        )


if __name__ == "__main__":
    main()
