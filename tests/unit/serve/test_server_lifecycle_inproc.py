"""Server lifecycle in process: start/serve/wait/shutdown, signals, the GC finalizer, SIGTERM's deadline.

Servers bind a unix socket in a short temp dir; ``serve()`` runs on the test's own (main)
thread where a test needs the signal handlers, with a helper thread as the client.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from serve_wire import (  # noqa: F401  (fixtures)
    ScriptedEnv,
    Wire,
    no_threads_left_fixture,
    short_dir_fixture,
    started_fixture,
)

from rlmesh._keys import ENV_BRANCH_KEY
from rlmesh.errors import BindFailed
from rlmesh.serve import EnvServer, ServeOptions, _lifecycle, _terminate
from rlmesh.serve._server import MAX_SPACE_DEPTH
from rlmesh.wire import messages as m

pytestmark = pytest.mark.timeout(60)


def _address(short_dir: Path, name: str = "s.sock") -> str:
    return f"unix://{short_dir}/{name}"


def test_start_twice_wait_before_start_and_serve_after_shutdown_are_refused(
    short_dir: Path,
) -> None:
    env = ScriptedEnv()
    server = EnvServer(env, _address(short_dir))
    assert repr(server) == f"EnvServer(address='{server.address}')"
    assert server.options.drain_seconds() == 5.0 and server.spec is server.env_contract
    with pytest.raises(RuntimeError, match="called before start"):
        server.wait(1.0)
    server.start()
    with pytest.raises(RuntimeError, match="already serving"):
        server.start()
    with pytest.raises(ValueError, match="non-negative finite"):
        server.wait(-1)
    with pytest.raises(ValueError, match="non-negative finite"):
        server.wait(float("nan"))
    server.shutdown()
    server.shutdown()  # idempotent
    assert server.stop_reason == "shutdown" and env.closed == 1
    with pytest.raises(RuntimeError, match="cannot serve again"):
        server.start()
    assert not Path(server.address[len("unix://") :]).exists()  # the socket file is removed


def test_a_server_shut_down_before_it_served_closes_its_env_and_socket(short_dir: Path) -> None:
    env = ScriptedEnv()
    with EnvServer(env, _address(short_dir)) as server:
        path = Path(server.address[len("unix://") :])
        assert path.exists()
    assert env.closed == 1 and not path.exists() and server.wait(0) is True


def test_close_env_on_shutdown_false_leaves_the_env_open(short_dir: Path) -> None:
    env = ScriptedEnv()
    EnvServer(env, _address(short_dir), close_env_on_shutdown=False).start().shutdown()
    assert env.closed == 0


def test_a_failing_env_close_is_logged_and_shutdown_still_completes(
    short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = ScriptedEnv()
    env.close_error = RuntimeError("close exploded")
    server = EnvServer(env, _address(short_dir)).start()
    with caplog.at_level(logging.WARNING, logger="rlmesh.serve"):
        server.shutdown()
    assert env.closed == 1 and "close exploded" in caplog.text
    assert server._life.errors == ["close failed: RuntimeError: close exploded"]


def test_a_dropped_server_is_stopped_and_its_env_closed_by_the_finalizer(short_dir: Path) -> None:
    env = ScriptedEnv()
    unstarted = EnvServer(env, _address(short_dir, "a.sock"))
    path = Path(unstarted.address[len("unix://") :])
    del unstarted
    gc.collect()
    assert env.closed == 1 and not path.exists()
    env2 = ScriptedEnv()
    running = EnvServer(env2, _address(short_dir, "b.sock")).start()
    life = running._life
    del running
    gc.collect()
    assert (
        life.done.wait(10.0) and env2.closed == 1 and life.loop.stop_reason == "garbage collected"
    )


def test_only_the_socket_file_this_server_created_is_removed(short_dir: Path) -> None:
    server = EnvServer(ScriptedEnv(), _address(short_dir))
    path = server.address[len("unix://") :]
    identity = _lifecycle.socket_identity(path)
    os.unlink(path)  # someone removed it and bound the path again
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(path)
    try:
        assert not _lifecycle.remove_own_socket(path, identity)
        server.shutdown()
        assert os.path.exists(path)  # the other server's socket is left alone
        assert _lifecycle.remove_own_socket(path, _lifecycle.socket_identity(path))
        assert not _lifecycle.remove_own_socket(path, None)
    finally:
        other.close()
    assert (
        _lifecycle.socket_identity(None) is None
        and _lifecycle.socket_identity(str(short_dir / "none")) is None
    )


def test_shutdown_with_an_env_call_stuck_past_the_budget_closes_the_listener(
    short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = ScriptedEnv(length=100)
    options = ServeOptions(drain_timeout_seconds=0.05, close_timeout_seconds=0.05)
    server = EnvServer(env, _address(short_dir), options=options).start()
    client = Wire(server.address)
    try:
        client.hello()
        client.request(m.Reset())
        env.release = threading.Event()
        client.send(m.Step(action=[1]))
        assert env.entered.wait(10.0)
        with caplog.at_level(logging.WARNING, logger="rlmesh.serve"):
            server.shutdown()
        assert "did not stop within 0.1s" in caplog.text
        with pytest.raises(OSError):  # new clients are refused at once
            Wire(server.address)
    finally:
        env.release.set()
        client.close()
    assert server.wait(10.0) and env.closed == 1


def _serve_on_main_thread(server: Any, act: Any) -> None:
    """Run ``server.serve()`` here while ``act()`` runs on a helper thread once the loop answers."""
    errors: list[BaseException] = []

    def helper() -> None:
        try:
            with Wire(server.address) as probe:
                assert (
                    probe.request(m.Ping()).state == "ready"
                )  # the loop runs: the handlers are in place
            act()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            server.shutdown()

    thread = threading.Thread(target=helper, daemon=True)
    thread.start()
    server.serve()
    thread.join(10.0)
    assert not errors, errors


def test_serve_on_the_main_thread_stops_gracefully_on_SIGINT_and_restores_the_handlers(
    short_dir: Path,
) -> None:
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    env = ScriptedEnv()
    server = EnvServer(env, _address(short_dir))
    _serve_on_main_thread(server, lambda: os.kill(os.getpid(), signal.SIGINT))
    assert server.stop_reason == "interrupted" and env.closed == 1
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    with pytest.raises(RuntimeError, match="cannot serve again"):
        server.serve()


def test_serve_on_the_main_thread_stops_gracefully_on_SIGTERM(short_dir: Path) -> None:
    env = ScriptedEnv()
    server = EnvServer(env, _address(short_dir))
    _serve_on_main_thread(server, lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert server.stop_reason == "terminated" and env.closed == 1


def test_wait_is_for_a_started_server_not_a_foreground_one(short_dir: Path) -> None:
    server = EnvServer(ScriptedEnv(), _address(short_dir))
    seen: list[str] = []

    def act() -> None:
        try:
            server.wait(0.01)
        except RuntimeError as exc:
            seen.append(str(exc))
        server.shutdown()

    _serve_on_main_thread(server, act)
    assert seen and "serve() is running in the foreground" in seen[0]


class _Exited(Exception):
    pass


def _watch(
    monkeypatch: pytest.MonkeyPatch, budget: float, done: threading.Event
) -> tuple[Any, list[Any]]:
    calls: list[Any] = []

    def fake_exit(code: int) -> None:
        calls.append(("exit", code))

    monkeypatch.setattr(_terminate.os, "_exit", fake_exit)
    watch = _terminate.TermWatch(
        lambda: calls.append("stop"),
        done,
        budget,
        lambda: calls.append("abandon"),
        "EnvServer at unix:///x",
    )
    return watch, calls


def test_a_second_SIGTERM_exits_at_once_with_status_143(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    done = threading.Event()
    watch, calls = _watch(monkeypatch, 60.0, done)
    try:
        watch.on_sigterm()
        watch.on_sigterm()
        assert calls == ["stop", "abandon", ("exit", _terminate.EXIT_TERMINATED)]
        assert _terminate.EXIT_TERMINATED == 143
        assert "terminated: a second SIGTERM" in capfd.readouterr().err
    finally:
        watch.disarm()
        done.set()  # the deadline thread returns: no thread outlives the test (busy polling needs one)
    _no_deadline_thread()


def test_SIGTERM_exits_when_the_call_in_flight_outlives_the_budget(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    watch, calls = _watch(monkeypatch, 0.01, threading.Event())
    watch.on_sigterm()
    for _ in range(500):
        if ("exit", 143) in calls:
            break
        threading.Event().wait(0.01)
    assert calls == ["stop", "abandon", ("exit", 143)]
    assert "did not return within 0.0s of SIGTERM" in capfd.readouterr().err
    _no_deadline_thread()


def test_SIGTERM_does_not_exit_once_serving_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    done = threading.Event()
    watch, calls = _watch(monkeypatch, 0.01, done)
    done.set()
    watch.on_sigterm()
    watch.on_sigterm()  # serving already ended: nothing to abandon
    threading.Event().wait(0.05)
    assert calls == ["stop"]
    _no_deadline_thread()


def _no_deadline_thread() -> None:
    for thread in threading.enumerate():
        if thread.name == "rlmesh-sigterm-deadline":
            thread.join(5.0)
            assert not thread.is_alive()


# -- construction errors ------------------------------------------------------------------------


def test_construction_refuses_bad_options_and_unbindable_addresses(short_dir: Path) -> None:
    with pytest.raises(TypeError, match="options must be a ServeOptions"):
        EnvServer(ScriptedEnv(), _address(short_dir), options={"idle_timeout_seconds": 1})  # type: ignore[arg-type]
    with pytest.raises(BindFailed, match="failed to bind unix socket"):
        EnvServer(ScriptedEnv(), f"unix://{short_dir}/missing/dir/s.sock")


def test_a_space_nested_too_deep_is_refused_with_the_limit() -> None:
    env = ScriptedEnv()
    space: Any = gym.spaces.Discrete(2)
    for _ in range(MAX_SPACE_DEPTH + 1):
        space = gym.spaces.Dict({"a": space})
    env.observation_space = space
    with pytest.raises(ValueError, match=f"more than {MAX_SPACE_DEPTH} levels deep"):
        EnvServer(env, "unix:///nonexistent/never-bound.sock")


def test_the_expected_env_branch_must_match(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = ScriptedEnv()
    env.metadata[ENV_BRANCH_KEY] = {"name": "main"}
    monkeypatch.setenv("RLMESH_EXPECTED_ENV_BRANCH", "not json")
    with pytest.raises(ValueError, match="must be a JSON object"):
        EnvServer(env, _address(short_dir))
    monkeypatch.setenv("RLMESH_EXPECTED_ENV_BRANCH", json.dumps({"name": "other"}))
    with pytest.raises(ValueError, match="env branch mismatch"):
        EnvServer(env, _address(short_dir))
    monkeypatch.setenv("RLMESH_EXPECTED_ENV_BRANCH", json.dumps({"name": "main"}))
    EnvServer(env, _address(short_dir)).shutdown()


def test_metadata_travels_in_the_contract_with_an_enum_autoreset_mode(short_dir: Path) -> None:
    venv = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    with EnvServer(venv, _address(short_dir)) as server:
        contract = server.env_contract
        assert contract.num_envs == 2 and contract.autoreset_mode == "NextStep"
        assert contract.metadata is not None and contract.metadata["autoreset_mode"] == "NextStep"


def test_a_list_of_lane_envs_is_one_vector_endpoint(started: Any) -> None:
    lanes = [ScriptedEnv(length=2), ScriptedEnv(length=3)]
    server = started(EnvServer, lanes)
    assert server.env_contract.num_envs == 2
    with Wire(server.address) as client:
        client.hello()
        client.request(m.Reset(episode_ids=["a", "b"]))
        completed: list[str] = []
        for _ in range(3):
            reply = client.request(m.Step(action=[], has_action=True), [np.array([1, 0], np.int64)])
            assert isinstance(reply, m.StepReply), reply
            completed += [r.episode_id for r in reply.completed]
        assert completed == ["a", "b"]
        render = client.request(m.Render(env_index=1))
        assert render.shape == [4, 6, 3]
