"""The live progress line of a distributed run: the one every run draws (:mod:`rlmesh.eval._progress`)."""

from __future__ import annotations

from .._progress import RunProgress as RunProgress, wilson_interval as wilson_interval

__all__ = ["RunProgress", "wilson_interval"]
