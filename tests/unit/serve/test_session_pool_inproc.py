"""``EnvServer(target, sessions=N)`` in process: the supervisor's books with session workers on threads.

The supervisor is the real one; only its :class:`~rlmesh._spawn.process.Spawner` is swapped
for one whose "processes" run the real worker entry (``worker_main``) on a thread of this
process, over the same ``SOCK_SEQPACKET`` control channel, ``SCM_RIGHTS`` hand-over and
shared activity board. A worker "exits" when that function returns (status 0) or raises
(status 1). What a real child process adds (the fork server, signals, SIGKILL) is covered by
``tests/integration/test_serve_sessions.py``.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import os
import pickle
import signal
import socket
import threading
from typing import Any

import gymnasium as gym
import pytest
from serve_wire import (  # noqa: F401  (fixtures)
    ScriptedEnv,
    Wire,
    no_threads_left_fixture,
    short_dir_fixture,
    started_fixture,
)

from rlmesh._spawn import EnvRecipe
from rlmesh._spawn.process import Launch, describe_exit
from rlmesh.authoring import EnvFactory
from rlmesh.errors import CODE_NUMBERS
from rlmesh.serve import EnvServer, ServeOptions, ping
from rlmesh.serve._sessions.control import Handover, Ready, SessionSpec, Stop
from rlmesh.serve._sessions.server import check_session_spec
from rlmesh.serve._sessions.supervisor import SessionSupervisor
from rlmesh.wire import handshake, messages as m

pytestmark = pytest.mark.timeout(60)

CODES = {v: k for k, v in CODE_NUMBERS.items()}
_PIDS = itertools.count(900_000)


class ThreadWorker:
    """Stands in for a worker process: the worker entry on a thread, with its own copies of the fds.

    Its sentinel turns readable when the thread ends, as a process's does when it exits.
    """

    def __init__(self, target: Any, args: tuple[Any, ...], fds: list[int]) -> None:
        if isinstance(target, str):
            module, _, name = target.partition(":")
            self._fn = getattr(importlib.import_module(module), name)
        else:
            self._fn = target
        self._args = args
        self._fds = [os.dup(fd) for fd in fds]  # the supervisor closes its copies, as after a fork
        self.pid = next(_PIDS)
        self.name = "rlmesh-test-worker"
        self.exitcode: int | None = None
        self.joins: list[tuple[str, float | None]] = []  # (thread, timeout) of every join
        self._ended, self._end = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="rlmesh-test-worker", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._fn(self._fds, *self._args)
            self.exitcode = 0
        except SystemExit as exc:  # how a stand-in says it was killed (-11: SIGSEGV)
            self.exitcode = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            self.exitcode = 1
        finally:
            self._end.close()

    @property
    def sentinel(self) -> int:
        return self._ended.fileno()

    def join(self, timeout: float | None = None) -> None:
        self.joins.append((threading.current_thread().name, timeout))
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def poll(self) -> int | None:
        return self.exitcode

    def terminate(self) -> None:  # pragma: no cover - the workers here always stop in time
        pass

    def kill(self) -> None:  # pragma: no cover - the workers here always stop in time
        pass


class ThreadSpawner:
    workers: list[ThreadWorker] = []

    def start(
        self, target: Any, args: tuple[Any, ...] = (), *, pass_fds: Any = (), **_: Any
    ) -> ThreadWorker:
        worker = ThreadWorker(target, args, list(pass_fds))
        ThreadSpawner.workers.append(worker)
        return worker

    def launch(
        self, target: Any, args: tuple[Any, ...] = (), *, pass_fds: Any = (), **_: Any
    ) -> Launch:
        return Launch.started(self.start(target, args, pass_fds=pass_fds))  # type: ignore[arg-type]

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def thread_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    ThreadSpawner.workers = []
    monkeypatch.setattr(SessionSupervisor, "_new_spawner", lambda self: ThreadSpawner())
    real = signal.signal

    def main_thread_only(
        signum: int, handler: Any
    ) -> Any:  # a worker thread cannot install handlers
        if threading.current_thread() is threading.main_thread():
            return real(signum, handler)
        return signal.SIG_DFL

    monkeypatch.setattr(signal, "signal", main_thread_only)


class Counted(ScriptedEnv):
    """A ScriptedEnv that counts the instances built (one per session)."""

    built: list[Counted] = []

    def __init__(self) -> None:
        super().__init__(length=2)
        Counted.built.append(self)


class Unbuildable(ScriptedEnv):
    def __init__(self) -> None:
        raise RuntimeError("no GPU here")


class Crashing(ScriptedEnv):
    """``step`` ends the worker itself (as a crash would end its process)."""

    def step(self, action: Any) -> Any:
        raise SystemExit(3)


def _until(predicate: Any, what: str) -> None:
    for _ in range(1000):
        if predicate():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def _session(server: Any) -> Wire:
    client = Wire(server.address)
    welcome = client.hello()
    assert isinstance(welcome, m.Welcome), welcome
    return client


def test_each_session_gets_its_own_fresh_env_and_the_limit_is_enforced(started: Any) -> None:
    Counted.built.clear()
    server = started(EnvServer, Counted, sessions=2)
    assert isinstance(server, EnvServer) and server.sessions == 2
    assert ping(server.address).state == "ready"
    a, b = _session(server), _session(server)
    try:
        assert server.sessions_in_use == 2
        health = ping(server.address)
        assert (health.state, health.sessions_in_use, health.session_limit) == ("busy", 2, 2)
        with Wire(server.address) as third:
            busy = third.hello()
            assert (
                isinstance(busy, m.Busy)
                and "all 2 sessions of this endpoint are in use" in busy.message
            )
        a.request(m.Reset(episode_ids=["a"]))
        b.request(m.Reset(episode_ids=["b"]))
        assert a.request(m.Step(action=[1])).reward == 1.0
        done = a.request(m.Step(action=[1]))
        assert [r.episode_id for r in done.completed] == ["a"]
        b.request(m.Step(action=[0]))
        assert [r.episode_id for r in b.request(m.Close()).final_episodes] == ["b"]
        _until(lambda: server.sessions_in_use == 1, "b's worker to end")
        with _session(server) as c:  # b's slot serves a new env
            assert CODES[c.request(m.Step(action=[1])).code] == "NOT_READY"
    finally:
        a.close()
        b.close()
    _until(lambda: all(e.closed == 1 for e in Counted.built), "every env to close")
    assert len(Counted.built) == 3
    assert [e.actions for e in Counted.built] == [[1, 1], [0], []]
    assert server.env_contract.num_envs == 1 and server.spec == server.env_contract


def test_prewarm_builds_an_env_before_any_client_and_publishes_the_contract(short_dir: Any) -> None:
    Counted.built.clear()
    server = EnvServer(Counted, f"unix://{short_dir}/p.sock", sessions=2, prewarm=1)
    with pytest.raises(RuntimeError, match="connect a client first, or serve with prewarm"):
        _ = server.env_contract
    server.start()
    try:
        _until(lambda: server._supervisor.contract is not None, "the prewarmed worker")
        assert server.env_contract.action_space.kind == "discrete" and len(Counted.built) == 1
        with _session(server) as client:
            client.request(m.Reset())
            assert client.request(m.Step(action=[1])).reward == 1.0
            assert len(Counted.built) >= 1
    finally:
        server.shutdown()
    assert server.stop_reason == "shutdown"
    _until(lambda: all(e.closed == 1 for e in Counted.built), "every env to close")


def test_an_env_that_fails_to_build_is_an_error_for_that_client_only(
    started: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server = started(EnvServer, Unbuildable, sessions=2)
    with caplog.at_level(logging.ERROR, logger="rlmesh.serve"), Wire(server.address) as client:
        err = client.hello()
        assert isinstance(err, m.Error) and CODES[err.code] == "INTERNAL"
        assert "the env could not be built: RuntimeError: no GPU here" in err.message
        assert client.closed_by_server()
    assert "could not build the env" in caplog.text and "no GPU here" in caplog.text
    assert ping(server.address).state == "ready"


def test_a_worker_that_dies_ends_only_its_session(
    started: Any, caplog: pytest.LogCaptureFixture
) -> None:
    Counted.built.clear()
    server = started(EnvServer, Crashing, sessions=2)
    with caplog.at_level(logging.WARNING, logger="rlmesh.serve"):
        with _session(server) as client:
            client.request(m.Reset())
            client.send(m.Step(action=[1]))
            assert client.closed_by_server()
        _until(lambda: server._supervisor.crashes == 1, "the supervisor to see the crash")
    assert f"{describe_exit(3)}; its session ended" in caplog.text
    _until(lambda: server.sessions_in_use == 0, "the slot to free")
    with _session(server) as again:
        again.request(m.Reset())


# -- hardening: the supervisor never waits for a worker, and believes no control message blindly ---


def test_a_session_counts_from_the_moment_its_worker_can_answer(
    started: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hand-over: the worker may answer the Hello before the supervisor's send() returns
    (the supervisor's thread is preempted right after it). The session is counted first."""
    from rlmesh.serve._sessions import supervisor as sup

    held, release = threading.Event(), threading.Event()
    real_send = sup.control.send

    def slow_send(sock: Any, msg: Any, fds: Any = ()) -> None:
        real_send(sock, msg, fds)
        if isinstance(msg, Handover):  # the supervisor is preempted here, after the hand-over
            held.set()
            release.wait(10.0)

    monkeypatch.setattr(sup.control, "send", slow_send)
    server = started(EnvServer, Counted, sessions=2)
    try:
        with _session(server) as client:  # its worker answered while the supervisor is held
            # the worker may answer before the supervisor's thread runs again after its send,
            # so wait for the hold rather than expect it: once held, the count must be there
            assert held.wait(10.0)
            assert server.sessions_in_use == 1
            release.set()
            client.request(m.Reset())
    finally:
        release.set()


