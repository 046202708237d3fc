"""The README/seed quickstart, as written: CartPole served in one process, driven from another.

Covers SRV-1/SRV-5/SRV-7 (bind during construction, resolved address), RDY-1/RDY-3
(the address is announced only once a handshake can succeed), CLI-4/DELTA-23
(``rlmesh serve`` in a child process) and CLT-2/CLT-7/CLT-8 (client surface).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
import rlmesh.numpy as rnp
from conftest import child_env, stop_process
from rlmesh.numpy import RemoteEnv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def drive_one_episode(env: RemoteEnv, seed: int) -> tuple[float, dict[str, object]]:
    obs, info = env.reset(seed=seed)
    assert isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs.shape == (4,)
    assert len(info["episode_ids"]) == 1  # INFO-1
    total, done, steps = 0.0, False, 0
    while not done and steps < 600:
        action = int(obs[2] + 0.5 * obs[3] > 0)
        obs, reward, terminated, truncated, info = env.step(action)
        assert (
            isinstance(reward, float)
            and isinstance(terminated, bool)
            and isinstance(truncated, bool)
        )
        total += reward
        done = terminated or truncated
        steps += 1
    assert done, "CartPole ends within 500 steps"
    assert info["completed_episodes"] == 1  # DEC-5: present on a scalar step, 1 when it ended
    return total, info


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_quickstart_CartPole_served_by_a_child_process_is_driven_from_this_one(
    serve_process, transport
):
    proc, address = serve_process("CartPole-v1", transport=transport)
    assert address.startswith("tcp://127.0.0.1:" if transport == "tcp" else "unix:///")
    assert not address.endswith(":0")  # SRV-7: the real port
    with RemoteEnv(address) as env:
        assert env.address == address
        assert env.env_contract.id == "CartPole-v1"
        assert env.env_contract.num_envs == 1
        assert env.render_mode is None
        obs, info = env.reset(seed=42)
        action = env.action_space.sample()
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.shape == (4,) and reward == 1.0
        total, _ = drive_one_episode(env, seed=7)
        assert total >= 1.0
    assert proc.poll() is None  # a client close() never stops the server (CLT-10)


def test_quickstart_seeded_resets_through_a_child_process_match_a_local_CartPole(serve_process):
    _, address = serve_process("CartPole-v1")
    local = gym.make("CartPole-v1")
    with RemoteEnv(address) as env:
        for seed in (0, 42):
            remote_obs, _ = env.reset(seed=seed)
            local_obs, _ = local.reset(seed=seed)
            np.testing.assert_array_equal(remote_obs, local_obs)
            for action in (0, 1, 1, 0):
                remote = env.step(action)
                local_step = local.step(action)
                np.testing.assert_array_equal(remote[0], local_step[0])
                assert remote[1:4] == tuple(local_step[1:4])


@pytest.mark.parametrize("transport", ["tcp", "unix"])
def test_quickstart_in_thread_server_and_client(serve, transport):
    server = serve(gym.make("CartPole-v1"), transport)
    assert repr(server) == f"EnvServer(address='{server.address}')"
    with rnp.RemoteEnv(server.address) as env:
        total, _ = drive_one_episode(env, seed=3)
        assert total >= 1.0
    # the plain client gets rlmesh.Tensor leaves (VAL-2)
    with rlmesh.RemoteEnv(server.address) as env:
        obs, _ = env.reset(seed=3)
        assert isinstance(obs, rlmesh.Tensor)
        assert obs.dtype == "float32" and obs.shape == [4]


def test_quickstart_server_address_is_final_before_start():
    server = rlmesh.EnvServer(gym.make("CartPole-v1"), "127.0.0.1:0")
    try:
        address = server.address
        assert address.startswith("tcp://127.0.0.1:") and not address.endswith(":0")
        server.start()
        assert server.address == address
        with rnp.RemoteEnv(address) as env:  # RDY-1: a handshake succeeds right after start()
            env.reset(seed=0)
    finally:
        server.shutdown()


def test_ctrl_c_stops_rlmesh_serve_with_exit_code_130_after_closing_the_env(
    serve_process, short_tmp
):
    marker = short_tmp / "closed.txt"
    kwargs = json.dumps({"path": str(marker)})
    proc, address = serve_process("integration_envs:make_marker", "--kwargs-json", kwargs)
    with RemoteEnv(address) as env:
        env.reset()
        env.step(0)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130  # DELTA-17/DELTA-23
    assert marker.read_text() == "closed\n"  # SRV-43: exactly once, before the process exits


def test_ready_fd_receives_exactly_one_line_with_the_bound_address_then_EOF(short_tmp):
    read_fd, write_fd = os.pipe()
    cmd = [
        sys.executable,
        "-m",
        "rlmesh.cli",
        "serve",
        "CartPole-v1",
        "--address",
        "127.0.0.1:0",
        "--ready-fd",
        str(write_fd),
    ]
    proc = subprocess.Popen(cmd, env=child_env(), pass_fds=(write_fd,), stdout=subprocess.DEVNULL)
    os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as reader:
            data = reader.read()  # RDY-3: the server closes its end after one line, so this ends
        address = data.decode()
        assert address.endswith("\n") and address.count("\n") == 1
        address = address.strip()
        assert address.startswith("tcp://127.0.0.1:") and not address.endswith(":0")
        assert rlmesh.serve.ping(address).state == "ready"
    finally:
        stop_process(proc)


README_SERVER = """
import gymnasium as gym
import rlmesh

server = rlmesh.EnvServer(gym.make("CartPole-v1"), {address!r})
server.serve()                      # blocks; Ctrl-C stops it gracefully
print("returned after a graceful shutdown:", server.stop_reason, flush=True)
"""


def test_readme_quickstart_foreground_serve_in_one_process_and_RemoteEnv_in_another(short_tmp):
    path = short_tmp / "cartpole.sock"
    address = f"unix://{path}"
    proc = subprocess.Popen(
        [sys.executable, "-c", README_SERVER.format(address=address)],
        env=child_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        rlmesh.serve.wait_ready(address, timeout_seconds=60)
        env = RemoteEnv(address)  # the README's process 2, verbatim but for the address
        obs, info = env.reset(seed=42)
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        env.close()
        assert reward == 1.0
        proc.send_signal(signal.SIGINT)  # DELTA-17: the first Ctrl-C shuts down gracefully ...
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        # ... and serve() returns, no traceback (issue 18 amends DELTA-17: the README's promise)
        assert "returned after a graceful shutdown: interrupted" in out
        assert not path.exists()  # SRV-45: the socket file is gone
    finally:
        stop_process(proc)
