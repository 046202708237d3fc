"""Issue 25: one endpoint, many sessions, each with its own env in its own worker process.

Every loop is bounded in count and time; no test asserts a wall-clock threshold (the
hung-env test checks the hung step is still pending while the other session stepped).
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sessions_envs import CRASH, HANG, SessionEnv, make_session_env
from test_hardening import bomb, closed_by_server, dial, frame_of, hello, raw_frame, read_reply

import rlmesh
import rlmesh.numpy as rnp
from conftest import child_env, descendants as _descendants, stop_process, wait_for_ready_file
from rlmesh.errors import (
    CODE_NUMBERS,
    ConnectionLost,
    EndpointBusy,
    EnvironmentException,
    SessionClosed,
)
from rlmesh.serve import ServeOptions, ping
from rlmesh.transport import Connection
from rlmesh.wire import messages as m

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def sessions_server(short_tmp: Path):
    """``sessions_server(sessions=4, transport="tcp", **kwargs)``: an in-process multi-session EnvServer."""
    servers: list[Any] = []

    def start(sessions: int = 4, transport: str = "tcp", target: Any = None, **kwargs: Any) -> Any:
        address = (
            f"unix://{short_tmp}/s{len(servers)}.sock" if transport == "unix" else "127.0.0.1:0"
        )
        target = target or functools.partial(make_session_env, marker=str(short_tmp / "closed"))
        server = rlmesh.EnvServer(target, address, sessions=sessions, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.shutdown()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in state


def _wait(pred: Any, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def _pid(env: Any) -> int:
    _obs, info = env.reset(seed=0)
    return int(info["pid"])


# -- the limit ------------------------------------------------------------------------------------


def test_eight_clients_on_four_sessions_four_served_four_busy_with_the_limit(sessions_server):
    server = sessions_server(4)
    served = [rnp.RemoteEnv(server.address) for _ in range(4)]
    try:
        pids = {_pid(env) for env in served}
        assert len(pids) == 4 and os.getpid() not in pids  # four worker processes, none of them us
        for _ in range(4):
            with pytest.raises(EndpointBusy, match=r"all 4 sessions .* in use \(sessions=4\)"):
                rnp.RemoteEnv(server.address)
        health = ping(server.address)
        assert (health.state, health.sessions_in_use, health.session_limit) == ("busy", 4, 4)
        for env in served:  # refused clients cost the served ones nothing
            env.step(0)
    finally:
        for env in served:
            env.close()


def test_clients_that_wait_for_a_slot_get_one_as_sessions_end(sessions_server):
    server = sessions_server(4)
    served = [rnp.RemoteEnv(server.address) for _ in range(4)]
    got: list[Any] = []
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            env = rnp.RemoteEnv(server.address, wait_for_slot=True, connect_timeout_seconds=60)
            env.reset(seed=1)
            got.append(env)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        assert not got  # every session is taken: they wait rather than fail
        for env in served:
            env.close()
        for t in threads:
            t.join(60)
        assert not errors and len(got) == 4
        assert len({int(e.reset(seed=0)[1]["pid"]) for e in got}) == 4
    finally:
        for env in got:
            env.close()


def test_a_waiting_client_still_gets_EndpointBusy_when_its_connect_timeout_passes(sessions_server):
    server = sessions_server(1, prewarm=1)
    with rnp.RemoteEnv(server.address), pytest.raises(EndpointBusy, match="waited"):
        rnp.RemoteEnv(server.address, wait_for_slot=True, connect_timeout_seconds=0.5)


# -- isolation ------------------------------------------------------------------------------------


def test_seeding_one_session_does_not_affect_another(sessions_server):
    server = sessions_server(2)
    with rnp.RemoteEnv(server.address) as a, rnp.RemoteEnv(server.address) as b:
        ref = SessionEnv()
        want = [ref.reset(seed=7)[0]] + [ref.step(0)[0] for _ in range(20)]
        got = [a.reset(seed=7)[0]]
        for i in range(20):
            b.reset(seed=1000 + i)  # the other session reseeds between every step of this one
            got.append(a.step(0)[0])
        np.testing.assert_array_equal(np.stack(got), np.stack(want))


def test_a_hung_env_in_one_session_does_not_stall_another(sessions_server, short_tmp):
    release = short_tmp / "release"
    server = sessions_server(2, target=functools.partial(make_session_env, release=str(release)))
    hung_done = threading.Event()
    with rnp.RemoteEnv(server.address) as a, rnp.RemoteEnv(server.address) as b:
        a.reset(seed=0)
        b.reset(seed=0)

        def hang() -> None:
            a.step(HANG)
            hung_done.set()

        t = threading.Thread(target=hang)
        t.start()
        try:
            for _ in range(200):
                b.step(0)
            assert not hung_done.is_set()  # 200 steps done while the other session is still stuck
        finally:
            release.touch()
            t.join(60)
        assert hung_done.is_set()
        a.step(0)  # and the hung session carries on once its env returns


def test_a_crashing_env_ends_only_its_session_and_the_next_client_gets_a_fresh_env(
    serve_process, short_tmp
):
    proc, address = serve_process("sessions_envs:make_session_env", "--sessions", "2")
    a = rnp.RemoteEnv(address)
    b = rnp.RemoteEnv(address)
    try:
        pid_a, pid_b = _pid(a), _pid(b)
        with pytest.raises(EnvironmentException, match="exploded"):
            a.step(CRASH)
        with pytest.raises(SessionClosed):
            a.step(0)
        for _ in range(10):
            b.step(0)
        assert _wait(lambda: not _alive(pid_a))  # the crashed session's worker is gone
        with rnp.RemoteEnv(address) as c:
            assert _pid(c) not in (pid_a, pid_b)
            c.step(0)
    finally:
        a.close()
        b.close()
    stop_process(proc)
    err = (short_tmp / "proc0.err").read_text()
    assert (
        "RuntimeError: the simulator exploded" in err and "Traceback" in err
    )  # the env's traceback is logged


def test_kill_9_of_a_session_worker_ends_only_that_session(serve_process, short_tmp):
    proc, address = serve_process("sessions_envs:make_session_env", "--sessions", "3")
    a = rnp.RemoteEnv(address)
    b = rnp.RemoteEnv(address)
    try:
        pid_a = _pid(a)
        _pid(b)
        os.kill(pid_a, signal.SIGKILL)
        with pytest.raises((ConnectionLost, SessionClosed)):
            for _ in range(100):
                a.step(0)
        for _ in range(10):
            b.step(0)
        assert _wait(lambda: ping(address).sessions_in_use == 1)
        with rnp.RemoteEnv(address) as c:
            assert _pid(c) != pid_a
    finally:
        a.close()
        b.close()
    assert proc.poll() is None  # the endpoint is still up
    stop_process(proc)
    assert (
        "killed by signal 9 (SIGKILL); its session ended" in (short_tmp / "proc0.err").read_text()
    )


# -- shutdown -------------------------------------------------------------------------------------


def _shm_files(pid: int) -> list[str]:
    try:
        return [f for f in os.listdir("/dev/shm") if f.startswith(f"rlmesh-{pid}-")]
    except OSError:
        return []


def test_sigterm_with_sessions_in_flight_drains_every_session_and_leaves_nothing(short_tmp):
    sock_path = short_tmp / "t.sock"
    marker = short_tmp / "closed"
    ready = short_tmp / "ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmesh.cli",
            "serve",
            "sessions_envs:make_session_env",
            "--param",
            f"marker={marker}",
            "--address",
            f"unix://{sock_path}",
            "--sessions",
            "4",
            "--prewarm",
            "1",
            "--ready-file",
            str(ready),
        ],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    clients = []
    try:
        address = wait_for_ready_file(proc, ready, 60)
        clients = [rnp.RemoteEnv(address) for _ in range(3)]
        pids = [_pid(c) for c in clients]
        for c in clients:
            for _ in range(
                8
            ):  # long enough to move into shared-memory rings where the host has them
                c.step(0)
        below = _descendants(proc.pid)
        assert (
            set(pids) <= below and len(below) >= 5
        )  # 3 sessions, 1 prewarmed worker, the forkserver
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.strip().splitlines()[-1] == "RLMesh server stopped (terminated)"
        assert "Traceback" not in err
        assert not sock_path.exists()
        closed = marker.read_text().splitlines()
        assert all(f"closed {pid}" in closed for pid in pids)  # every session's env was closed
        assert _wait(
            lambda: not any(_alive(pid) for pid in below)
        )  # no worker, forkserver or helper left
        for c in clients:
            with pytest.raises((ConnectionLost, SessionClosed)):
                for _ in range(10):
                    c.step(0)
    finally:
        for c in clients:
            c.close()
        stop_process(proc)
    assert _shm_files(os.getpid()) == []
    for pid in pids:
        assert _shm_files(pid) == []


def test_shutdown_stops_every_worker_and_closes_every_env(sessions_server, short_tmp):
    server = sessions_server(3, transport="unix", prewarm=1)
    clients = [rnp.RemoteEnv(server.address) for _ in range(2)]
    pids = [_pid(c) for c in clients]
    server.shutdown()
    assert server.stop_reason == "shutdown"
    assert not Path(server.address[len("unix://") :]).exists()
    assert _wait(lambda: not any(_alive(p) for p in pids))
    closed = (short_tmp / "closed").read_text()
    assert all(f"closed {pid}" in closed for pid in pids)
    for c in clients:
        c.close()
    with pytest.raises(ConnectionError):
        rnp.RemoteEnv(server.address, connect_timeout_seconds=2)


def test_a_remote_shutdown_from_a_session_stops_the_whole_endpoint(sessions_server):
    server = sessions_server(2, options=ServeOptions(allow_remote_shutdown=True))
    with rnp.RemoteEnv(server.address) as a, rnp.RemoteEnv(server.address) as b:
        a.reset()
        b.reset()
        assert a.shutdown("done") is not False
        assert server.wait(60)
    assert server.stop_reason is not None and server.stop_reason.startswith("remote shutdown")


def test_idle_timeout_ends_an_idle_session_then_the_endpoint(serve_process):
    proc, address = serve_process(
        "sessions_envs:make_session_env", "--sessions", "2", "--idle-timeout", "0.5"
    )
    env = rnp.RemoteEnv(address)
    env.reset()
    assert _wait(
        lambda: proc.poll() is not None, 60
    )  # the session idled out, then the endpoint with no session
    assert proc.returncode == 0
    with pytest.raises((ConnectionLost, SessionClosed)):
        env.step(0)
    env.close()


# -- lanes x sessions, prewarm, health -------------------------------------------------------------


def test_lanes_times_sessions(serve_process):
    _proc, address = serve_process(
        "sessions_envs:make_session_env", "--num-envs", "3", "--sessions", "2"
    )
    with rnp.RemoteVectorEnv(address) as a, rnp.RemoteVectorEnv(address) as b:
        assert a.num_envs == b.num_envs == 3
        oa, ia = a.reset(seed=5)
        ob, ib = b.reset(seed=5)
        np.testing.assert_array_equal(oa, ob)  # same seeds, separate envs: the same start
        for _ in range(5):
            oa = a.step(np.zeros(3, np.int64))[0]
        assert not np.array_equal(
            oa, b.step(np.zeros(3, np.int64))[0]
        )  # b has stepped once, a five times
        with pytest.raises(EndpointBusy):
            rnp.RemoteVectorEnv(address)


def test_prewarm_builds_envs_before_any_client_and_health_counts_sessions(sessions_server):
    server = sessions_server(3, prewarm=2)
    contract = None
    deadline = time.monotonic() + 60
    while (
        contract is None and time.monotonic() < deadline
    ):  # the workers publish their contract once built
        try:
            contract = server.env_contract
        except RuntimeError:
            time.sleep(0.05)
    assert (
        contract is not None
        and contract.num_envs == 1
        and list(contract.observation_space.shape) == [3]
    )
    assert ping(server.address).sessions_in_use == 0
    with rnp.RemoteEnv(server.address) as a:
        a.reset()
        h = ping(server.address)
        assert (h.state, h.sessions_in_use, h.session_limit) == ("ready", 1, 3)
    out = subprocess.run(
        [sys.executable, "-m", "rlmesh.cli", "health", server.address],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "sessions 0/3" in out or "sessions 1/3" in out  # the closed session may still be ending


def test_a_single_session_endpoint_reports_its_one_session():
    server = rlmesh.EnvServer(SessionEnv(), "127.0.0.1:0").start()
    try:
        assert (ping(server.address).sessions_in_use, ping(server.address).session_limit) == (0, 1)
        with rnp.RemoteEnv(server.address):
            h = ping(server.address)
            assert (h.state, h.sessions_in_use, h.session_limit) == ("busy", 1, 1)
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    "call",
    [
        "rlmesh.serve.serve_env(sessions_envs.make_session_env, ADDRESS, sessions=2)",
        "sessions_envs.SessionFactory.serve(sessions_envs.SessionFactory(), ADDRESS, sessions=2, prewarm=1)",
    ],
    ids=["serve_env", "EnvFactory.serve"],
)
def test_serve_env_and_env_factory_serve_take_sessions(short_tmp, call):
    script = (
        "import rlmesh.serve, sessions_envs\n"
        "if __name__ == '__main__':\n"
        f"    {call.replace('ADDRESS', repr(f'unix://{short_tmp}/f.sock'))}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        rlmesh.serve.wait_ready(f"unix://{short_tmp}/f.sock", timeout_seconds=60)
        with (
            rnp.RemoteEnv(f"unix://{short_tmp}/f.sock") as a,
            rnp.RemoteEnv(f"unix://{short_tmp}/f.sock") as b,
        ):
            assert _pid(a) != _pid(b)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    finally:
        stop_process(proc)


# -- hostile input, per session ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "attack",
    [
        raw_frame(m.Step.KIND, b"\x94\x91" + bomb(50_000) + b"\x80\x00\xc3", rid=2),  # nesting bomb
        b"RM\x01\x02\x02\x00\x00\x00"
        + b"\x01\x00\x00\x00"
        + b"\x00\x00\x00\x00"
        + (2**40).to_bytes(8, "little"),  # 1 TiB
    ],
    ids=["nesting", "frame-limit"],
)
def test_hostile_bytes_in_one_session_close_only_that_session(sessions_server, attack):
    server = sessions_server(2)
    with rnp.RemoteEnv(server.address) as good:
        good.reset(seed=0)
        sock = dial(server.address)
        conn, _ = hello(sock)
        sock.sendall(attack)
        reply = read_reply(conn)
        assert isinstance(reply, m.Error) and reply.code == CODE_NUMBERS["PROTOCOL"]
        assert closed_by_server(conn)
        sock.close()
        for _ in range(5):
            good.step(0)
    assert _wait(lambda: ping(server.address).sessions_in_use == 0)


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_hostile_bytes_before_the_handshake_never_reach_a_worker_or_stop_the_endpoint(
    sessions_server, transport
):
    server = sessions_server(2, transport=transport)
    with rnp.RemoteEnv(server.address) as good:
        good.reset(seed=0)
        for attack in (
            raw_frame(m.Ping.KIND, b"\x91" + bomb(100_000)),  # nesting bomb
            b"RM\x01\x07" + b"\xff" * 20,  # a prefix announcing a frame over every limit
            raw_frame(m.Step.KIND, b"\x90"),  # a session request before any handshake
        ):
            sock = dial(server.address)
            conn = Connection(sock)
            sock.sendall(attack)
            reply = read_reply(conn)
            assert reply is None or (
                isinstance(reply, m.Error) and reply.code == CODE_NUMBERS["PROTOCOL"]
            )
            assert closed_by_server(conn)
            sock.close()
            good.step(0)
        assert ping(server.address).sessions_in_use == 1


def test_a_hello_with_a_pipelined_request_is_refused_before_any_worker_sees_it(sessions_server):
    server = sessions_server(2)
    sock = dial(server.address)
    conn = Connection(sock)
    from rlmesh.wire import handshake

    sock.sendall(frame_of(handshake.make_hello("attacker", None)) + frame_of(m.Ping(), rid=2))
    reply = read_reply(conn)
    assert isinstance(reply, (m.Error, m.Welcome))  # refused, or answered if the Ping arrived later
    sock.close()
    with rnp.RemoteEnv(server.address) as a:
        a.reset()


def test_a_peer_that_never_reads_cannot_freeze_the_supervisor(sessions_server):
    server = sessions_server(2)
    host, port = server.address[len("tcp://") :].rsplit(":", 1)
    with rnp.RemoteEnv(server.address, request_timeout_seconds=20) as env:
        env.reset(seed=0)
        stranger = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        stranger.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stranger.connect((host, int(port)))
        stranger.setblocking(False)
        burst = frame_of(m.Ping()) * 4096
        dropped = False
        for i in range(20_000):
            try:
                stranger.send(burst)
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                dropped = True
                break
            env.step(0)
            if i % 50 == 0:
                with rnp.RemoteEnv(server.address) as other:  # new sessions still start meanwhile
                    other.reset()
        stranger.close()
        assert dropped, "the supervisor never dropped a peer that does not read"


# -- arguments ----------------------------------------------------------------------------------------


def test_an_env_instance_with_sessions_is_a_clear_error():
    with pytest.raises(TypeError, match="cannot be copied"):
        rlmesh.EnvServer(SessionEnv(), "127.0.0.1:0", sessions=2)
    maker = functools.partial(SessionEnv)
    maker.keywords["lock"] = threading.Lock()  # travels nowhere: the message names it
    with pytest.raises(
        TypeError, match=r"\.keywords\['lock'\] \(a _thread\.lock\) cannot be pickled"
    ):
        rlmesh.EnvServer(maker, "127.0.0.1:0", sessions=2)
    with pytest.raises(ValueError, match="prewarm"):
        rlmesh.EnvServer("CartPole-v1", "127.0.0.1:0", sessions=2, prewarm=3)
    with pytest.raises(ValueError, match="sessions"):
        rlmesh.EnvServer("CartPole-v1", "127.0.0.1:0", sessions=0)


def test_sessions_1_is_todays_in_process_server():
    server = rlmesh.EnvServer(SessionEnv(), "127.0.0.1:0", sessions=1)
    try:
        assert type(server) is rlmesh.EnvServer
        server.start()
        with rnp.RemoteEnv(server.address) as env:
            assert env.reset()[1]["pid"] == os.getpid()
    finally:
        server.shutdown()


def test_a_sandbox_bootstrap_serves_n_sessions(short_tmp):
    """The sandbox entry point passes RLMESH_SESSIONS through: N clients, one env process each."""
    ready = short_tmp / "ready"
    env = child_env(
        RLMESH_BOOTSTRAP_JSON='{"spec": {"kind": "gym", "env_id": "sessions_envs:make_session_env"}}',
        RLMESH_SESSIONS="2",
        RLMESH_ADDRESS=f"unix://{short_tmp}/sbx.sock",
        RLMESH_READY_FILE=str(ready),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlmesh.sandbox._bootstrap"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        address = wait_for_ready_file(proc, ready, 60)
        with rnp.RemoteEnv(address) as a, rnp.RemoteEnv(address) as b:
            assert _pid(a) != _pid(b)
            assert ping(address).session_limit == 2
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        assert proc.returncode == 0
        assert not (short_tmp / "sbx.sock").exists()
    finally:
        stop_process(proc)


def test_an_env_that_fails_to_build_is_a_clear_error_and_is_not_rebuilt_in_a_loop(sessions_server):
    from sessions_envs import make_broken

    server = sessions_server(2, target=make_broken, prewarm=2)
    with pytest.raises(
        ConnectionError, match="the env could not be built: RuntimeError: no simulator license"
    ):
        rnp.RemoteEnv(server.address, connect_timeout_seconds=30)
    time.sleep(1.0)
    assert (
        server._supervisor.started <= 5
    )  # prewarming backs off instead of rebuilding at once, forever
    assert ping(server.address).state in ("ready", "busy")  # and the endpoint keeps answering


def test_a_session_peer_that_pipelines_and_never_reads_is_dropped_alone(sessions_server):
    """The per-session backlog bound (1 MiB of replies) holds in a session worker: the peer
    that never reads its replies is dropped; the other session keeps stepping."""
    server = sessions_server(2)
    host, port = server.address[len("tcp://") :].rsplit(":", 1)
    with rnp.RemoteEnv(server.address, request_timeout_seconds=20) as good:
        good.reset(seed=0)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
        sock.connect((host, int(port)))
        sock.settimeout(20)
        _conn, _ = hello(sock)
        sock.setblocking(False)
        burst = b"".join(
            raw_frame(m.Step.KIND, b"\x94\x91\x00\x80\x00\xc3", rid=r) for r in range(2, 1002)
        )
        dropped = False
        for _ in range(50_000):  # bounded: ~1 MiB of queued error replies gets the peer dropped
            try:
                sock.send(burst)
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                dropped = True
                break
            good.step(0)
        sock.close()
        assert dropped, "the session worker never dropped a peer that does not read"
        for _ in range(5):
            good.step(0)


def test_a_torch_env_is_served_per_session(serve_process):
    from conftest import require

    require("torch")
    _proc, address = serve_process("CartPole-v1", "--sessions", "2", "--framework", "torch")
    import rlmesh.torch as rt

    with rnp.RemoteEnv(address) as a, rt.RemoteEnv(address, wait_for_slot=True) as b:
        a.reset(seed=0)
        b.reset(seed=0)
        assert a.step(1)[0].shape == (4,) and tuple(b.step(0)[0].shape) == (4,)
        with pytest.raises(EndpointBusy, match="waited"):
            rt.RemoteEnv(address, wait_for_slot=True, connect_timeout_seconds=0.3)
