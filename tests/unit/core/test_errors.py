"""The exception hierarchy (ERR-4/5, DESIGN "Errors are typed"): classes, built-ins, codes."""

from __future__ import annotations

import inspect

import pytest

from rlmesh import errors
from rlmesh.errors import CODE_NUMBERS, EnvironmentException, RLMeshException, exception_for_code

BUILTINS = {
    "EndpointBusy": ConnectionError,
    "ConnectFailed": ConnectionError,
    "ConnectionLost": ConnectionError,
    "SessionClosed": ConnectionError,
    "BindFailed": ConnectionError,
    "RequestTimeout": TimeoutError,
    "RemoteTimeout": TimeoutError,
    "InvalidAction": ValueError,
    "AdapterResolutionError": ValueError,
    "ShapeMismatch": ValueError,
    "DependencyMissing": ImportError,
    "WorkerLost": ConnectionError,
    "ActorLost": ConnectionError,
    "LanesLost": ConnectionError,
    "FleetStartTimeout": TimeoutError,
    "InvalidEnvTarget": ValueError,
    "EndpointTimeout": TimeoutError,
    "CorruptJournal": ValueError,
}


def exception_classes() -> list[type[BaseException]]:
    return [
        c
        for _, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, BaseException)
        and c.__module__ == errors.__name__
        and not issubclass(c, Warning)
    ]


@pytest.mark.parametrize("cls", exception_classes(), ids=lambda c: c.__name__)
def test_every_exception_is_an_RLMeshException_and_its_documented_builtin(
    cls: type[BaseException],
) -> None:
    assert issubclass(cls, RLMeshException) and issubclass(cls, RuntimeError)
    if cls.__name__ in BUILTINS:
        assert issubclass(cls, BUILTINS[cls.__name__])


@pytest.mark.parametrize("code", sorted(CODE_NUMBERS))
def test_every_wire_code_maps_to_a_class_that_reports_that_code(code: str) -> None:
    exc = exception_for_code(code, "boom", op="step")
    assert isinstance(exc, EnvironmentException)
    assert exc.code == code and exc.op == "step" and str(exc) == f"[{code}] boom"


def test_err4_mapping_to_builtins() -> None:
    assert isinstance(exception_for_code("TIMEOUT", "x"), TimeoutError)
    assert isinstance(exception_for_code("INVALID_ACTION", "x"), ValueError)
    assert exception_for_code("INTERNAL", "x").recoverable is False
    assert exception_for_code("NOT_READY", "x").recoverable is True
    assert (
        exception_for_code("INTERNAL", "x", recoverable=True).recoverable is True
    )  # the flag wins


def test_recoverable_env_error_marks_itself_and_checks_its_code() -> None:
    err = errors.RecoverableEnvError("sim hiccup")
    assert errors.is_recoverable_exception(err) and err.code == "INTERNAL"
    with pytest.raises(ValueError, match="unknown error code"):
        errors.RecoverableEnvError("x", code="NOPE")

    class Custom(Exception):
        rlmesh_recoverable = True

    assert errors.is_recoverable_exception(Custom())
    assert not errors.is_recoverable_exception(RuntimeError())


def test_timeouts_carry_their_budget() -> None:
    assert errors.RequestTimeout("late", timeout_seconds=1.5).timeout_seconds == 1.5


def test_the_lost_worker_exceptions_live_in_the_tree_and_where_they_were_public() -> None:
    import pickle

    import rlmesh.eval
    import rlmesh.ray

    assert rlmesh.eval.WorkerLost is errors.WorkerLost
    assert (rlmesh.ray.ActorLost, rlmesh.ray.LanesLost) == (errors.ActorLost, errors.LanesLost)
    assert rlmesh.ray.FleetStartError is errors.FleetStartError
    assert issubclass(errors.FleetStartTimeout, errors.FleetStartError)
    assert issubclass(errors.ActorLost, errors.ConnectionLost)
    lost = pickle.loads(pickle.dumps(errors.WorkerLost("gone", index=3, reasons=("a", "b"))))
    assert (str(lost), lost.index, lost.reasons) == ("gone", 3, ("a", "b"))  # crosses processes
    for name in ("WorkerLost", "ActorLost", "LanesLost", "FleetStartError", "FleetStartTimeout"):
        assert name in errors.__doc__  # drawn in the tree at the top of errors.py


def test_the_errors_that_cross_processes_keep_their_fields_when_pickled() -> None:
    import pickle

    timeout = errors.EndpointTimeout(
        "late", timeout_seconds=2.0, indices=(1, 3), addresses=("a", "b"), lanes=(1, 3, 4)
    )
    back = pickle.loads(pickle.dumps(timeout))
    assert (back.indices, back.addresses, back.lanes, back.index, back.address) == (
        (1, 3),
        ("a", "b"),
        (1, 3, 4),
        1,
        "a",
    )
    assert back.timeout_seconds == 2.0 and str(back) == "late"
    journal = pickle.loads(pickle.dumps(errors.CorruptJournal("bad", path="j", row=2, index=2)))
    assert (journal.path, journal.row, journal.index, str(journal)) == ("j", 2, 2, "bad")


#: A value for every keyword an exception of errors.py takes, unlike its default.
FIELD_VALUES: dict[str, object] = {
    "code": "TIMEOUT",
    "op": "step",
    "recoverable": False,
    "timeout_seconds": 1.5,
    "index": 3,
    "indices": (3, 5),
    "address": "127.0.0.1:7",
    "addresses": ["127.0.0.1:7"],
    "lanes": [6, 7],
    "actors": [1],
    "reasons": ("died",),
    "path": "journal.sqlite",
    "row": 2,
    "key": "actions",
    "expected": "float32[4]",
    "actual": "float32[7]",
    "space_type": "Graph",
    "name": "torch",
    "env_id": "Nope-v0",
}


@pytest.mark.parametrize("cls", exception_classes(), ids=lambda c: c.__name__)
def test_every_exception_pickles_back_to_the_same_message_and_fields(
    cls: type[BaseException],
) -> None:
    import pickle

    keywords = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.kind is p.KEYWORD_ONLY
    ]
    error = cls("what went wrong", **{k: FIELD_VALUES[k] for k in keywords})
    for protocol in (0, pickle.HIGHEST_PROTOCOL):
        back = pickle.loads(pickle.dumps(error, protocol=protocol))
        assert type(back) is cls
        assert (str(back), back.args) == (str(error), error.args)
        assert vars(back) == vars(error)
        for keyword in keywords:  # every field given, as given (also those outside __dict__)
            assert getattr(back, keyword) == getattr(error, keyword)
