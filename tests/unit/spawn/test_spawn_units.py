"""``rlmesh._spawn`` without child processes: what travels, how an exit reads, the guards.

Starting real worker processes is covered by ``tests/integration/test_spawn.py``.
"""

from __future__ import annotations

import functools
import pickle
import threading
from typing import Any

import pytest

from rlmesh._spawn import process
from rlmesh._spawn.pickling import dumps, loads, portable_error
from rlmesh._spawn.process import describe_exit, guard_at_exit, start_method, usable_cpus
from rlmesh._spawn.recipe import EnvRecipe, is_gymnasium_id, resolve_target


class Holder:
    def __init__(self, **state: Any) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return "Holder()"


def _ship(obj: Any) -> str:
    with pytest.raises(TypeError) as caught:
        dumps(obj, "model", who="workers=", remedy="Pass a class instead.")
    return str(caught.value)


def test_what_a_caller_defines_travels_by_value() -> None:
    scale = 3
    closure = lambda x: x * scale  # noqa: E731 - a lambda over a local: pickle refuses it
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(closure)
    assert loads(dumps(closure, "model", who="workers=", remedy=""))(2) == 6


def test_a_refusal_is_one_line_naming_the_attribute_that_cannot_travel() -> None:
    text = _ship(Holder(ok=1, inner=Holder(lock=threading.Lock())))
    assert "\n" not in text
    assert text.startswith("workers= sends the model to another process, but Holder().inner.lock")
    assert (
        "(a _thread.lock) cannot be pickled: TypeError: cannot pickle '_thread.lock' object" in text
    )
    assert text.endswith("Pass a class instead.")
    made = functools.partial(Holder, gate=threading.Lock())
    assert "<partial>.keywords['gate'] (a _thread.lock)" in _ship(made)
    assert "Holder()[1] (a _thread.lock)" not in _ship([1, threading.Lock()])
    assert "[1] (a _thread.lock)" in _ship([1, threading.Lock()])


def test_an_error_from_a_worker_comes_back_as_itself_or_as_its_words() -> None:
    err = portable_error(ValueError("bad seed"), "worker w1 (pid 7)")
    assert type(err) is ValueError and str(err) == "bad seed"

    class Local(Exception):
        pass

    other = portable_error(Local("odd"), "worker w2")
    assert type(other) is RuntimeError and "Local: odd (raised in worker w2; not picklable)" in str(
        other
    )


def test_exits_read_the_same_everywhere() -> None:
    assert describe_exit(-9) == "killed by signal 9 (SIGKILL)"
    assert describe_exit(-15) == "killed by signal 15 (SIGTERM)"
    assert describe_exit(0) == "exited with code 0" and describe_exit(3) == "exited with code 3"
    assert describe_exit(None) == "ended (its exit status is unknown)"


def test_the_start_method_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLMESH_WORKER_START", raising=False)
    assert start_method() == "forkserver"
    monkeypatch.setenv("RLMESH_WORKER_START", "fresh")
    assert start_method() == "fresh"
    monkeypatch.setenv("RLMESH_WORKER_START", "spawn")
    with pytest.raises(
        ValueError, match=r"RLMESH_WORKER_START='spawn' .* \['forkserver', 'fresh'\]"
    ):
        start_method()


def test_usable_cpus_counts_this_process_affinity() -> None:
    import os

    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))


def test_an_exit_guard_stops_live_owners_once_newest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "_GUARDS", [])
    calls: list[str] = []

    class Owner:
        def __init__(self, name: str) -> None:
            self.name = name

    first, second, gone = Owner("first"), Owner("second"), Owner("gone")
    for owner in (first, second, gone, first):  # registering twice is once
        guard_at_exit(owner, lambda o: calls.append(o.name))
    del gone
    process._run_guards()
    assert calls == ["second", "first"]
    process._run_guards()  # nothing left to run
    assert calls == ["second", "first"]


class DuckFactory:
    def make(self) -> Any:  # pragma: no cover - not built here
        return None


def test_a_recipe_labels_its_source() -> None:
    assert EnvRecipe("CartPole-v1").label == "CartPole-v1"
    assert EnvRecipe(DuckFactory).label == "DuckFactory"
    assert EnvRecipe(DuckFactory()).label == "DuckFactory"
    assert EnvRecipe(functools.partial(DuckFactory)).label == "partial"


def test_a_target_string_names_an_object_or_a_gymnasium_id() -> None:
    assert resolve_target("rlmesh._spawn.recipe:EnvRecipe") is EnvRecipe
    assert is_gymnasium_id("CartPole-v1") and not is_gymnasium_id("rlmesh._spawn.recipe:EnvRecipe")
    assert not is_gymnasium_id(EnvRecipe)
