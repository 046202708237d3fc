"""``rlmesh export BUNDLE --lerobot PATH``: a result bundle as a LeRobot dataset (``ResultSet.to_lerobot``).

Exit 0 on success, 1 on an error (one line; ``--verbose`` for the traceback), 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from ..recorder import ResultSet

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rlmesh export",
        description="Convert a recorded result bundle (folder or .zip) to another format.",
    )
    p.add_argument(
        "bundle", metavar="BUNDLE", help="a bundle written by Recorder.export (a folder or a .zip)"
    )
    p.add_argument("--lerobot", required=True, metavar="PATH",
                   help="write a LeRobot dataset to PATH (a new or empty folder); needs the lerobot extra")  # fmt: skip
    p.add_argument("--lerobot-version", default="v3.0", choices=["v3.0", "v2.1"],
                   help="the LeRobot dataset layout (default: v3.0, what current LeRobot reads)")  # fmt: skip
    p.add_argument(
        "--fps", type=float, default=None, help="the dataset's fps (default: the recording's)"
    )
    p.add_argument(
        "--robot-type", default=None, help="robot_type in meta/info.json (default: null)"
    )
    p.add_argument(
        "--verbose", action="store_true", help="print the traceback on error (default: one line)"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``rlmesh export``; returns the process exit code."""
    try:
        args = _parser().parse_args(None if argv is None else list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        out = ResultSet.load(args.bundle).to_lerobot(
            args.lerobot, fps=args.fps, robot_type=args.robot_type, version=args.lerobot_version
        )
    except Exception as exc:
        if args.verbose:
            traceback.print_exc()
        else:
            print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"LeRobot {args.lerobot_version} dataset written to {out}")
    return 0
