"""TLS on ``tls://host:port`` addresses (issue 36): certificates from ``trustme``.

``rlmesh serve CartPole-v1 --address tls://127.0.0.1:PORT --tls-cert C --tls-key K`` is
driven by ``RemoteEnv("tls://...", tls_ca=CA)``; a client that does not trust the CA fails
with a certificate error naming the host; a server that wants client certificates
(``--tls-client-ca``) refuses a client without one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
from conftest import child_env, require, wait_for_ready_file
from rlmesh import numpy as rn
from rlmesh.errors import AuthenticationFailed, ConnectFailed, TLSError
from rlmesh.serve import ModelServer, ServeOptions, ping

trustme = require("trustme", "the test extra: certificates for the TLS tests")


class Certs:
    def __init__(self, root: Path) -> None:
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        self.cert, self.key, self.ca_pem = root / "cert.pem", root / "key.pem", root / "ca.pem"
        cert.private_key_and_cert_chain_pem.write_to_path(str(self.cert))
        cert.private_key_pem.write_to_path(str(self.key))
        self.ca.cert_pem.write_to_path(str(self.ca_pem))
        client = self.ca.issue_cert("rlmesh-client@example")
        self.client_cert, self.client_key = root / "client.pem", root / "client.key"
        client.private_key_and_cert_chain_pem.write_to_path(str(self.client_cert))
        client.private_key_pem.write_to_path(str(self.client_key))
        other = trustme.CA()  # a CA nobody here trusts
        self.untrusted_ca = root / "other-ca.pem"
        other.cert_pem.write_to_path(str(self.untrusted_ca))


@pytest.fixture
def certs(short_tmp: Path) -> Certs:
    return Certs(short_tmp)


def _tls_server(certs: Certs, env: Any = None, **options: Any) -> Any:
    return rlmesh.EnvServer(
        env if env is not None else gym.make("CartPole-v1"),
        "tls://127.0.0.1:0",
        options=ServeOptions(tls_cert=certs.cert, tls_key=certs.key, **options),
    ).start()


def test_the_cli_serves_tls_and_a_trusting_client_steps(certs: Certs, short_tmp: Path) -> None:
    ready = short_tmp / "ready"
    with open(short_tmp / "err", "wb") as err:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "rlmesh.cli", "serve", "CartPole-v1",
                "--address", "tls://127.0.0.1:0", "--tls-cert", str(certs.cert),
                "--tls-key", str(certs.key), "--ready-file", str(ready),
            ],
            env=child_env(),  # same host: the session may move into shared-memory rings
            stdout=subprocess.DEVNULL,
            stderr=err,
        )  # fmt: skip
    try:
        address = wait_for_ready_file(proc, ready, 60.0)
        assert address.startswith("tls://127.0.0.1:")
        env = rn.RemoteEnv(address, tls_ca=str(certs.ca_pem))
        obs, _ = env.reset(seed=0)
        for _ in range(20):
            obs, _, terminated, truncated, _ = env.step(int(obs[2] > 0))
            if terminated or truncated:
                obs, _ = env.reset()
        env.close()
        with pytest.raises(TLSError) as info:  # the system store does not know the test CA
            rn.RemoteEnv(address)
        text = str(info.value)
        assert "127.0.0.1" in text and "certificate" in text and "tls_ca" in text
        assert isinstance(info.value, ConnectFailed)
        with pytest.raises(TLSError):
            rn.RemoteEnv(address, tls_ca=str(certs.untrusted_ca))
        assert ping(address, tls_ca=str(certs.ca_pem)).state == "ready"
        health = subprocess.run(
            [sys.executable, "-m", "rlmesh.cli", "health", address, "--tls-ca", str(certs.ca_pem)],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert health.returncode == 0, health
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_tls_values_arrive_intact_large_frames_included(
    certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMESH_SHM", "0")  # the socket itself, not the same-host rings

    class Images(gym.Env):  # type: ignore[misc]
        observation_space = gym.spaces.Box(0, 255, (224, 224, 3), np.uint8)
        action_space = gym.spaces.Box(-1, 1, (16,), np.float32)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            self.n = 0
            return np.full((224, 224, 3), 7, np.uint8), {}

        def step(self, action: Any) -> Any:
            self.n += 1
            return (
                np.full((224, 224, 3), self.n % 256, np.uint8),
                float(action.sum()),
                False,
                False,
                {},
            )

    server = _tls_server(certs, Images())
    try:
        env = rn.RemoteEnv(server.address, tls_ca=str(certs.ca_pem))
        obs, _ = env.reset(seed=0)
        assert obs.shape == (224, 224, 3) and (obs == 7).all()
        for i in range(1, 6):
            obs, reward, *_ = env.step(np.full(16, 0.5, np.float32))
            assert (obs == i).all() and reward == pytest.approx(8.0)
        env.close()
    finally:
        server.shutdown()


def test_client_certificates_when_the_server_asks_for_them(
    certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _tls_server(certs, tls_client_ca=certs.ca_pem)
    try:
        with pytest.raises((TLSError, ConnectFailed)):
            env = rn.RemoteEnv(server.address, tls_ca=str(certs.ca_pem))
            env.reset(seed=0)  # TLS 1.3: a missing client certificate shows at the first read
        monkeypatch.setenv("RLMESH_TLS_CERT", str(certs.client_cert))
        monkeypatch.setenv("RLMESH_TLS_KEY", str(certs.client_key))
        env = rn.RemoteEnv(server.address, tls_ca=str(certs.ca_pem))
        env.reset(seed=0)
        env.step(0)
        env.close()
    finally:
        server.shutdown()


def test_tls_and_a_token_together(certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMESH_TLS_CA", str(certs.ca_pem))  # the CA from the environment
    server = _tls_server(certs, token="tok")
    try:
        with pytest.raises(AuthenticationFailed):
            rn.RemoteEnv(server.address)
        env = rn.RemoteEnv(server.address, token="tok")
        env.reset(seed=0)
        env.close()
    finally:
        server.shutdown()


def test_a_model_server_serves_tls(certs: Certs) -> None:
    server = ModelServer(
        rn.Model(lambda obs: 0),
        "tls://127.0.0.1:0",
        options=ServeOptions(tls_cert=certs.cert, tls_key=certs.key),
    ).start()
    try:
        result = rlmesh.RemoteModel(server.address, tls_ca=str(certs.ca_pem)).run(
            gym.make("CartPole-v1"), seeds=[0], max_episode_steps=5
        )
        assert result.num_episodes == 1
    finally:
        server.shutdown()


def test_tls_configuration_mistakes_are_refused_before_binding(
    certs: Certs, short_tmp: Path
) -> None:
    with pytest.raises(ValueError, match="--tls-cert"):
        rlmesh.EnvServer(gym.make("CartPole-v1"), "tls://127.0.0.1:0")
    with pytest.raises(ValueError, match="unix socket"):
        rlmesh.EnvServer(
            gym.make("CartPole-v1"),
            f"unix://{short_tmp}/x.sock",
            options=ServeOptions(tls_cert=certs.cert, tls_key=certs.key),
        )
    with pytest.raises(ValueError, match="cannot load the certificate"):
        rlmesh.EnvServer(
            gym.make("CartPole-v1"),
            "tls://127.0.0.1:0",
            options=ServeOptions(tls_cert=certs.ca_pem, tls_key=certs.key),
        )


@pytest.mark.parametrize("shm", ["0", "1"])
def test_a_multi_session_endpoint_serves_tls_through_its_supervisor(
    certs: Certs, monkeypatch: pytest.MonkeyPatch, shm: str
) -> None:
    """Each session's worker gets a socket pair; the supervisor keeps the TLS session and
    relays its bytes (with rings on, a same-host session moves into them as ever)."""
    monkeypatch.setenv("RLMESH_SHM", shm)
    server = rlmesh.EnvServer(
        "CartPole-v1",
        "tls://127.0.0.1:0",
        sessions=2,
        options=ServeOptions(tls_cert=certs.cert, tls_key=certs.key, token="tok"),
    ).start()
    try:
        with pytest.raises(AuthenticationFailed):
            rn.RemoteEnv(server.address, tls_ca=str(certs.ca_pem))
        a = rn.RemoteEnv(server.address, tls_ca=str(certs.ca_pem), token="tok")
        b = rn.RemoteEnv(server.address, tls_ca=str(certs.ca_pem), token="tok")
        expected = gym.make("CartPole-v1")
        for env, seed in ((a, 3), (b, 4)):
            obs, _ = env.reset(seed=seed)
            assert (obs == expected.reset(seed=seed)[0]).all()
            for _ in range(30):
                obs, _, terminated, truncated, _ = env.step(int(obs[2] + 0.5 * obs[3] > 0))
                assert not (terminated or truncated)  # a balancing policy: no reset needed
        a.close()
        b.close()
        c = rn.RemoteEnv(
            server.address, tls_ca=str(certs.ca_pem), token="tok"
        )  # a slot is free again
        c.reset(seed=0)
        c.close()
    finally:
        server.shutdown()


def test_a_plain_client_on_a_tls_endpoint_fails_and_the_server_keeps_serving(certs: Certs) -> None:
    server = _tls_server(certs)
    try:
        plain = server.address.replace("tls://", "tcp://")
        with pytest.raises(ConnectFailed):
            rn.RemoteEnv(plain, connect_timeout_seconds=5)
        env = rn.RemoteEnv(server.address, tls_ca=str(certs.ca_pem))
        env.reset(seed=0)
        env.close()
    finally:
        server.shutdown()


def test_a_client_that_resets_before_it_is_accepted_leaves_the_tls_endpoint_serving(
    certs: Certs,
) -> None:
    import socket
    import struct

    server = rlmesh.EnvServer(
        gym.make("CartPole-v1"),
        "tls://127.0.0.1:0",
        options=ServeOptions(tls_cert=certs.cert, tls_key=certs.key),
    )
    try:
        host, port = server.address.removeprefix("tls://").rsplit(":", 1)
        gone = socket.create_connection((host, int(port)))
        gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        gone.close()  # a reset, waiting in the backlog before the loop accepts it
        server._loop.listener.setblocking(False)  # as the loop's run() sets it
        server._loop._accept()  # the loop's accept, before it runs: that client only
        server.start()
        env = rn.RemoteEnv(server.address, tls_ca=str(certs.ca_pem))
        env.reset(seed=0)
        env.close()
    finally:
        server.shutdown()
