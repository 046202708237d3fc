"""``python -m rlmesh.serve TARGET --address ADDR``: the same as ``rlmesh serve``."""

import sys

from ._cli import main

sys.exit(main(prog="python -m rlmesh.serve"))
