"""Token authentication at the handshake, on every serving path (issue 36).

A client with no token or a wrong one gets ``AuthenticationFailed`` and the env sees no
call (counted); the right token steps; the server logs the peer and keeps serving; a
stranger's probe learns the health state only; a stranger's ``Shutdown`` is refused.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
import rlmesh.gymnasium
from conftest import (
    child_env,
    in_loopback_namespace,
    require,
    startup_line,
    wait_for_ready_file,
)
from rlmesh import numpy as rn
from rlmesh.errors import AuthenticationFailed, EndpointBusy
from rlmesh.serve import ModelServer, ServeOptions, ping
from rlmesh.transport import Connection
from rlmesh.wire import frames, messages as m

TOKEN = "s3cret-t0ken"


class CountingEnv(gym.Env):  # type: ignore[misc]
    """CartPole that counts every call the server makes on it."""

    def __init__(self) -> None:
        self.inner = gym.make("CartPole-v1")
        self.observation_space = self.inner.observation_space
        self.action_space = self.inner.action_space
        self.calls = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.calls += 1
        return self.inner.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        self.calls += 1
        return self.inner.step(action)

    def render(self) -> Any:
        self.calls += 1
        return None


def _serve(env: Any, **options: Any) -> Any:
    return rlmesh.EnvServer(
        env, "127.0.0.1:0", options=ServeOptions(token=TOKEN, **options)
    ).start()


def test_no_token_or_a_wrong_one_is_refused_before_the_env_sees_anything(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = CountingEnv()
    server = _serve(env)
    try:
        caplog.set_level(logging.WARNING, logger="rlmesh.serve")
        for token in (None, "wrong"):
            with pytest.raises(AuthenticationFailed) as info:
                rn.RemoteEnv(server.address, token=token)
            text = str(info.value)
            assert isinstance(info.value, ConnectionError)
            assert "env server" in text and server.address in text  # which side refused
            assert "token=" in text and "RLMESH_TOKEN" in text  # how to pass one
            assert TOKEN not in text
        assert env.calls == 0  # the env saw nothing
        refused = [
            r.getMessage() for r in caplog.records if "authentication failed" in r.getMessage()
        ]
        assert len(refused) == 2 and all("127.0.0.1:" in r for r in refused)  # the peer is named
        assert not any(TOKEN in r for r in refused)
        # the server keeps serving: the right token steps
        client = rn.RemoteEnv(server.address, token=TOKEN)
        client.reset(seed=0)
        client.step(0)
        client.close()
        assert env.calls == 2
    finally:
        server.shutdown()


def test_every_client_takes_token_or_rlmesh_token(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _serve(gym.make("CartPole-v1"))
    vector = rlmesh.EnvServer(
        [gym.make("CartPole-v1") for _ in range(2)],
        "127.0.0.1:0",
        options=ServeOptions(token=TOKEN),
    ).start()
    try:
        clients = [
            lambda **kw: rlmesh.RemoteEnv(server.address, **kw),
            lambda **kw: rn.RemoteEnv(server.address, **kw),
            lambda **kw: rlmesh.gymnasium.RemoteEnv(server.address, **kw),
            lambda **kw: rn.RemoteVectorEnv(vector.address, **kw),
            lambda **kw: rlmesh.gymnasium.RemoteVectorEnv(vector.address, **kw),
            lambda **kw: rn.RemoteVectorEnv([server.address], **kw),  # fan-out over endpoints
            lambda **kw: rlmesh.gymnasium.RemoteVectorEnv([server.address], **kw),
        ]
        for make in clients:
            with pytest.raises(AuthenticationFailed):
                make()
            env = make(token=TOKEN)
            env.reset(seed=1)
            env.close()
        monkeypatch.setenv("RLMESH_TOKEN", TOKEN)  # or from the environment
        for make in clients:
            env = make()
            env.reset(seed=1)
            env.close()
    finally:
        server.shutdown()
        vector.shutdown()


def test_a_gymnasium_handle_with_a_wrong_token_is_refused_even_beside_a_live_one() -> None:
    # env.spec.make() (no token) shares this process's live connection; a token that is
    # given and wrong is refused, not papered over by that sharing
    server = _serve(gym.make("CartPole-v1"))
    try:
        env = rlmesh.gymnasium.RemoteEnv(server.address, token=TOKEN)
        env.reset(seed=0)
        with pytest.raises(AuthenticationFailed):
            rlmesh.gymnasium.RemoteEnv(server.address, token="wrong")
        again = env.spec.make()  # no token: this process's own connection
        again.close()
        env.close()
    finally:
        server.shutdown()


def test_the_sb3_vec_env_takes_a_token() -> None:
    require("stable_baselines3", "the sb3 extra")
    from rlmesh.sb3 import RemoteVecEnv

    server = _serve(gym.make("CartPole-v1"))
    try:
        with pytest.raises(AuthenticationFailed):
            RemoteVecEnv([server.address])
        venv = RemoteVecEnv([server.address], token=TOKEN)
        venv.reset()
        venv.close()
    finally:
        server.shutdown()


def test_a_stranger_probe_learns_the_state_only_and_its_shutdown_is_refused() -> None:
    env = CountingEnv()
    server = rlmesh.EnvServer(
        env, "127.0.0.1:0", options=ServeOptions(token=TOKEN, allow_remote_shutdown=True)
    ).start()
    try:
        health = ping(server.address)
        assert (health.state, health.authenticated) == ("ready", False)
        assert (health.sessions_in_use, health.session_limit) == (0, 0)  # withheld
        assert ping(server.address, token=TOKEN).authenticated is True
        with pytest.raises(AuthenticationFailed):
            ping(server.address, token="guess")
        # a Shutdown before Hello needs the token
        assert not _raw_shutdown(server.address, token="")
        assert not _raw_shutdown(server.address, token="guess")
        assert server.stop_reason is None
        assert _raw_shutdown(server.address, token=TOKEN)
        assert server.wait(10.0)
        assert env.calls == 0
    finally:
        server.shutdown()


def _raw_shutdown(address: str, *, token: str) -> bool:
    host, port = address.split("://")[1].rsplit(":", 1)
    conn = Connection(socket.create_connection((host, int(port)), timeout=10))
    try:
        msg = m.AuthShutdown(reason="test", token=token) if token else m.Shutdown(reason="test")
        conn.send(m.encode_message(msg, 1))
        frame = conn.recv_frame()
        assert frame is not None
        reply = m.decode_header(frame)
        assert isinstance(reply, m.ShutdownReply)
        return bool(reply.accepted)
    finally:
        conn.close()


def test_repeated_failures_from_a_host_are_held_back_not_answered_at_once() -> None:
    from rlmesh._token import FREE_FAILURES

    server = _serve(gym.make("CartPole-v1"))
    loop = server._loop
    try:
        for _ in range(FREE_FAILURES):
            with pytest.raises(AuthenticationFailed):
                rn.RemoteEnv(server.address, token="guess")
        assert loop._held == []  # a few typos are answered at once
        # the next guess is held back: its answer waits (the client times out first here)
        with pytest.raises(rlmesh.errors.RequestTimeout):
            rn.RemoteEnv(server.address, token="guess", connect_timeout_seconds=0.3)
        assert loop._gate.failures == FREE_FAILURES + 1
        # the right token is never slowed down, even from the same host
        client = rn.RemoteEnv(server.address, token=TOKEN)
        client.reset(seed=0)
        client.close()
    finally:
        server.shutdown()


def test_a_multi_session_endpoint_checks_the_token_before_a_worker_is_used() -> None:
    server = rlmesh.EnvServer(
        "CartPole-v1", "127.0.0.1:0", sessions=2, options=ServeOptions(token=TOKEN)
    ).start()
    supervisor = server._supervisor
    try:
        for token in (None, "wrong"):
            with pytest.raises(AuthenticationFailed):
                rn.RemoteEnv(server.address, token=token)
        assert supervisor.started == 0  # no worker was started (nor an env built) for them
        health = ping(server.address)
        assert health.authenticated is False and health.session_limit == 0
        assert ping(server.address, token=TOKEN).session_limit == 2
        client = rn.RemoteEnv(server.address, token=TOKEN)
        client.reset(seed=0)
        client.step(0)
        client.close()
    finally:
        server.shutdown()


def test_model_servers_check_the_token() -> None:
    model = rn.Model(lambda obs: 0)
    for sessions in (1, 2):
        server = ModelServer(
            model, "127.0.0.1:0", sessions=sessions, options=ServeOptions(token=TOKEN)
        ).start()
        try:
            with pytest.raises(AuthenticationFailed, match="model server"):
                rlmesh.RemoteModel(server.address).run(gym.make("CartPole-v1"), seeds=[0])
            result = rlmesh.RemoteModel(server.address, token=TOKEN).run(
                gym.make("CartPole-v1"), seeds=[0], max_episode_steps=5
            )
            assert result.num_episodes == 1
        finally:
            server.shutdown()


def test_run_dials_a_protected_server_with_its_own_token() -> None:
    server = _serve(gym.make("CartPole-v1"))
    try:
        assert server.token == TOKEN
        result = rlmesh.run(rlmesh.RANDOM_SAMPLE, server, seeds=[0], max_episode_steps=5)
        assert result.num_episodes == 1
        with pytest.raises(AuthenticationFailed):
            rlmesh.run(rlmesh.RANDOM_SAMPLE, server.address, seeds=[0], max_episode_steps=5)
    finally:
        server.shutdown()


def test_a_token_adds_nothing_per_step_nor_to_the_busy_refusal() -> None:
    server = _serve(gym.make("CartPole-v1"))
    try:
        first = rn.RemoteEnv(server.address, token=TOKEN)
        with pytest.raises(EndpointBusy):  # the right token, a busy endpoint: Busy, as ever
            rn.RemoteEnv(server.address, token=TOKEN)
        first.reset(seed=0)
        for _ in range(5):
            first.step(0)
        first.close()
    finally:
        server.shutdown()


def test_the_cli_refuses_beyond_loopback_without_a_token(short_tmp: Path) -> None:
    # in a loopback-only namespace: were the refusal broken, the server would bind 0.0.0.0
    proc = subprocess.run(
        in_loopback_namespace(
            [sys.executable, "-m", "rlmesh.cli", "serve", "CartPole-v1", "--address", "0.0.0.0:0"]
        ),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--token-file" in proc.stderr and "--insecure-no-auth" in proc.stderr
    model = subprocess.run(
        in_loopback_namespace(
            [
                sys.executable,
                "-m",
                "rlmesh.cli",
                "serve-model",
                "integration_envs:EchoEnv",
                "--address",
                "0.0.0.0:0",
            ]
        ),
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert model.returncode == 2 and "--token-file" in model.stderr, model.stderr
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlmesh.cli",
            "serve",
            "CartPole-v1",
            "--token-file",
            str(short_tmp / "nope"),
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "--token-file" in missing.stderr


def test_the_cli_serves_beyond_loopback_with_a_token(short_tmp: Path) -> None:
    token_file = short_tmp / "token"
    token_file.write_text(TOKEN + "\n")
    cmd = [
        sys.executable, "-m", "rlmesh.cli", "serve", "CartPole-v1", "--address", "0.0.0.0:0",
        "--token-file", str(token_file),
    ]  # fmt: skip
    line = startup_line(in_loopback_namespace(cmd))
    assert line.startswith("RLMesh serving env on tcp://0.0.0.0:"), line
    assert "token required" in line and "WARNING" not in line


def test_the_cli_serves_with_a_token_file_and_health_reads_it(short_tmp: Path) -> None:
    token_file = short_tmp / "token"
    token_file.write_text(TOKEN + "\n")
    ready = short_tmp / "ready"
    with open(short_tmp / "err", "wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "rlmesh.cli", "serve", "CartPole-v1", "--address", "127.0.0.1:0",
                "--token-file", str(token_file), "--ready-file", str(ready),
            ],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=err,
        )  # fmt: skip
    try:
        address = wait_for_ready_file(proc, ready, 60.0)
        with pytest.raises(AuthenticationFailed):
            rn.RemoteEnv(address)
        env = rn.RemoteEnv(address, token=TOKEN)
        env.reset(seed=0)
        env.close()
        health = [sys.executable, "-m", "rlmesh.cli", "health", address]
        out = subprocess.run(health, env=child_env(), capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "needs a token" in out.stdout, out
        out = subprocess.run(
            [*health, "--token-file", str(token_file)],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0 and "sessions 0/1" in out.stdout, out
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.stdout is not None
    assert b"token required" in proc.stdout.read()  # the status line says so


def test_an_old_client_without_tokens_reads_a_refusal_it_understands() -> None:
    """A client that knows no ``reason`` field decodes the refusal as a plain Incompatible."""
    server = _serve(gym.make("CartPole-v1"))
    try:
        host, port = server.address.split("://")[1].rsplit(":", 1)
        conn = Connection(socket.create_connection((host, int(port)), timeout=10))
        hello = rlmesh.wire.make_hello("old-client", None)
        conn.send(m.encode_message(hello, 1))
        frame = conn.recv_frame()
        assert frame is not None and frame.kind == m.Incompatible.KIND
        import msgspec

        old = msgspec.msgpack.decode(bytes(frame.header), type=m.Incompatible)  # 3 fields only
        assert old.message.startswith("authentication failed")
        conn.close()
    finally:
        server.shutdown()


def test_refusals_do_not_block_other_clients() -> None:
    server = _serve(gym.make("CartPole-v1"))
    errors: list[BaseException] = []

    def guesser() -> None:
        for _ in range(3):
            try:
                rn.RemoteEnv(server.address, token="nope")
            except AuthenticationFailed:
                continue
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

    try:
        t = threading.Thread(target=guesser)
        t.start()
        env = rn.RemoteEnv(server.address, token=TOKEN)
        obs, _ = env.reset(seed=3)
        assert np.asarray(obs).shape == (4,)
        env.close()
        t.join(30)
        assert not errors
    finally:
        server.shutdown()


def test_frames_stay_within_the_pre_handshake_limits() -> None:
    """A Hello with a token is still a tiny frame (the pre-handshake limits bound it)."""
    hello = rlmesh.wire.make_hello("x", None, token="t" * 4096)
    assert (
        sum(memoryview(b).nbytes for b in m.encode_message(hello, 1))
        < frames.PRE_HANDSHAKE_LIMITS.max_frame_bytes
    )
