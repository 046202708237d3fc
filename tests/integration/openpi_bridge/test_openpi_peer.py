"""The openpi wire against the real peer: ``openpi-client`` 0.1.2 in its own venv.

Bytes first (our packing equals ``openpi_client.msgpack_numpy``'s, both ways), then the
"Done when" of the bridge's serving half: ``WebsocketClientPolicy(host, port).infer(obs)``
gets actions of the right shape from ``rlmesh serve-model ... --protocol openpi``, and
``get_server_metadata()`` is the served model's metadata; then PolicyClient against a
server written with openpi-client's own packing.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rlmesh
from conftest import child_env, stop_process, wait_for_ready_file
from rlmesh.errors import ModelError
from rlmesh.openpi import PolicyClient, packb, unpackb

from .peer import catalog, describe

HERE = Path(__file__).resolve().parent


def test_our_bytes_are_openpi_clients_bytes(run_peer: Callable[..., Any]) -> None:
    theirs = run_peer("pack")
    ours = [packb(v).hex() for v in catalog()]
    assert len(ours) == len(theirs) == len(catalog())
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, f"catalog[{i}] packs differently: {catalog()[i]!r}"


def test_openpi_client_reads_what_we_pack_and_we_read_what_it_packs(
    run_peer: Callable[..., Any],
) -> None:
    theirs = run_peer("unpack", stdin="\n".join(packb(v).hex() for v in catalog()))
    ours = [describe(unpackb(bytes.fromhex(h))) for h in run_peer("pack")]
    assert theirs == ours
    assert theirs[0]["dict"]["actions"]["shape"] == [3, 4]


# -- serving an rlmesh model to openpi-client -------------------------------------------------


@pytest.fixture
def serve_model_cli(short_tmp: Path) -> Iterator[Callable[..., str]]:
    """``serve_model_cli(target, *args) -> ws://...``: ``rlmesh serve-model ... --protocol openpi``."""
    procs: list[subprocess.Popen[bytes]] = []

    def _spawn(target: str, *args: str) -> str:
        ready = short_tmp / f"ready{len(procs)}"
        cmd = [sys.executable, "-m", "rlmesh.cli", "serve-model", target, "--protocol", "openpi",
               "--address", "127.0.0.1:0", "--ready-file", str(ready), *args]  # fmt: skip
        with open(short_tmp / f"err{len(procs)}", "wb") as err:
            proc = subprocess.Popen(
                cmd, env=child_env(PYTHONPATH=str(HERE)), stdout=subprocess.DEVNULL, stderr=err
            )
        procs.append(proc)
        return wait_for_ready_file(proc, ready, 60.0)

    yield _spawn
    for proc in procs:
        stop_process(proc)


def test_WebsocketClientPolicy_infers_from_rlmesh_serve_model_protocol_openpi(
    serve_model_cli: Callable[..., str], run_peer: Callable[..., Any]
) -> None:
    url = serve_model_cli("served_openpi:ChunkPolicy")
    assert url.startswith("ws://127.0.0.1:")
    out = run_peer("infer", url, "3")
    metadata = out["metadata"]["dict"]
    assert metadata["model"] == "ChunkPolicy"
    assert metadata["execution_horizon"] == 10  # the model's native_chunk
    assert metadata["protocol"] == "openpi"
    assert len(out["replies"]) == 3
    reply = out["replies"][0]
    actions = reply["actions"]
    assert actions["ndarray"] == "<f4" and actions["shape"] == [10, 7]
    # the model saw the state and the prompt: every frame is state[:6] + [len(prompt)]
    state = np.arange(8, dtype=np.float32) / 8
    first = np.asarray(actions["values"][0], dtype=np.float32)
    np.testing.assert_allclose(first[:6], state[:6], rtol=1e-6)
    assert first[6] == pytest.approx(len("pick up the cup"))
    timing = reply["server_timing"]["dict"]
    assert timing["infer_ms"] >= 0
    assert "prev_total_ms" in out["replies"][1]["server_timing"]["dict"]


def test_a_model_failure_reaches_openpi_client_as_its_error_and_the_server_goes_on(
    serve_model_cli: Callable[..., str], run_peer: Callable[..., Any]
) -> None:
    url = serve_model_cli("served_openpi:ChunkPolicy")
    out = run_peer("infer", url, "1", "fail")
    assert "Error in inference server" in out["error"]
    assert "told to fail" in out["error"]
    again = run_peer("infer", url, "1")  # the server survives its client's failure
    assert again["replies"][0]["actions"]["shape"] == [10, 7]


# -- PolicyClient against a server written with openpi-client's packing ------------------------


@pytest.fixture
def peer_server(peer: Path, short_tmp: Path) -> Iterator[str]:
    portfile = short_tmp / "peer-url"
    proc = subprocess.Popen(
        [str(peer), str(HERE / "peer.py"), "serve", str(portfile), "60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield wait_for_ready_file(proc, portfile, 60.0)
    finally:
        stop_process(proc)


def test_PolicyClient_drives_an_env_with_a_server_that_packs_as_openpi_client(
    peer_server: str,
) -> None:
    client = PolicyClient(peer_server, prompt="reach")
    assert client.metadata == {"policy": "peer", "action_dim": 4, "horizon": 10}
    env = ServedStateEnv()
    result = rlmesh.run(client, env, seeds=range(2), execution_horizon=5)
    assert [e.steps for e in result.episodes] == [12, 12]
    # each action is the observation's first four state entries, replayed 5 steps per chunk
    assert env.actions[0].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert env.actions[5].tolist() == [5.0, 5.0, 5.0, 5.0]
    assert env.actions[6].tolist() == [5.0, 5.0, 5.0, 5.0]


def test_an_openpi_servers_error_reply_is_a_ModelError_with_its_traceback(
    peer_server: str,
) -> None:
    client = PolicyClient(peer_server, prompt="fail")
    with pytest.raises(ModelError, match="told to fail"):
        rlmesh.run(client, ServedStateEnv(), seeds=[0])


class ServedStateEnv:
    """A 12-step env whose state is ``[t] * 8``; it records the actions it receives."""

    def __init__(self) -> None:
        import gymnasium as gym

        self.observation_space = gym.spaces.Dict(
            {"observation/state": gym.spaces.Box(-1e3, 1e3, (8,), np.float32)}
        )
        self.action_space = gym.spaces.Box(-1e3, 1e3, (4,), np.float32)
        self.t = 0
        self.actions: list[Any] = []

    def _obs(self) -> dict[str, Any]:
        return {"observation/state": np.full(8, self.t, np.float32)}

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.actions.append(np.asarray(action))
        self.t += 1
        return self._obs(), 0.0, self.t >= 12, False, {}

    def close(self) -> None:
        pass
