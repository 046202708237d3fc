"""``python -m rlmesh._describe``: print a target's canonical describe envelope (AUTH-22, DELTA-54).

This private module only hosts the command line; the functions are
``rlmesh.describe`` / ``rlmesh.describe_json`` (there is no public
``rlmesh.describe`` module, AUTH-12).
"""

from __future__ import annotations

import sys

from ._cli.describe import module_main as describe_module_main
from .authoring._check import (
    CheckReport as CheckReport,
    check_labels as check_labels,
    check_target as check_target,
)

__all__ = ["CheckReport", "check_labels", "check_target", "describe_module_main"]

if __name__ == "__main__":
    sys.exit(describe_module_main())
