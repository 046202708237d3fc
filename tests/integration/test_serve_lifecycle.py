"""Server lifecycle: idle timeout, remote shutdown, shutdown/close-once, wait(), sockets, GC.

Covers SRV-40..46, CFG-1..3, CLT-11, DELTA-13 (``close_env_on_shutdown``), DELTA-18
(servers stopped at garbage collection) and the raw wire answer to ``Shutdown``.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path

import pytest
from integration_envs import BlockingEnv, CountdownEnv

import rlmesh
import rlmesh.numpy as rnp
from rlmesh import EnvServer, ServeOptions
from rlmesh.transport import Connection, dial, parse_connect_address
from rlmesh.wire import frames, messages as m

pytestmark = pytest.mark.timeout(60)


def raw_shutdown(address: str, reason: str) -> m.ShutdownReply:
    """Send a bare ``Shutdown`` before any ``Hello`` and return the reply (CFG-2)."""
    conn = Connection(dial(parse_connect_address(address), 5.0), frames.PRE_HANDSHAKE_LIMITS)
    try:
        conn.send(m.encode_message(m.Shutdown(reason=reason), 1))
        frame = conn.recv_frame()
        assert frame is not None and frame.request_id == 1
        return m.decode_header(frame)
    finally:
        conn.close()


# -- idle timeout (CFG-3) --------------------------------------------------------------------------


def test_an_idle_timeout_stops_the_server_and_closes_the_env():
    env = CountdownEnv(3)
    server = EnvServer(env, options=ServeOptions(idle_timeout_seconds=0.2)).start()
    assert server.wait(timeout=20) is True
    assert server.stop_reason == "idle timeout"
    assert env.closed == 1


def test_an_in_flight_request_holds_an_idle_server_alive(serve):
    env = BlockingEnv()
    server = serve(env, options=ServeOptions(idle_timeout_seconds=0.2))
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        result: list[object] = []
        worker = threading.Thread(target=lambda: result.append(client.step(1)))
        worker.start()
        assert env.entered.wait(10)
        time.sleep(0.4)  # well past the idle window, with the step still running
        env.release.set()
        worker.join(10)
        assert result and result[0][0].tolist() == [1]  # type: ignore[index]
        obs, *_ = client.step(0)  # the server is still serving this session
        assert obs.tolist() == [2]
    assert server.wait(timeout=20) is True
    assert server.stop_reason == "idle timeout"


def test_ServeOptions_rejects_non_positive_timeouts_and_is_immutable():
    for name in ("idle_timeout_seconds", "drain_timeout_seconds", "close_timeout_seconds"):
        with pytest.raises(ValueError, match=f"{name} must be positive"):
            ServeOptions(**{name: 0})
        with pytest.raises(ValueError, match=f"{name} must be positive"):
            ServeOptions(**{name: -1.0})
    options = ServeOptions(idle_timeout_seconds=2)
    assert options.idle_timeout_seconds == 2.0 and options.allow_remote_shutdown is False
    with pytest.raises(AttributeError):
        options.allow_remote_shutdown = True  # type: ignore[misc]
    with pytest.raises(TypeError):
        ServeOptions(True)  # type: ignore[misc]  # keyword-only


# -- remote shutdown (CFG-2, CLT-11) ----------------------------------------------------------------


def test_remote_shutdown_is_refused_by_default_and_the_server_keeps_serving(serve, monkeypatch):
    monkeypatch.delenv("RLMESH_ALLOW_REMOTE_SHUTDOWN", raising=False)
    server = serve(CountdownEnv(3))
    reply = raw_shutdown(server.address, "tests")
    assert reply.accepted is False
    assert reply.message == "remote shutdown is disabled for this environment endpoint"
    with rnp.RemoteEnv(server.address) as client:
        assert client.shutdown("please") is False
        client.reset()  # still usable: a refused shutdown changes nothing
    assert server.wait(timeout=0.05) is False
    assert server.stop_reason is None


def test_remote_shutdown_is_accepted_when_allowed_and_the_client_closes(serve):
    env = CountdownEnv(3)
    server = serve(env, options=ServeOptions(allow_remote_shutdown=True))
    client = rnp.RemoteEnv(server.address)
    client.reset()
    assert client.shutdown("done with it") is True
    assert client.closed
    with pytest.raises(ConnectionError):
        client.step(0)
    assert server.wait(timeout=20) is True
    assert server.stop_reason == "remote shutdown: done with it"
    assert env.closed == 1


@pytest.mark.parametrize("value", ["1", " TRUE ", "true"])
def test_RLMESH_ALLOW_REMOTE_SHUTDOWN_turns_remote_shutdown_on(serve, monkeypatch, value):
    monkeypatch.setenv("RLMESH_ALLOW_REMOTE_SHUTDOWN", value)
    server = serve(CountdownEnv(3))
    reply = raw_shutdown(server.address, "ci")
    assert (reply.accepted, reply.message) == (True, "shutdown accepted: ci")
    assert server.wait(timeout=20) is True


def test_RLMESH_ALLOW_REMOTE_SHUTDOWN_cannot_turn_it_off(serve, monkeypatch):
    monkeypatch.setenv("RLMESH_ALLOW_REMOTE_SHUTDOWN", "0")
    server = serve(CountdownEnv(3), options=ServeOptions(allow_remote_shutdown=True))
    reply = raw_shutdown(server.address, "")
    assert (reply.accepted, reply.message) == (True, "shutdown accepted")
    assert server.wait(timeout=20) is True


# -- shutdown, close-once, restart (SRV-41..44, DELTA-13) --------------------------------------------


def test_shutdown_is_idempotent_and_closes_the_env_exactly_once(serve):
    env = CountdownEnv(3)
    server = serve(env)
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
    assert env.closed == 0
    server.shutdown()
    server.shutdown()
    assert env.closed == 1
    assert server.stop_reason == "shutdown"
    assert server.wait() is True


def test_shutdown_with_a_client_still_connected_ends_its_session(serve):
    env = CountdownEnv(3)
    server = serve(env)
    client = rnp.RemoteEnv(server.address)
    client.reset()
    server.shutdown()
    assert env.closed == 1
    with pytest.raises(ConnectionError):
        client.step(0)
    client.close()


def test_every_lane_is_closed_exactly_once(serve):
    lanes = [CountdownEnv(2) for _ in range(3)]
    server = serve(lanes)
    server.shutdown()
    server.shutdown()
    assert [lane.closed for lane in lanes] == [1, 1, 1]


def test_close_env_on_shutdown_false_leaves_env_close_to_the_caller(serve):
    env = CountdownEnv(3)
    lanes = [CountdownEnv(2) for _ in range(2)]
    serve(env, close_env_on_shutdown=False).shutdown()
    serve(lanes, close_env_on_shutdown=False).shutdown()
    assert env.closed == 0 and [lane.closed for lane in lanes] == [0, 0]


def test_shutdown_before_start_closes_the_env_immediately_and_start_is_then_refused():
    env = CountdownEnv(3)
    server = EnvServer(env)
    server.shutdown()
    assert env.closed == 1
    with pytest.raises(RuntimeError, match="shut down"):
        server.start()
    with pytest.raises(RuntimeError, match="shut down"):
        server.serve()
    server.shutdown()
    assert env.closed == 1


def test_serve_or_start_after_stop_and_a_second_start_raise_RuntimeError():
    server = EnvServer(CountdownEnv(3)).start()
    try:
        with pytest.raises(RuntimeError, match="already serving"):
            server.start()
        with pytest.raises(RuntimeError, match="already serving"):
            server.serve()
    finally:
        server.shutdown()
    with pytest.raises(RuntimeError, match="cannot serve again"):
        server.start()
    with pytest.raises(RuntimeError, match="cannot serve again"):
        server.serve()


def test_wait_semantics():
    server = EnvServer(CountdownEnv(3))
    with pytest.raises(RuntimeError, match="start"):
        server.wait(0.01)  # SRV-41: before start()
    server.start()
    try:
        for bad in (-1.0, float("nan"), float("inf")):
            with pytest.raises(ValueError, match="timeout"):
                server.wait(bad)
        assert server.wait(timeout=0.05) is False
        assert server.wait(timeout=0) is False
    finally:
        server.shutdown()
    assert server.wait() is True
    assert server.wait(timeout=0) is True


def test_wait_is_refused_while_serve_runs_in_the_foreground():
    env = CountdownEnv(3)
    server = EnvServer(env)
    thread = threading.Thread(target=server.serve)  # off the main thread: no signal handlers
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while rlmesh.serve.ping(server.address).state != "ready" and time.monotonic() < deadline:
            time.sleep(0.01)  # pragma: no cover - ping already succeeded
        with pytest.raises(RuntimeError, match="foreground"):
            server.wait(0.01)
        with rnp.RemoteEnv(server.address) as client:
            client.reset()
    finally:
        server.shutdown()
        thread.join(10)
    assert not thread.is_alive()
    assert env.closed == 1


def test_the_unix_socket_file_is_removed_on_shutdown(serve):
    server = serve(CountdownEnv(3), "unix")
    path = Path(server.address.removeprefix("unix://"))
    assert path.is_socket()
    server.shutdown()
    assert not path.exists()


def test_the_unix_socket_file_is_removed_when_an_unstarted_server_shuts_down(short_tmp: Path):
    path = short_tmp / "never.sock"
    server = EnvServer(CountdownEnv(3), f"unix://{path}")
    assert path.is_socket()
    server.shutdown()
    assert not path.exists()


def test_EnvServer_is_a_context_manager_that_shuts_down_on_exit():
    env = CountdownEnv(3)
    with EnvServer(env, "127.0.0.1:0") as server:
        server.start()
        with rnp.RemoteEnv(server.address) as client:
            client.reset()
    assert env.closed == 1
    assert server.wait(0) is True
    with pytest.raises(ConnectionError):
        rnp.RemoteEnv(server.address, connect_timeout_seconds=2)


def test_an_unstarted_server_is_closed_at_garbage_collection():
    env = CountdownEnv(3)
    server = EnvServer(env)
    address = server.address
    del server
    gc.collect()
    assert env.closed == 1  # DELTA-18 / SRV-43
    with pytest.raises(ConnectionError):
        rnp.RemoteEnv(address, connect_timeout_seconds=2)


def test_env_calls_run_on_the_serving_thread(serve):
    seen: set[int] = set()

    class ThreadRecordingEnv(CountdownEnv):
        def reset(self, **kwargs):  # type: ignore[no-untyped-def]
            seen.add(threading.get_ident())
            return super().reset(**kwargs)

        def step(self, action):  # type: ignore[no-untyped-def]
            seen.add(threading.get_ident())
            return super().step(action)

    server = serve(ThreadRecordingEnv(3))
    for _ in range(2):
        with rnp.RemoteEnv(server.address) as client:
            client.reset()
            client.step(0)
    assert len(seen) == 1 and threading.get_ident() not in seen  # DELTA-16


def test_no_server_thread_outlives_shutdown():
    before = {t.ident for t in threading.enumerate()}
    server = EnvServer(CountdownEnv(3)).start()
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
    server.shutdown()
    leftover = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert leftover == []
    assert os.environ.get("RLMESH_WORKFLOW_EDITION") == ""  # conftest keeps the warning quiet


def test_a_connected_client_that_sends_no_requests_does_not_hold_an_idle_server(serve):
    env = CountdownEnv(3)
    server = serve(env, options=ServeOptions(idle_timeout_seconds=0.2))
    client = rnp.RemoteEnv(server.address)  # handshake only: not session activity (CFG-3)
    try:
        assert rlmesh.serve.ping(server.address).state == "busy"  # nor are pings
        assert server.wait(timeout=20) is True
        assert server.stop_reason == "idle timeout"
        with pytest.raises(ConnectionError):
            client.reset()
    finally:
        client.close()
    assert env.closed == 1


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_servers_release_every_socket_however_they_end():
    before = _open_fds()
    EnvServer(CountdownEnv(3)).shutdown()  # never started
    server = EnvServer(CountdownEnv(3)).start()
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
    server.shutdown()
    unstarted = EnvServer(CountdownEnv(3))
    del unstarted
    gc.collect()  # DELTA-18: dropped without shutdown()
    assert _open_fds() == before