class SlowClose(ScriptedEnv):
    """``close()`` takes until the test opens ``gate`` (a simulator that saves state on close)."""

    closing = threading.Event()
    gate = threading.Event()

    def close(self) -> None:
        SlowClose.closing.set()
        SlowClose.gate.wait(30.0)
        super().close()


def test_a_slow_env_close_keeps_its_slot_and_the_supervisor_never_waits_for_it(
    started: Any, caplog: pytest.LogCaptureFixture
) -> None:
    SlowClose.closing.clear()
    SlowClose.gate.clear()
    server = started(EnvServer, SlowClose, sessions=2)
    a, b = _session(server), _session(server)
    third = Wire(server.address)
    try:
        with caplog.at_level(logging.INFO, logger="rlmesh.serve"):
            assert isinstance(a.request(m.Close()), m.CloseReply)
            assert SlowClose.closing.wait(10.0)  # a's worker is closing its env, slowly
            for _ in range(3):  # answered at once, and the slot is still a's
                health = ping(server.address)
                assert (health.state, health.sessions_in_use) == ("busy", 2)
            b.request(m.Reset())  # the other session is served meanwhile
            third.send(handshake.make_hello("third", None, service="env"))  # waits for a slot
            # the supervisor's loop never waited on a worker process
            assert [w.joins for w in ThreadSpawner.workers] == [[], []]
            SlowClose.gate.set()
            assert isinstance(third.receive(), m.Welcome)
            _until(lambda: len(ThreadSpawner.workers) == 3, "the third worker")
            assert server.sessions_in_use == 2 and server._supervisor.crashes == 0
        assert "its session ended" not in caplog.text  # a slow clean exit is no crash
    finally:
        SlowClose.gate.set()
        for client in (a, b, third):
            client.close()


