"""Sessions between processes on one host go through shared-memory rings, transparently."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

import gymnasium as gym
import pytest

import rlmesh.numpy as rnp
from conftest import child_env
from rlmesh.transport import shm
from rlmesh.transport.connection import busy_poll_default

pytestmark = pytest.mark.skipif(
    not shm.shm_supported() or not busy_poll_default(),
    reason="shared-memory rings need x86-64 Linux and busy polling (two or more CPUs)",
)
pytestmark = [pytest.mark.slow, pytestmark]  # child processes


def _ring_files() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(f"rlmesh-{os.getpid()}-")}


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_a_session_with_a_server_process_uses_rings_and_leaves_no_file(serve_process, transport):
    _proc, address = serve_process("CartPole-v1", transport=transport)
    with rnp.RemoteEnv(address) as env:
        assert env._session.conn.shm is None  # a connect alone never pays for the rings
        obs, _ = env.reset(seed=3)
        for i in range(300):
            if i == 2:
                assert env._session.conn.shm is not None  # moved before the third request
                assert _ring_files() == set()  # and the file is already unlinked
            obs, reward, terminated, truncated, _ = env.step(i % 2)
            assert obs.shape == (4,) and reward == 1.0
            if terminated or truncated:
                obs, _ = env.reset()
    assert _ring_files() == set()


def test_a_vector_session_on_rings_matches_gymnasium(serve_process):
    _proc, address = serve_process("CartPole-v1", "--num-envs", "4")
    with rnp.RemoteVectorEnv(address) as env:
        obs, info = env.reset(seed=0)
        assert obs.shape == (4, 4) and len(info["episode_ids"]) == 4
        for i in range(50):
            obs, rewards, terminated, truncated, info = env.step([i % 2] * 4)
            assert rewards.shape == (4,) and terminated.dtype == bool
        assert env._session.conn.shm is not None


def test_a_server_with_RLMESH_SHM_0_declines_and_the_socket_carries_on(serve_process):
    env_vars = child_env()
    env_vars["RLMESH_SHM"] = "0"
    _proc, address = serve_process("CartPole-v1", env=env_vars)
    with rnp.RemoteEnv(address) as env:
        env.reset(seed=0)
        for _ in range(5):
            assert env.step(1)[0].shape == (4,)
        assert env._session.conn.shm is None
    assert _ring_files() == set()


def test_a_client_with_RLMESH_SHM_0_stays_on_the_socket(serve_process, monkeypatch):
    _proc, address = serve_process("CartPole-v1")
    monkeypatch.setenv("RLMESH_SHM", "0")
    with rnp.RemoteEnv(address) as env:
        env.reset(seed=0)
        for _ in range(5):
            env.step(0)
        assert env._session.conn.shm is None


def test_a_server_in_this_process_keeps_the_socket(serve):
    server = serve(gym.make("CartPole-v1"))
    with rnp.RemoteEnv(server.address) as env:
        env.reset(seed=0)
        for _ in range(5):
            env.step(0)
        assert env._session.conn.shm is None  # one GIL for both ends: sockets do better
    assert _ring_files() == set()


def test_frames_larger_than_the_ring_travel_on_the_socket_in_order(serve_process):
    _proc, address = serve_process("integration_envs:make_big_obs", transport="unix")
    with rnp.RemoteEnv(address) as env:
        obs, _ = env.reset()
        assert obs.shape == (1200, 1000) and int(obs[5, 5]) == 7
        for t in range(1, 6):
            obs, *_ = env.step(t % 2)
            assert int(obs[5, 5]) == t and int(obs[0, 0]) == t % 2
        assert env._session.conn.shm is not None


def test_a_request_timeout_on_rings_raises_TimeoutError_in_time(serve_process):
    proc, address = serve_process("integration_envs:make_sleepy")
    env = rnp.RemoteEnv(address, request_timeout_seconds=0.3)
    try:
        env.reset()
        env.step(0)
        env.step(0)
        assert env._session.conn.shm is not None
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"timed out after 0\.300s"):
            env.step(1)  # the env hangs for a minute
        assert time.monotonic() - started < 10
    finally:
        proc.kill()  # stuck in the env: no graceful stop to wait for
        proc.wait(30)
        env.close()


def _scribble(env, how: str) -> None:  # type: ignore[no-untyped-def]
    """Publish hostile bytes in the client's ring, as a buggy or malicious client could."""
    conn = env._session.conn
    ch = conn.shm
    w = ch._wpos
    base = 4096 + w % ch._cap
    if how == "position":
        ch._ctl[0] = w + (1 << 40)  # far more than the ring holds
    elif how == "length":
        ch._bytes[base : base + 8] = (1 << 62).to_bytes(8, "little")
        ch._ctl[0] = w + 64
    else:  # a plausible length, garbage frame bytes
        ch._bytes[base : base + 8] = (40).to_bytes(8, "little")
        ch._bytes[base + 8 : base + 48] = b"\xab" * 40
        ch._ctl[0] = w + 48
    conn.sock.send(shm.doorbell())  # wake the server if it sleeps
    # Let the server read it before this client's next write overwrites the same bytes:
    # the server answers with a protocol Error and closes the connection.
    select.select([conn.sock], [], [], 5)


