"""``rlmesh view-test`` (alias ``viewtest``): a synthetic moving scene through the real viewer (CLI-1).

Tells renderer or TTY problems apart from frame-source problems: if this shows a
moving picture, the viewer works and a blank run is the env's camera.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..eval import View
from ..view import FrameSource, open_viewer
from ..view._synthetic import demo_frame

__all__ = ["main"]


class _Context:
    num_envs = 1
    contract = None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``rlmesh view-test``; returns the exit code (2 on bad --fps/--frames)."""
    p = argparse.ArgumentParser(
        prog="rlmesh view-test",
        description="Show a synthetic moving scene with the live viewer (terminal by default).",
    )
    p.add_argument(
        "--http",
        type=int,
        metavar="PORT",
        help="serve the browser page on PORT instead of the terminal",
    )
    p.add_argument("--both", action="store_true", help="terminal AND browser (with --http)")
    p.add_argument("--fps", type=int, default=30, help="frames per second (default 30)")
    p.add_argument("--frames", type=int, default=900, help="frames to show (default 900)")
    p.add_argument("--no-frames", action="store_true", help="HUD only, no picture")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address the page binds (non-loopback needs the printed token)",
    )
    args = p.parse_args(list(argv) if argv is not None else None)

    if args.fps < 1 or args.frames < 0:
        print("[viewtest] --fps must be >= 1 and --frames >= 0", file=sys.stderr)
        return 2
    backend = "terminal" if args.http is None else ("both" if args.both else "http")
    cfg = View(backend, port=args.http or 8008, fps=args.fps, quality=80, host=args.host)
    no_frames = bool(args.no_frames)

    def fetch(obs: Any, lane: int) -> Any:
        return None if no_frames else demo_frame(int(obs))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        viewer = open_viewer(
            cfg, _Context(), sources=[FrameSource("demo", "render", "render", fetch)]
        )
    messages = [str(w.message) for w in caught]
    for m in messages:
        print(f"[viewtest] WARNING: {m}", file=sys.stderr)
    if messages:
        try:
            Path("viewtest.warnings").write_text("\n".join(messages) + "\n")
        except OSError:
            pass
    if viewer is None:
        print("[viewtest] no viewer backend could start.", file=sys.stderr)
        return 1
    period = 1.0 / args.fps
    ret = 0.0
    try:
        viewer.begin_episode(0, 0, 1, 0)
        hud = viewer.hud
        for t in range(1, args.frames + 1):
            time.sleep(period)
            chunk = (t % 8) + 1
            ret += 0.01
            viewer.step(
                t, t, ret, 0.01, 60.0 + 25.0 * abs(((t * 7) % 20) / 10.0 - 1.0), 12.0 + (t % 7)
            )
            hud.chunk_pos, hud.chunk_len = chunk, 8
            hud.outcome = "running"
    except KeyboardInterrupt:
        pass
    finally:
        viewer.close()
    print("[viewtest] done.")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
