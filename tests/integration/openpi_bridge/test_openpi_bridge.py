"""The openpi bridge end to end: PolicyClient against ModelServer(protocol="openpi").

The "Done when" of the client half: ``rlmesh.run(PolicyClient(url, obs_map=...), env,
seeds=range(10))`` equals the same model run locally, per seed; then chunks, workers,
per-connection episodes, the typed errors, and a server that survives its clients.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import rlmesh
from rlmesh.errors import (
    AdapterResolutionError,
    ConnectFailed,
    ConnectionLost,
    EndpointBusy,
    ModelError,
    RequestTimeout,
    ShapeMismatch,
)
from rlmesh.numpy import Model
from rlmesh.openpi import Image, PolicyClient, State
from rlmesh.serve import ModelServer

from .openpi_envs import (
    BoxEnv,
    ChunkModel,
    ContextModel,
    FailingModel,
    PixelCartPole,
    PromptModel,
    SlowModel,
    WideModel,
    policy,
)


def key(result: Any) -> list[tuple[Any, ...]]:
    return [(e.seed, e.steps, e.reward, e.terminated, e.truncated) for e in result.episodes]


@pytest.fixture
def openpi_server() -> Iterator[Callable[..., ModelServer]]:
    """``openpi_server(model, **kwargs) -> ModelServer`` on 127.0.0.1:0, started; all shut down after."""
    servers: list[ModelServer] = []

    def _serve(model: Any, **kwargs: Any) -> ModelServer:
        server = ModelServer(model, "127.0.0.1:0", protocol="openpi", **kwargs).start()
        servers.append(server)
        return server

    yield _serve
    for server in servers:
        server.shutdown()


def test_run_through_PolicyClient_equals_the_model_run_locally_per_seed(
    openpi_server: Callable[..., ModelServer],
) -> None:
    server = openpi_server(Model(policy))
    client = PolicyClient(
        server.address,
        obs_map={
            "observation/image": "observation/image",
            "observation/state": "observation/state",
        },
    )
    seeds = range(10)
    local = rlmesh.run(Model(policy), PixelCartPole(), seeds=seeds)
    remote = rlmesh.run(client, PixelCartPole(), seeds=seeds)
    assert key(remote) == key(local)
    assert len({e.steps for e in local.episodes}) > 1  # the seeds gave different episodes
    # the default map sends a Dict observation key by key: the same run again
    assert key(rlmesh.run(PolicyClient(server.address), PixelCartPole(), seeds=seeds)) == key(local)


def test_chunks_replay_at_the_execution_horizon_like_a_local_chunk_model(
    openpi_server: Callable[..., ModelServer],
) -> None:
    served = ChunkModel()
    server = openpi_server(served)
    seeds = range(4)
    local = rlmesh.run(ChunkModel(), PixelCartPole(), seeds=seeds, execution_horizon=5)
    remote = rlmesh.run(
        PolicyClient(server.address), PixelCartPole(), seeds=seeds, execution_horizon=5
    )
    assert key(remote) == key(local)
    steps = sum(e.steps for e in remote.episodes)
    # one request per five steps (each episode starts a fresh chunk)
    assert served.forwards == sum(-(-e.steps // 5) for e in remote.episodes)
    assert served.forwards < steps / 4


def test_workers_each_connect_and_equal_the_local_run(
    openpi_server: Callable[..., ModelServer],
) -> None:
    server = openpi_server(Model(policy), sessions=2)
    seeds = list(range(6))
    local = rlmesh.run(Model(policy), PixelCartPole(), seeds=seeds)
    remote = rlmesh.run(PolicyClient(server.address), PixelCartPole, seeds=seeds, workers=2)
    assert key(remote) == key(local)


def test_each_connection_is_one_episode_with_its_own_context(
    openpi_server: Callable[..., ModelServer],
) -> None:
    served = ContextModel()
    server = openpi_server(served)
    result = rlmesh.run(PolicyClient(server.address), PixelCartPole(), seeds=[1, 2, 3])
    episodes = [eid for eid, index in served.seen if index == 0]
    assert len(episodes) == 3 == len(set(episodes))  # a fresh episode (connection) per episode
    assert sum(1 for _ in served.seen) == sum(e.steps for e in result.episodes)
    for eid in episodes:
        indices = [i for e, i in served.seen if e == eid]
        assert indices == list(range(len(indices)))
    server.shutdown()  # waits for every connection's handler: the last disconnect is seen
    assert sorted(served.ended) == sorted(episodes)  # on_episode_end fired at each disconnect


def test_the_prompt_comes_from_prompt_or_the_runs_instruction(
    openpi_server: Callable[..., ModelServer],
) -> None:
    server = openpi_server(PromptModel())
    env = BoxEnv()
    rlmesh.run(PolicyClient(server.address), env, seeds=[0], max_episode_steps=2)
    assert env.actions[0].tolist() == [-1.0]  # no prompt: none sent
    rlmesh.run(PolicyClient(server.address, prompt="abc"), env, seeds=[0], max_episode_steps=2)
    assert env.actions[-1].tolist() == [3.0]
    client = PolicyClient(server.address, prompt="abc")
    rlmesh.run(client, env, seeds=[0], max_episode_steps=2, instruction="pick it up")
    assert env.actions[-1].tolist() == [10.0]
    assert client.observation_keys == ["observation/state", "prompt"]


def test_metadata_and_health_probe(openpi_server: Callable[..., ModelServer]) -> None:
    server = openpi_server(ChunkModel(), sessions=2)
    client = PolicyClient(server.address)
    assert client.metadata == {
        "model": "ChunkModel",
        "spec": None,
        "execution_horizon": 5,
        "protocol": "openpi",
    }
    health = server.address.replace("ws://", "http://") + "/healthz"
    with urllib.request.urlopen(health, timeout=10) as reply:
        assert reply.status == 200
    client.close()


# -- typed errors ------------------------------------------------------------------------------


def test_a_server_error_reply_is_a_ModelError_and_the_server_survives(
    openpi_server: Callable[..., ModelServer],
) -> None:
    server = openpi_server(FailingModel())
    with pytest.raises(ModelError, match="exploded on purpose"):
        rlmesh.run(PolicyClient(server.address), BoxEnv(), seeds=[0])
    with pytest.raises(ModelError, match="exploded on purpose"):  # a new client, a new session
        rlmesh.run(PolicyClient(server.address), BoxEnv(), seeds=[0])


def test_actions_of_the_wrong_shape_raise_ShapeMismatch_naming_actions(
    openpi_server: Callable[..., ModelServer],
) -> None:
    server = openpi_server(WideModel())
    with pytest.raises(ShapeMismatch, match=r"'actions' are float32\[1, 7\].*float32\[1\]") as info:
        rlmesh.run(PolicyClient(server.address), BoxEnv(), seeds=[0])
    assert info.value.key == "actions"
    assert info.value.expected == "float32[H, 1]"


def test_an_obs_map_that_names_nothing_fails_at_bind_naming_the_key(
    openpi_server: Callable[..., ModelServer],
) -> None:
    server = openpi_server(Model(policy))
    client = PolicyClient(server.address, obs_map={"observation/wrist_image": "wrist"})
    with pytest.raises(
        AdapterResolutionError, match=r"obs_map\['observation/wrist_image'\].*'wrist'"
    ):
        rlmesh.run(client, PixelCartPole(), seeds=[0])
    image_of_state = PolicyClient(
        server.address, obs_map={"observation/image": Image("observation/state", size=8)}
    )
    with pytest.raises(AdapterResolutionError, match="needs an image"):
        rlmesh.run(image_of_state, PixelCartPole(), seeds=[0])


def test_images_are_resized_and_states_concatenated_as_the_map_says(
    openpi_server: Callable[..., ModelServer],
) -> None:
    seen: list[dict[str, Any]] = []

    def record(obs: dict[str, Any]) -> int:
        seen.append({k: (v.dtype.str, v.shape) for k, v in obs.items()})
        return 0

    server = openpi_server(Model(record))
    client = PolicyClient(
        server.address,
        obs_map={
            "image": Image("observation/image", size=(8, 4), dtype="float32"),
            "state": State("observation/state", "observation/state", dtype="float64"),
        },
    )
    rlmesh.run(client, PixelCartPole(), seeds=[0], max_episode_steps=3)
    assert seen[0] == {"image": ("<f4", (8, 4, 3)), "state": ("<f8", (8,))}


def test_connection_refused_is_ConnectFailed() -> None:
    server = ModelServer(Model(policy), "127.0.0.1:0", protocol="openpi")
    url = server.address
    server.shutdown()  # bound, never served, released: nothing listens there now
    with pytest.raises(ConnectFailed, match="could not connect to the openpi server"):
        rlmesh.run(PolicyClient(url, connect_timeout_seconds=2), BoxEnv(), seeds=[0])


def test_a_server_that_goes_away_is_ConnectionLost(
    openpi_server: Callable[..., ModelServer],
) -> None:
    server = openpi_server(PromptModel())
    client = PolicyClient(server.address)
    obs = {"observation/state": np.zeros(4, np.float32)}
    assert client.predict_chunk(obs).shape == (1, 1)
    server.shutdown()
    with pytest.raises(ConnectionLost, match="closed the connection"):
        client.predict_chunk(obs)


def test_a_busy_server_is_EndpointBusy_after_the_connect_timeout(
    openpi_server: Callable[..., ModelServer],
) -> None:
    server = openpi_server(PromptModel())  # sessions=1
    holder = PolicyClient(server.address)
    assert holder.metadata["model"] == "PromptModel"  # holds the one session open
    with pytest.raises(EndpointBusy, match="busy"):  # (a timeout shorter than a loaded
        # machine's HTTP handshake would be a ConnectFailed before any answer)
        PolicyClient(server.address, connect_timeout_seconds=2.0).predict_chunk({})
    holder.close()
    assert PolicyClient(server.address).metadata["model"] == "PromptModel"


def test_a_slow_reply_is_a_RequestTimeout(openpi_server: Callable[..., ModelServer]) -> None:
    server = openpi_server(SlowModel.from_config(delay_s=0.5))
    client = PolicyClient(server.address, request_timeout_seconds=0.05)
    with pytest.raises(RequestTimeout, match="did not answer within"):
        client.predict_chunk({})


def test_a_hostile_client_is_refused_and_the_server_keeps_serving(
    openpi_server: Callable[..., ModelServer],
) -> None:
    from websockets.sync.client import connect

    server = openpi_server(PromptModel())
    for message, code in (
        ("a text frame", 1003),
        (b"\xc1 not msgpack", 1007),
        (b"\x93\x01\x02\x03", 1007),
    ):
        with connect(server.address, compression=None, proxy=None) as ws:
            ws.recv(timeout=10)  # metadata
            ws.send(message)
            reason = ws.recv(timeout=10)
            assert isinstance(reason, str) and "rlmesh openpi server" in reason
            with pytest.raises(Exception):  # noqa: B017 - the server closed this one connection
                ws.recv(timeout=10)
            assert ws.close_code == code
    assert PolicyClient(server.address).predict_chunk({}).tolist() == [[-1.0]]


def test_a_vector_envs_lanes_each_get_a_connection_and_prefetch_overlaps_requests(
    openpi_server: Callable[..., ModelServer],
) -> None:
    import gymnasium as gym

    served = ContextModel()
    server = openpi_server(served, sessions=2)
    vec = gym.vector.SyncVectorEnv([PixelCartPole, PixelCartPole])
    result = rlmesh.run(PolicyClient(server.address), vec, seeds=range(4))
    assert result.num_episodes == 4
    assert len({eid for eid, index in served.seen if index == 0}) >= 4  # one episode per connection
    vec.close()
    chunked = openpi_server(ChunkModel())
    seeds = range(3)
    local = rlmesh.run(
        ChunkModel(), PixelCartPole(), seeds=seeds, execution_horizon=5, prefetch_lead=1
    )
    remote = rlmesh.run(
        PolicyClient(chunked.address),
        PixelCartPole(),
        seeds=seeds,
        execution_horizon=5,
        prefetch_lead=1,
    )
    assert key(remote) == key(local)


def test_a_server_shut_down_before_it_served_leaves_no_thread_behind() -> None:
    import threading

    before = {t.ident for t in threading.enumerate()}
    server = ModelServer(Model(policy), "127.0.0.1:0", protocol="openpi")
    server.shutdown()
    assert [t.name for t in threading.enumerate() if t.ident not in before] == []


def test_a_token_is_checked_before_the_session_starts(
    openpi_server: Callable[..., ModelServer], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 36: ``Authorization: Bearer`` checked in ``_admit``: HTTP 401, logged, the model
    untouched; the right token opens the session."""
    import logging

    from rlmesh.errors import AuthenticationFailed
    from rlmesh.serve import ServeOptions

    model = PromptModel()
    server = openpi_server(model, options=ServeOptions(token="op3npi"))
    caplog.set_level(logging.WARNING, logger="rlmesh.openpi")
    for token in (None, "wrong"):
        with pytest.raises(AuthenticationFailed, match="Authorization: Bearer"):
            _ = PolicyClient(server.address, token=token).metadata
    assert sum("authentication failed" in r.getMessage() for r in caplog.records) == 2
    client = PolicyClient(server.address, token="op3npi")
    assert client.metadata["model"] == "PromptModel"
    client.close()  # the endpoint serves one client at a time
    import pickle

    again = pickle.loads(pickle.dumps(PolicyClient(server.address, token="op3npi")))
    assert again.metadata["model"] == "PromptModel"  # a worker's copy dials with the token
    again.close()
