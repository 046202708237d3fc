"""``python -m rlmesh.serve [MODEL] | --env ENV``: the reference grammar (MOD-33, CLI-4).

A positional target is a model; ``--env TARGET`` serves an env. The ``rlmesh serve``
console command keeps the env-first grammar (positional target = env).
"""

import sys

from ._main import main

sys.exit(main())
