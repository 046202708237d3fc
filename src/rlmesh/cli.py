"""The ``rlmesh`` command: a thin dispatcher over the public API.

Subcommands: ``serve`` (an env), ``health`` (probe an endpoint), ``describe``
(an env factory or model), ``eval`` (run a model against an env). Each prints
errors as one line (``--verbose`` for the traceback) and exits 0 or 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from ._build import VERSION
from ._termtext import term_safe
from .errors import RLMeshException
from .transport.probe import ping, wait_ready

__all__ = ["main"]

_USAGE = """usage: rlmesh <command> [options]

commands:
  serve TARGET --address ADDR   serve a Gymnasium id or module:attr env/factory
  health ADDR                   exit 0 when an endpoint at ADDR answers
  describe TARGET [--json]      print an env factory's or model's describe envelope
  eval MODEL ENV --episodes N   run a model against an env and report results
  serve-model TARGET --address  serve a model (module:attr) for RemoteModel clients
  view-test [--http PORT]       show a synthetic scene in the live viewer (terminal or browser)
  export BUNDLE --lerobot PATH  write a recorded result bundle as a LeRobot dataset
  sandbox prune [--dry-run]     remove the cached sandbox venvs/images rlmesh made

Run `rlmesh <command> --help` for a command's options."""


def _health(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="rlmesh health", description="Probe an rlmesh endpoint.")
    p.add_argument("address", help="host:port, tcp://host:port or unix:///path")
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="give up after SECONDS (default: 5)")
    p.add_argument("--wait", action="store_true", help="keep probing until ready or --timeout (default: probe once)")
    args = p.parse_args(argv)
    try:
        if args.wait:
            health = wait_ready(args.address, timeout_seconds=args.timeout)
        else:
            health = ping(args.address, timeout_seconds=args.timeout)
    except (RLMeshException, ValueError) as exc:
        print(f"not serving: {term_safe(exc, newlines=True)}", file=sys.stderr)
        return 1
    print(  # a Pong's service and state are the peer's words: escaped (issue 28)
        f"serving: {term_safe(health.service)} at {health.address} ({term_safe(health.state)}, "
        f"sessions {health.sessions_in_use}/{health.session_limit}, {health.latency_ms:.1f} ms)"
    )
    return 0


def _lazy(module: str, func: str) -> Callable[[Sequence[str]], int]:
    def run(argv: Sequence[str]) -> int:
        import importlib

        return int(getattr(importlib.import_module(module), func)(list(argv)))

    return run


_COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "serve": _lazy("rlmesh.serve._cli", "main"),
    "health": _health,
    "describe": _lazy("rlmesh.authoring._cli", "describe_main"),
    "eval": _lazy("rlmesh.eval._cli", "eval_main"),
    "serve-model": _lazy("rlmesh.serve._model_cli", "main"),
    "view-test": _lazy("rlmesh.view._cli", "main"),
    "viewtest": _lazy("rlmesh.view._cli", "main"),  # the reference's spelling (CLI-1)
    "export": _lazy("rlmesh.recorder._cli", "export_main"),
    "sandbox": _lazy("rlmesh.sandbox._prune", "main"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``rlmesh`` command with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_USAGE)
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        print(f"rlmesh {VERSION}")
        return 0
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # module:attr targets resolve from the cwd, as with `python -m`
    command = _COMMANDS.get(args[0])
    if command is None:
        print(f"rlmesh: unknown command {args[0]!r}\n\n{_USAGE}", file=sys.stderr)
        return 2
    return command(args[1:])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
