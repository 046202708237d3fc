"""Hardening round 3: a multi-session endpoint keeps its promises under faults.

Each test is an attack on ``EnvServer(target, sessions=N)`` with real worker processes: an
env whose ``close()`` takes seconds, a contract too large for one control datagram, a
simulator that segfaults while it builds, a supervisor SIGKILLed while a worker is stuck
inside ``step()``, and a space over the limits a client accepts. Every loop is bounded in
count and time; no test asserts a wall-clock threshold (the bounded waits only give up).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from sessions_envs import (
    make_big_bounds_env,
    make_declaring_env,
    make_segfaulting_env,
    make_slow_close_env,
)
from test_serve_sessions import _alive, _descendants, _pid, _wait

import rlmesh
import rlmesh.numpy as rnp
from conftest import child_env, stop_process, wait_for_ready_file
from rlmesh.errors import ConnectionLost, SessionClosed
from rlmesh.serve import ping
from rlmesh.spaces._spec import MAX_SPACE_ELEMENTS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def endpoint(short_tmp: Path):
    """``endpoint(target, sessions=2, **kwargs)``: an in-process multi-session EnvServer."""
    servers: list[Any] = []

    def start(target: Any, sessions: int = 2, **kwargs: Any) -> Any:
        server = rlmesh.EnvServer(target, "127.0.0.1:0", sessions=sessions, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.shutdown()


def _lines(path: Path, word: str) -> set[int]:
    try:
        text = path.read_text()
    except OSError:
        return set()
    return {int(line.split()[1]) for line in text.splitlines() if line.startswith(word + " ")}


def _live_envs(marker: Path) -> set[int]:
    """Env processes built and not yet through their close (the marker's own books)."""
    return {pid for pid in _lines(marker, "built") - _lines(marker, "closed") if _alive(pid)}


# -- 1. the supervisor never waits for a worker ---------------------------------------------------


def test_a_slow_env_close_holds_its_slot_and_never_stalls_the_endpoint(
    endpoint: Any, short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A's env takes until the gate opens to close. Meanwhile the supervisor answers every
    probe at once, counts a's slot as taken (its process still runs: never more env
    processes than ``sessions``, prewarm included), and b steps on. Once a's worker exits
    (cleanly, however slowly) its slot is free and no crash is logged."""
    marker, gate = short_tmp / "envs", short_tmp / "gate"
    target = functools.partial(make_slow_close_env, marker=str(marker), gate=str(gate))
    with caplog.at_level(logging.INFO, logger="rlmesh.serve"):
        server = endpoint(target, sessions=2, prewarm=1)
        a, b = rnp.RemoteEnv(server.address), rnp.RemoteEnv(server.address)
        try:
            pid_a = _pid(a)
            _pid(b)
            a.close()
            assert _wait(lambda: pid_a in _lines(marker, "closing"))
            for i in range(10):
                health = ping(server.address)
                assert (health.sessions_in_use, health.state) == (2, "busy"), i
                assert len(_live_envs(marker)) <= 2
                b.step(0)
            assert _alive(pid_a)
            gate.touch()
            assert _wait(lambda: not _alive(pid_a))
            assert _wait(lambda: ping(server.address).sessions_in_use == 1)
            with rnp.RemoteEnv(server.address) as c:
                assert _pid(c) != pid_a
                assert len(_live_envs(marker)) <= 2
        finally:
            gate.touch()
            a.close()
            b.close()
    assert server._supervisor.crashes == 0
    assert "its session ended" not in caplog.text  # a slow clean exit is no crash


# -- 2. any contract that serves with sessions=1 serves with sessions=N ----------------------------


def test_a_contract_larger_than_a_control_datagram_serves_many_sessions(endpoint: Any) -> None:
    """30,000 per-element bounds: the worker's Ready pickles to about 600 KB, more than one
    unix datagram carries. It travels in a memory file; clients get the whole contract."""
    server = endpoint(functools.partial(make_big_bounds_env, 30_000), sessions=2, prewarm=1)
    assert _wait(lambda: server._supervisor.contract is not None)
    space = server.env_contract.observation_space
    assert space.shape == [30_000]
    clients = [rnp.RemoteEnv(server.address) for _ in range(2)]
    try:
        for env in clients:
            obs, _info = env.reset(seed=0)
            assert obs.shape == (30_000,)
            high = env.observation_space.high
            assert high[0] == 1.0 and high[-1] == 30_000.0
            obs, *_ = env.step(0)
            assert float(obs[0]) == 0.5
    finally:
        for env in clients:
            env.close()


def test_a_space_over_the_limits_is_a_build_error_naming_the_limit(endpoint: Any) -> None:
    server = endpoint(functools.partial(make_declaring_env, MAX_SPACE_ELEMENTS + 1), sessions=2)
    with pytest.raises(Exception, match="MAX_SPACE_ELEMENTS") as caught:
        rnp.RemoteEnv(server.address)
    assert "upgrade one side" not in str(caught.value)
    assert ping(server.address).state == "ready"


# -- 3. a worker that dies before it is ready is restarted with a capped backoff ---------------


def test_a_simulator_that_segfaults_while_building_is_restarted_with_backoff(
    endpoint: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """It used to be re-forked about 67 times a second, forever, with one log line each."""
    with caplog.at_level(logging.INFO, logger="rlmesh.serve"):
        server = endpoint(make_segfaulting_env, sessions=2, prewarm=1)
        supervisor = server._supervisor
        assert _wait(lambda: supervisor.started >= 3, 60.0)
        with pytest.raises(
            Exception, match=r"died while starting \(killed by signal 11 \(SIGSEGV\)\)"
        ):
            rnp.RemoteEnv(server.address)
        assert ping(server.address).state in ("ready", "busy")  # the endpoint serves on
    assert supervisor.backoff.pauses[:2] == [0.5, 1.0]
    assert supervisor.started <= supervisor.backoff.failures + 1  # each start waited for its pause
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, lines  # one log line for the whole streak
    assert "killed by signal 11 (SIGSEGV) before its env was ready" in lines[0]


# -- 5. every process of an endpoint ends after its supervisor's death ------------------------------

_SERVER_SCRIPT = """
import functools, sys
import rlmesh
from rlmesh.serve import ServeOptions
from sessions_envs import make_stuck_env
target = functools.partial(make_stuck_env, marker=sys.argv[1], release=sys.argv[2])
options = ServeOptions(drain_timeout_seconds=1.0, close_timeout_seconds=1.0)
server = rlmesh.EnvServer(target, "127.0.0.1:0", sessions=2, options=options)
with open(sys.argv[3] + ".tmp", "w") as f:
    f.write(server.address)
import os
os.replace(sys.argv[3] + ".tmp", sys.argv[3])
server.serve()
"""


@pytest.mark.parametrize("start", ["forkserver", "fresh"])
def test_every_process_of_an_endpoint_ends_after_its_supervisor_is_killed(
    short_tmp: Path, start: str
) -> None:
    """The supervisor is SIGKILLed while a worker is stuck inside ``step()``: the worker, the
    fork server and any helper end within their bounded grace, and the client's connection
    drops. They used to run on forever."""
    marker, release, ready = short_tmp / "envs", short_tmp / "release", short_tmp / "ready"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER_SCRIPT, str(marker), str(release), str(ready)],
        env=child_env(RLMESH_WORKER_START=start),
        stderr=subprocess.DEVNULL,
    )
    below: set[int] = set()
    outcome: list[BaseException] = []
    client_thread = None
    try:
        address = wait_for_ready_file(proc, ready, 60)
        env = rnp.RemoteEnv(address)
        env.reset(seed=0)

        def stuck_step() -> None:
            try:
                env.step(0)
            except BaseException as exc:  # what the client sees when its worker is gone
                outcome.append(exc)

        client_thread = threading.Thread(target=stuck_step, daemon=True)
        client_thread.start()
        assert _wait(lambda: bool(_lines(marker, "stepping")), 60.0)
        below = _descendants(proc.pid)
        assert _lines(marker, "stepping") <= below
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert _wait(lambda: not any(_alive(p) for p in below), 45.0), [
            p for p in below if _alive(p)
        ]
        client_thread.join(30.0)
        assert not client_thread.is_alive()
        assert outcome and isinstance(outcome[0], (ConnectionLost, SessionClosed)), outcome
        env.close()
    finally:
        release.touch()
        stop_process(proc)
        for pid in below:  # on a failure, nothing is left behind
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if client_thread is not None:
            client_thread.join(10.0)
