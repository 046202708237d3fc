"""The ``rlmesh`` command (the console script, and ``python -m rlmesh.cli``).

Subcommands: ``serve`` (an env), ``health`` (probe an endpoint), ``describe``
(an env factory or model), ``eval`` (run a model against an env) and more; ``rlmesh
--help`` lists them. Each prints errors as one line (``--verbose`` for the traceback) and
exits 0 or 1 (2 on bad arguments). The commands live in :mod:`rlmesh._cli`.
"""

from __future__ import annotations

import sys

from ._cli import main as main

__all__ = ["main"]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
