"""Benchmark suites: real workloads (tasks, a seed schedule, a success metric, a scripted
baseline, a sandbox recipe) evaluated with one call.

>>> from rlmesh import suites
>>> suites.parse_suite("metaworld:reach-v3,push-v3").tasks
('reach-v3', 'push-v3')
"""

from __future__ import annotations

from . import metaworld as metaworld
from ._results import SuiteResult as SuiteResult, TaskResult as TaskResult
from ._run import run as run
from ._spec import SUITES as SUITES, Suite as Suite, parse_suite as parse_suite

__all__ = ["SUITES", "Suite", "SuiteResult", "TaskResult", "metaworld", "parse_suite", "run"]
