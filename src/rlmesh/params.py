"""Declared construction parameters for env factories and models (api-surface A.8).

Declare what ``EnvFactory.make`` (or ``Model.load``) accepts so a bad binding
fails before anything is built::

    from rlmesh.params import Param, ParamSpec, Vector

    class Reach(rlmesh.EnvFactory):
        params = ParamSpec(
            Param("task", "enum", choices=("left", "right")),
            Param("goal", Vector(2)),
        )

        def make(self, task: str = "left", goal=(0.5, 0.5), seed: int = 0): ...

Defaults live in the signature; a ``Param`` only enriches the knob (choices,
description, grouping, sweepability). See ``docs/authoring.md``.
"""

from __future__ import annotations

# The seven names of A.8, listed once: in the __all__ of the module that defines them.
from .authoring._params import *  # noqa: F403
from .authoring._params import __all__ as __all__
