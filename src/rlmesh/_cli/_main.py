"""The ``rlmesh`` command: a thin dispatcher over one module per subcommand.

Each subcommand module (``rlmesh._cli.<name>``) has a ``main(argv) -> int`` and is imported
only when its command runs, so ``rlmesh health`` never loads the eval drive. Each prints
errors as one line (``--verbose`` for the traceback) and exits 0, 1 or 2 (bad arguments).
Every command honours SIGTERM the same way (``_signals``): it stops, keeps what it has
finished and exits 143; the serve commands stop gracefully and exit 0.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from .._build import VERSION
from ._signals import EXIT_TERMINATED, Terminated, sigterm_ends_command

__all__ = ["COMMANDS", "main"]

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

#: Command name -> the module (under ``rlmesh._cli``) whose ``main(argv)`` runs it.
COMMANDS: dict[str, str] = {
    "serve": "serve",
    "health": "health",
    "describe": "describe",
    "eval": "eval",
    "serve-model": "serve_model",
    "view-test": "view_test",
    "viewtest": "view_test",  # the reference's spelling (CLI-1)
    "export": "export",
    "sandbox": "sandbox",
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
        sys.path.insert(
            0, os.getcwd()
        )  # module:attr targets resolve from the cwd, as with `python -m`
    name = COMMANDS.get(args[0])
    if name is None:
        print(f"rlmesh: unknown command {args[0]!r}\n\n{_USAGE}", file=sys.stderr)
        return 2
    with sigterm_ends_command(args[0]):
        try:
            command = importlib.import_module(f"{__package__}.{name}")
            return int(command.main(args[1:]))
        except Terminated as exc:
            print(exc, file=sys.stderr)
            return EXIT_TERMINATED
