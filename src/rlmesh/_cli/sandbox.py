"""``rlmesh sandbox prune [--dry-run] [--venvs-only | --docker-only]``: remove the sandbox caches rlmesh made.

What counts as rlmesh's, and what is left alone, is :func:`rlmesh.sandbox._prune.prune`'s to say.
Exit 0, or 1 when something could not be removed (2: bad arguments).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..sandbox._prune import prune

__all__ = ["main"]


def main(argv: Sequence[str]) -> int:
    """``rlmesh sandbox prune [--dry-run] [--venvs-only | --docker-only]``."""
    p = argparse.ArgumentParser(prog="rlmesh sandbox", description="Manage sandbox caches.")
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser(
        "prune",
        help="remove cached sandbox venvs, images and stopped containers rlmesh made",
        description="Remove the sandbox venvs (in $RLMESH_SANDBOX_CACHE), Docker images and stopped "
        "containers rlmesh created. Anything it did not create is left alone.",
    )
    pr.add_argument(
        "--dry-run", action="store_true", help="list what would be removed, remove nothing"
    )
    only = pr.add_mutually_exclusive_group()
    only.add_argument("--venvs-only", action="store_true", help="leave Docker alone")
    only.add_argument("--docker-only", action="store_true", help="leave the venv cache alone")
    args = p.parse_args(list(argv))
    report = prune(dry_run=args.dry_run, venvs=not args.docker_only, docker=not args.venvs_only)
    verb = "would remove" if args.dry_run else "removed"
    for item in report.removed:
        print(f"{verb}: {item}")
    for item in report.kept:
        print(f"kept: {item}")
    for item in report.foreign:
        print(f"not created by rlmesh, left alone: {item}")
    for item in report.errors:
        print(f"error: {item}", file=sys.stderr)
    print(f"{verb} {len(report.removed)} item(s), {report.freed_bytes / 2**20:.1f} MiB of venvs")
    return 1 if report.errors else 0