@pytest.mark.parametrize("how", ["position", "length", "frame"])
def test_a_client_scribbling_on_its_ring_loses_its_session_and_the_server_serves_on(
    serve_process, how
):
    from rlmesh.errors import ConnectionLost, ProtocolException, SessionClosed
    from rlmesh.serve import ping

    _proc, address = serve_process("CartPole-v1")
    bad = rnp.RemoteEnv(address, request_timeout_seconds=5)
    bad.reset(seed=0)
    bad.step(0)
    bad.step(1)
    assert bad._session.conn.shm is not None
    _scribble(bad, how)
    with pytest.raises((ConnectionLost, ProtocolException, SessionClosed, TimeoutError)):
        for _ in range(3):
            bad.step(0)
    bad.close()
    assert ping(address).state == "ready"
    with rnp.RemoteEnv(address) as good:
        good.reset(seed=1)
        for i in range(20):
            assert good.step(i % 2)[0].shape == (4,)
        assert good._session.conn.shm is not None
    assert _ring_files() == set()


def test_sessions_on_rings_leave_no_mapping_or_descriptor_behind(serve_process):
    proc, address = serve_process("CartPole-v1")

    def server_state() -> tuple[int, int]:
        maps = Path(f"/proc/{proc.pid}/maps").read_text().count("rlmesh-")
        return maps, len(os.listdir(f"/proc/{proc.pid}/fd"))

    with rnp.RemoteEnv(address) as env:  # warm up: imports, first allocations
        env.reset(seed=0)
    before = server_state()
    for k in range(30):
        with rnp.RemoteEnv(address) as env:
            env.reset(seed=k)
            for i in range(4):
                env.step(i % 2)
            assert env._session.conn.shm is not None
    maps, fds = server_state()
    for _ in range(500):  # the server unmaps right after its CloseReply: let it get there (bounded)
        if maps == 0:
            break
        time.sleep(0.02)
        maps, fds = server_state()
    assert maps == 0 == before[0]
    assert fds <= before[1] + 2
    assert _ring_files() == set()


def test_a_server_killed_mid_step_on_rings_gives_ConnectionLost_not_a_hang(serve_process):
    import signal
    import threading

    from rlmesh.errors import ConnectionLost

    proc, address = serve_process("integration_envs:make_sleepy")
    env = rnp.RemoteEnv(address)
    killer = threading.Timer(0.5, proc.send_signal, args=(signal.SIGKILL,))
    try:
        env.reset()
        env.step(0)
        env.step(0)
        assert env._session.conn.shm is not None
        killer.start()
        with pytest.raises(ConnectionLost):
            env.step(1)  # waiting on the ring, then the socket, when the process dies
        proc.wait(timeout=30)
    finally:
        killer.cancel()
        env.close()
