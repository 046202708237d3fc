"""Both distributed backends implement :class:`~rlmesh.eval.distributed.WorkerBackend` (issue 34).

mypy checks them where they are built (``make_backend`` returns a ``WorkerBackend``); this
test checks the same thing at run time, method by method, so a backend that drifts from
the seam fails here with the method named.
"""

from __future__ import annotations

import inspect

import pytest

from rlmesh.eval.distributed.backend import EVENTS, WorkerBackend
from rlmesh.eval.distributed.processes import ProcessBackend
from rlmesh.eval.distributed.ray_actors import RayBackend

METHODS = sorted(
    name
    for name, member in vars(WorkerBackend).items()
    if inspect.isfunction(member) and not name.startswith("_")
)


def test_the_seam_is_the_twelve_methods_the_driver_uses() -> None:
    assert METHODS == [
        "alive",
        "assign",
        "close",
        "has_worker",
        "kill",
        "poll",
        "release",
        "set_job",
        "spawn",
        "stop",
        "submit",
        "wait_started",
    ]
    assert EVENTS == ("ready", "setup_failed", "done", "failed", "released", "lost")


@pytest.mark.parametrize("backend", [ProcessBackend, RayBackend], ids=lambda b: b.__name__)
@pytest.mark.parametrize("name", METHODS)
def test_each_backend_implements_each_method_with_the_same_parameters(
    backend: type, name: str
) -> None:
    want = inspect.signature(getattr(WorkerBackend, name))
    got = inspect.signature(getattr(backend, name))
    assert list(got.parameters) == list(want.parameters), f"{backend.__name__}.{name}{got}"
    for param, expected in want.parameters.items():
        assert got.parameters[param].kind == expected.kind, f"{backend.__name__}.{name}: {param}"
    assert isinstance(backend.name, str) and backend.name in ("processes", "ray")
