"""Every command line of rlmesh, one module per command, behind one dispatcher.

=====================================  =======================================
``rlmesh serve``                       :mod:`rlmesh._cli.serve`
``rlmesh serve-model``                 :mod:`rlmesh._cli.serve_model`
``python -m rlmesh.serve``             :mod:`rlmesh._cli.serve_module`
``rlmesh eval``                        :mod:`rlmesh._cli.eval`
``rlmesh describe``,                   :mod:`rlmesh._cli.describe`
``python -m rlmesh._describe``
``rlmesh health``                      :mod:`rlmesh._cli.health`
``rlmesh view-test`` / ``viewtest``    :mod:`rlmesh._cli.view_test`
``rlmesh export``                      :mod:`rlmesh._cli.export`
``rlmesh sandbox prune``               :mod:`rlmesh._cli.sandbox`
=====================================  =======================================

Only parsing, dispatch and what a command prints live here; serving, evaluation, describe
and the viewer are the packages' own. Targets (``module:attr`` or ``path/to/file.py:attr``)
load through :func:`rlmesh._target.load_target`, re-exported here. ``rlmesh.cli.main`` (the
console script) and ``rlmesh.serve.main`` are the public entry points.
"""

from .._target import load_target as load_target
from ._main import main as main

__all__ = ["load_target", "main"]