class FakeClock:
    """``time.monotonic`` for the supervisor and its loop only: it moves when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        import time

        return getattr(time, name)


def die_before_ready(fds: list[int], *args: Any) -> None:
    """A worker whose simulator segfaults while building: it ends before it says Ready."""
    for fd in fds:
        os.close(fd)
    raise SystemExit(-int(signal.SIGSEGV))


def test_a_worker_that_dies_before_it_is_ready_is_restarted_with_a_capped_backoff(
    started: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from rlmesh.serve import _loop
    from rlmesh.serve._sessions import supervisor as sup

    clock = FakeClock()
    monkeypatch.setattr(sup, "time", clock)
    monkeypatch.setattr(_loop, "time", clock)  # the loop's once-a-second tick
    monkeypatch.setattr(sup, "WORKER_ENTRY", die_before_ready)
    with caplog.at_level(logging.DEBUG, logger="rlmesh.serve"):
        server = started(EnvServer, Counted, sessions=2, prewarm=1)
        supervisor = server._supervisor

        def settle() -> None:  # two pings: the loop has been round since the clock moved
            supervisor._waker.wake()
            ping(server.address)
            ping(server.address)

        _until(lambda: supervisor.crashes == 1, "the first worker to die")
        settle()
        assert supervisor.started == 1  # not restarted at once
        expected = [2, 3, 3, 4, 4, 4, 4, 5]  # one more second each: pauses 0.5, 1, 2, 4, 8
        for want in expected:
            clock.now += 1.0
            settle()
            _until(lambda: supervisor.crashes == supervisor.started, "the worker to die")
            assert supervisor.started == want, (want, supervisor.backoff.pauses)
        assert supervisor.backoff.pauses == [0.5, 1.0, 2.0, 4.0, 8.0]
        with Wire(server.address) as client:  # a client's own worker dies too: it is told how
            err = client.hello()
            assert isinstance(err, m.Error) and CODES[err.code] == "INTERNAL"
            assert "died while starting (killed by signal 11 (SIGSEGV))" in err.message
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1, [r.getMessage() for r in errors]  # one log line for the streak
    assert "before its env was ready" in errors[0].getMessage()
    assert "killed by signal 11 (SIGSEGV)" in errors[0].getMessage()


def _rogue(payload: bytes, fds_out: int = 0) -> Any:
    """A worker entry that sends one datagram of ``payload`` (with ``fds_out`` fds), then waits
    until the supervisor closes its channel."""

    def rogue(fds: list[int], *args: Any) -> None:
        ctrl = socket.socket(fileno=fds[0])
        for fd in fds[1:]:
            os.close(fd)
        try:
            if fds_out:
                extra = [os.dup(0) for _ in range(fds_out)]
                socket.send_fds(ctrl, [payload], extra)
                for fd in extra:
                    os.close(fd)
            else:
                ctrl.send(payload)
            ctrl.settimeout(30.0)
            while ctrl.recv(1 << 16):  # until the supervisor hangs up on us
                pass
        finally:
            ctrl.close()

    return rogue


ROGUES = {
    "garbage": _rogue(b"\x00\xffnot a message"),
    "undecodable": _rogue(b"I" + b"\x80\x05garbage"),
    "no kind": _rogue(b"I" + pickle.dumps(12345)),
    "a file announced, none sent": _rogue(b"F" + (100).to_bytes(8, "little")),
    "a file of absurd size": _rogue(b"F" + (1 << 62).to_bytes(8, "little"), fds_out=1),
    "oversized datagram": _rogue(b"I" + b"x" * (200 * 1024)),
    "a Ready with a bad contract": _rogue(b"I" + pickle.dumps(Ready(1, None))),  # type: ignore[arg-type]
    "a supervisor's message": _rogue(b"I" + pickle.dumps(Stop("nope"))),
}


@pytest.mark.parametrize("attack", sorted(ROGUES))
def test_no_control_message_ends_the_supervisors_loop(
    started: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, attack: str
) -> None:
    from rlmesh.serve._sessions import supervisor as sup

    monkeypatch.setattr(sup, "WORKER_ENTRY", ROGUES[attack])
    with caplog.at_level(logging.WARNING, logger="rlmesh.serve"):
        server = started(EnvServer, Counted, sessions=2)
        with Wire(server.address) as client:  # its worker is the rogue: an error, not a hang
            err = client.hello()
            assert isinstance(err, m.Error) and CODES[err.code] == "INTERNAL", err
        assert ping(server.address).state in ("ready", "busy")  # the loop serves on
        _until(lambda: server._supervisor._workers == [], "the rogue worker's slot to free")
        assert ping(server.address).state == "ready"
    assert "cannot be" in caplog.text and "stopping it" in caplog.text


def test_a_session_may_shut_the_whole_endpoint_down_when_allowed(started: Any) -> None:
    Counted.built.clear()
    options = ServeOptions(allow_remote_shutdown=True)
    server = started(EnvServer, Counted, sessions=2, options=options)
    other = _session(server)
    try:
        with _session(server) as client:
            reply = client.request(m.Shutdown(reason="maintenance"))
            assert reply.accepted and reply.message == "shutdown accepted: maintenance"
        assert server.wait(10.0)
        assert server.stop_reason == "remote shutdown: maintenance"
        assert other.closed_by_server()  # every worker was asked to stop
    finally:
        other.close()
    _until(lambda: all(e.closed == 1 for e in Counted.built), "every env to close")


def test_a_session_asking_for_shutdown_is_refused_by_default(started: Any) -> None:
    server = started(EnvServer, Counted, sessions=2)
    with _session(server) as client:
        reply = client.request(m.Shutdown(reason="x"))
        assert not reply.accepted and "disabled" in reply.message
        client.request(m.Reset())
    assert not server.wait(0.05)


def test_the_supervisor_answers_shutdown_and_protocol_errors_before_any_session(
    started: Any,
) -> None:
    server = started(EnvServer, Counted, sessions=2)
    with Wire(server.address) as client:
        reply = client.request(m.Shutdown())
        assert not reply.accepted and "disabled" in reply.message
    with Wire(server.address) as rude:
        rude.send_bytes(b"\x00" * 64)
        assert rude.closed_by_server()
    allowed = started(
        EnvServer, Counted, sessions=2, options=ServeOptions(allow_remote_shutdown=True)
    )
    with Wire(allowed.address) as client:
        reply = client.request(m.Shutdown(reason="bye"))
        assert reply.accepted and reply.message == "shutdown accepted: bye"
    assert allowed.wait(10.0) and allowed.stop_reason == "remote shutdown: bye"


def test_an_idle_multi_session_endpoint_stops_after_its_idle_timeout(started: Any) -> None:
    server = started(EnvServer, Counted, sessions=2, options=ServeOptions(idle_timeout_seconds=0.1))
    assert server.wait(10.0) and server.stop_reason == "idle timeout"


def test_shutdown_stops_the_sessions_in_flight_and_closes_their_envs(started: Any) -> None:
    Counted.built.clear()
    server = started(EnvServer, Counted, sessions=2)
    client = _session(server)
    try:
        client.request(m.Reset())
        server.shutdown()
        assert client.closed_by_server()
    finally:
        client.close()
    assert Counted.built[0].closed == 1


# -- construction and recipes ---------------------------------------------------------------------


def test_a_live_env_or_a_local_callable_cannot_serve_many_sessions(short_dir: Any) -> None:
    with pytest.raises(TypeError, match="a live ScriptedEnv instance"):
        EnvServer(ScriptedEnv(), f"unix://{short_dir}/x.sock", sessions=2)
    with pytest.raises(TypeError, match="options must be a ServeOptions"):
        EnvServer(Counted, f"unix://{short_dir}/x.sock", sessions=2, options=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prewarm=3 exceeds sessions=2"):
        EnvServer(Counted, f"unix://{short_dir}/x.sock", sessions=2, prewarm=3)
    from rlmesh.errors import BindFailed

    with pytest.raises(BindFailed, match="failed to bind unix socket"):
        EnvServer(Counted, f"unix://{short_dir}/no/such/dir.sock", sessions=2)


class Factory(EnvFactory):
    def make(self) -> Any:
        return ScriptedEnv()


class DuckFactory:
    """Not an EnvFactory: anything with ``make()`` is an env factory (seed types.SupportsMake)."""

    def __init__(self) -> None:
        self.prepared = False
        self.closed = False

    def prepare(self) -> None:
        self.prepared = True

    def make(self, length: int = 9) -> Any:
        assert self.prepared
        return ScriptedEnv(length=length)

    def close(self) -> None:
        self.closed = True


def test_recipes_build_from_ids_factories_duck_factories_and_callables() -> None:
    built = EnvRecipe("CartPole-v1").build()
    assert built.env.spec.id == "CartPole-v1" and built.factory is None
    built = EnvRecipe(Factory).build()
    assert isinstance(built.env, ScriptedEnv) and isinstance(built.factory, Factory)
    built = EnvRecipe(DuckFactory, {"length": 4}, tags="t").build()
    assert built.env.length == 4 and isinstance(built.factory, DuckFactory) and built.tags == "t"
    built.close()
    assert built.factory.closed
    lanes = EnvRecipe(DuckFactory(), num_envs=2).build().env
    assert len(lanes) == 2 and lanes.autoreset_mode == "NextStep"
    lanes = EnvRecipe(ScriptedEnv, num_envs=2).build().env
    assert len(lanes) == 2 and lanes.autoreset_mode == "NextStep"
    venv = (
        EnvRecipe(ScriptedEnv, num_envs=2, vectorization_mode="sync", autoreset="same-step")
        .build()
        .env
    )
    assert isinstance(venv, gym.vector.SyncVectorEnv)
    venv.close()
    spec = EnvRecipe(gym.spec("CartPole-v1")).build()  # a Gymnasium EnvSpec has make() too
    assert spec.env.spec.id == "CartPole-v1"
    live = ScriptedEnv()
    assert EnvRecipe(live).build().env is live
    with pytest.raises(ValueError, match=r"is a live env .* takes no make kwargs"):
        EnvRecipe(live, {"x": 1}).build()
    with pytest.raises(TypeError, match="is a int, not an env source"):
        EnvRecipe(3).build()


def test_a_duck_factory_serves_many_sessions(started: Any) -> None:
    server = started(EnvServer, DuckFactory, sessions=2)
    with _session(server) as client:
        client.request(m.Reset())
        assert client.request(m.Step(action=[1])).reward == 1.0


def test_the_declared_edition_is_resolved_once_in_the_supervisor() -> None:
    options = ServeOptions(idle_timeout_seconds=2.0, allow_remote_shutdown=True)
    resolved = check_session_spec(SessionSpec(EnvRecipe("CartPole-v1"), options=options), 2).options
    assert resolved.idle_timeout_seconds == 2.0 and resolved.allow_remote_shutdown
