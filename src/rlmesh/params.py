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

from .authoring._params import (
    PARAM_METADATA_KEY as PARAM_METADATA_KEY,
    MissingParamError as MissingParamError,
    Param as Param,
    ParamError as ParamError,
    ParamSpec as ParamSpec,
    UnknownParamError as UnknownParamError,
    Vector as Vector,
)

__all__ = [
    "PARAM_METADATA_KEY",
    "MissingParamError",
    "Param",
    "ParamError",
    "ParamSpec",
    "UnknownParamError",
    "Vector",
]
