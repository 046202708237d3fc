"""``ModelServer`` in process: bind, episodes, predictions, errors, and N sessions on one model.

A raw client (``serve_wire.Wire``) speaks the model service over a unix socket; the
model sees exactly what a user's model would.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from serve_wire import (  # noqa: F401  (fixtures)
    ScriptedEnv,
    Wire,
    no_threads_left_fixture,
    short_dir_fixture,
    started_fixture,
)

from rlmesh.errors import CODE_NUMBERS
from rlmesh.numpy import Model
from rlmesh.serve import EnvServer, ModelServer, ping
from rlmesh.wire import messages as m

pytestmark = pytest.mark.timeout(60)

CODES = {v: k for k, v in CODE_NUMBERS.items()}
OBS = np.array([0.25, -0.5, 0.75], np.float32)


@pytest.fixture(scope="module")
def contract() -> dict[str, Any]:
    """The contract of ``ScriptedEnv`` (Box(3) observations, Discrete(2) actions), as a client sends it."""
    server = EnvServer(ScriptedEnv(), "unix:///tmp/rlm-contract-never-served.sock")
    try:
        return server.env_contract.to_dict()
    finally:
        server.shutdown()


class Sign(Model):
    """Action 1 when the first observation is positive; records what it is told."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[float]] = []
        self.ends: list[str] = []
        self.fail: BaseException | None = None

    def predict(self, obs: Any) -> int:
        if self.fail is not None:
            raise self.fail
        self.seen.append(np.asarray(obs).tolist())
        return int(obs[0] > 0)

    def on_episode_end(self, episode_id: str = "") -> None:
        self.ends.append(episode_id)


def _bound(server: Any, contract: dict[str, Any], lanes: int = 1) -> Wire:
    client = Wire(server.address)
    welcome = client.hello(service="model")
    assert isinstance(welcome, m.Welcome) and welcome.service == "model", welcome
    reply = client.request(m.Bind(contract=contract, lanes=lanes))
    assert isinstance(reply, m.BindReply) and reply.horizon == 1, reply
    return client


def test_a_bound_session_predicts_and_tells_the_model_about_its_episodes(
    started: Any, contract: dict[str, Any]
) -> None:
    model = Sign()
    server = started(ModelServer, model)
    with _bound(server, contract) as client:
        assert client.request(m.BeginEpisode(episode_id="e1", seed=3)) == m.EpisodeAck(
            episode_id="e1"
        )
        reply = client.request(m.Predict(obs=[]), [OBS])
        assert isinstance(reply, m.PredictReply) and reply.action == [1]
        reply = client.request(m.Predict(obs=[]), [-OBS])
        assert reply.action == [0]
        assert client.request(m.EndEpisode(episode_id="e1")) == m.EpisodeAck(episode_id="e1")
        client.request(m.EndEpisode(episode_id="e1"))  # a second end of the same episode is a no-op
        client.request(m.BeginEpisode(episode_id="e2"))
        client.request(m.BeginEpisode(episode_id="e3"))  # a new episode ends the unfinished one
        assert isinstance(client.request(m.Close()), m.CloseReply)
    assert model.seen == [OBS.tolist(), (-OBS).tolist()]
    assert model.ends == ["e1", "e2", "e3"]


def test_requests_before_bind_out_of_range_or_for_envs_are_refused_and_the_session_goes_on(
    started: Any, contract: dict[str, Any]
) -> None:
    server = started(ModelServer, Sign())
    with Wire(server.address) as client:
        client.hello(service="model")
        err = client.request(m.Predict(obs=[]), [OBS])
        assert (
            CODES[err.code] == "NOT_READY" and "send Bind first" in err.message and err.recoverable
        )
        err = client.request(m.Bind(contract=contract, lanes=0))
        assert CODES[err.code] == "INVALID_ACTION" and ">= 1" in err.message
        err = client.request(m.Bind(contract={"observation_space": "nonsense"}))
        assert CODES[err.code] == "INVALID_ACTION" and "contract is invalid" in err.message
        assert isinstance(client.request(m.Bind(contract=contract, lanes=2)), m.BindReply)
        err = client.request(m.Predict(obs=[], lane=2), [OBS])
        assert CODES[err.code] == "INVALID_ACTION" and "lane must be in [0, 2)" in err.message
        err = client.request(m.Predict(obs=[]), [np.zeros(5, np.float32)])
        assert CODES[err.code] == "INVALID_ACTION" and "does not match the contract" in err.message
        err = client.request(m.Reset())
        assert (
            CODES[err.code] == "UNSUPPORTED"
            and "model endpoint does not answer Reset" in err.message
        )
        assert client.request(m.Predict(obs=[], lane=1), [OBS]).action == [1]


def test_a_model_that_raises_ends_its_session_and_still_ends_the_episode(
    started: Any, contract: dict[str, Any]
) -> None:
    model = Sign()
    server = started(ModelServer, model)
    with _bound(server, contract) as client:
        client.request(m.BeginEpisode(episode_id="doomed"))
        model.fail = ZeroDivisionError("the policy divided by zero")
        err = client.request(m.Predict(obs=[]), [OBS])
        assert CODES[err.code] == "INTERNAL" and not err.recoverable
        assert "predict failed: ZeroDivisionError: the policy divided by zero" in err.message
        assert client.closed_by_server()
    assert model.ends == ["doomed"]
    model.fail = None
    with _bound(server, contract) as again:  # the server serves on
        assert again.request(m.Predict(obs=[]), [-OBS]).action == [0]


def test_an_action_outside_the_env_space_is_a_fatal_error(
    started: Any, contract: dict[str, Any]
) -> None:
    class Wild(Sign):
        def predict(self, obs: Any) -> Any:
            return {"not": "an int"}

    server = started(ModelServer, Wild())
    with _bound(server, contract) as client:
        err = client.request(m.Predict(obs=[]), [OBS])
        assert CODES[err.code] == "INTERNAL" and not err.recoverable


def test_a_client_that_vanishes_mid_episode_still_ends_the_episode_for_the_model(
    started: Any, contract: dict[str, Any]
) -> None:
    model = Sign()
    server = started(ModelServer, model)
    client = _bound(server, contract)
    client.request(m.BeginEpisode(episode_id="gone"))
    client.close()
    for _ in range(500):
        if model.ends:
            break
        threading.Event().wait(0.01)
    assert model.ends == ["gone"]


def test_model_server_construction_errors(short_dir: Any) -> None:
    with pytest.raises(ValueError, match="sessions must be an int >= 1"):
        ModelServer(Sign(), f"unix://{short_dir}/m.sock", sessions=0)
    with pytest.raises(TypeError, match=r"serves rlmesh\.Model instances"):
        ModelServer(object(), f"unix://{short_dir}/m.sock")
    model = Sign()
    model.device = "cuda:0"  # type: ignore[misc]
    with pytest.raises(ValueError, match="requires a torch/jax model"):
        ModelServer(model, f"unix://{short_dir}/m.sock")


# -- many sessions on one model ---------------------------------------------------------------


class Batched(Sign):
    """A batched corner beside ``predict``; ``gate`` holds the single-row ``predict`` until set."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_sizes: list[int] = []
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def predict(self, obs: Any) -> int:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10.0)
        return super().predict(obs)

    def predict_batch(self, observations: Any, context: Any) -> Any:
        self.batch_sizes.append(len(observations))
        return np.array([int(o[0] > 0) for o in observations])


def test_sessions_share_one_model_and_requests_of_one_round_share_one_forward(
    started: Any, contract: dict[str, Any]
) -> None:
    model = Batched()
    server = started(ModelServer, model, sessions=3)
    a, b, c = (_bound(server, contract) for _ in range(3))
    try:
        with Wire(server.address) as fourth:
            busy = fourth.hello(service="model")
            assert isinstance(busy, m.Busy) and "all 3 sessions" in busy.message
        health = ping(server.address)
        assert (health.state, health.sessions_in_use, health.session_limit) == ("busy", 3, 3)
        # hold the loop inside a's forward while b and c send theirs: the next round has both
        model.gate = threading.Event()
        a.send(m.Predict(obs=[]), [OBS])
        assert model.entered.wait(10.0)
        b.send(m.Predict(obs=[]), [-OBS])
        c.send(m.Predict(obs=[]), [OBS])
        model.gate.set()
        assert a.receive().action == [1]
        assert (b.receive().action, c.receive().action) == ([0], [1])
        assert model.batch_sizes == [2]
        assert server._loop.fused_batches == 1 and server._loop.fused_requests == 2
        assert isinstance(a.request(m.Close()), m.CloseReply)
        for _ in range(200):
            health = ping(server.address)
            if health.sessions_in_use == 2:
                break
            threading.Event().wait(0.01)
        assert (health.state, health.sessions_in_use) == ("ready", 2)
    finally:
        for client in (a, b, c):
            client.close()


def test_a_fused_forward_that_always_fails_is_served_alone_by_predict(
    started: Any, contract: dict[str, Any]
) -> None:
    """A broken batched corner costs a split, not the sessions: each one is served by predict."""

    class BrokenBatch(Batched):
        def predict_batch(self, observations: Any, context: Any) -> Any:
            self.batch_sizes.append(len(observations))
            raise RuntimeError("the batch exploded")

    model = BrokenBatch()
    server = started(ModelServer, model, sessions=3)
    a, b, c = (_bound(server, contract) for _ in range(3))
    try:
        model.gate = threading.Event()
        a.send(m.Predict(obs=[]), [OBS])
        assert model.entered.wait(10.0)
        b.send(m.Predict(obs=[]), [OBS])
        c.send(m.Predict(obs=[]), [-OBS])
        model.gate.set()
        assert a.receive().action == [1]
        assert (b.receive().action, c.receive().action) == ([1], [0])
        assert model.batch_sizes == [2]  # one fused try, then each session alone
        assert server._loop.fused_batches == 0
        assert a.request(m.Predict(obs=[]), [-OBS]).action == [0]  # every session goes on
        assert b.request(m.Predict(obs=[]), [-OBS]).action == [0]
    finally:
        for client in (a, b, c):
            client.close()


POISON = np.array([9.0, 9.0, 9.0], np.float32)


class Poisoned(Batched):
    """Raises (batched or not) on any observation equal to :data:`POISON`; counts contexts."""

    def __init__(self) -> None:
        super().__init__()
        self.counted: list[tuple[str, int]] = []  # (episode, predict index) of every context used

    def predict(self, obs: Any, context: Any = None) -> int:
        self.counted.append((context["episode_id"], context["predict_index"]))
        if np.array_equal(np.asarray(obs), POISON):
            raise ValueError("a poisoned observation")
        return super().predict(obs)

    def predict_batch(self, observations: Any, context: Any) -> Any:
        self.batch_sizes.append(len(observations))
        self.counted += [(c["episode_id"], c["predict_index"]) for c in context]
        if any(np.array_equal(np.asarray(o), POISON) for o in observations):
            raise ValueError("a poisoned observation")
        return np.array([int(o[0] > 0) for o in observations])


@pytest.mark.parametrize("where", [0, 1, 2])
def test_one_sessions_input_cannot_end_another_sessions_run(
    started: Any, contract: dict[str, Any], where: int
) -> None:
    """The attack: one session of four sends an input that makes the model raise, fused with
    three healthy ones. Only that session gets the error; the healthy ones get their actions
    and keep serving (fused again on the next round)."""
    model = Poisoned()
    server = started(ModelServer, model, sessions=4)
    hold, *rest = (_bound(server, contract) for _ in range(4))
    try:
        for i, client in enumerate(rest):
            client.request(m.BeginEpisode(episode_id=f"e{i}", seed=i))
        model.gate = threading.Event()
        hold.send(m.Predict(obs=[]), [OBS])  # holds the loop in predict: the rest queue up
        assert model.entered.wait(10.0)
        inputs = [OBS, -OBS, OBS]
        inputs[where] = POISON
        for client, obs in zip(rest, inputs):
            client.send(m.Predict(obs=[]), [obs])
        model.gate.set()
        assert hold.receive().action == [1]
        for i, (client, obs) in enumerate(zip(rest, inputs)):
            reply = client.receive()
            if i == where:
                assert isinstance(reply, m.Error) and CODES[reply.code] == "INTERNAL"
                assert reply.message == "predict failed: ValueError: a poisoned observation"
                assert client.closed_by_server()
            else:
                assert isinstance(reply, m.PredictReply), reply
                assert reply.action == [int(obs[0] > 0)]
        healthy = [c for i, c in enumerate(rest) if i != where]
        for client in [hold, *healthy]:  # the healthy sessions go on
            assert client.request(m.Predict(obs=[]), [-OBS]).action == [0]
        assert model.batch_sizes[0] == 3 and ping(server.address).sessions_in_use == 3
        # each predict counted once in its episode's context, the retried ones included
        for i in range(3):
            counted = sorted({index for episode, index in model.counted if episode == f"e{i}"})
            assert counted == ([0] if i == where else [0, 1]), (i, model.counted)
    finally:
        for client in (hold, *rest):
            client.close()


def test_fuse_false_serves_each_request_in_turn_and_errors_stay_per_session(
    started: Any, contract: dict[str, Any]
) -> None:
    model = Batched()
    server = started(ModelServer, model, sessions=2, fuse=False)
    a, b = _bound(server, contract), _bound(server, contract)
    try:
        assert a.request(m.Predict(obs=[]), [OBS]).action == [1]
        err = b.request(m.Predict(obs=[], lane=4), [OBS])
        assert CODES[err.code] == "INVALID_ACTION" and err.recoverable
        model.fail = ValueError("bad row")
        err = b.request(m.Predict(obs=[]), [OBS])
        assert CODES[err.code] == "INTERNAL" and not err.recoverable and b.closed_by_server()
        model.fail = None
        assert a.request(m.Predict(obs=[]), [-OBS]).action == [0]
        assert model.batch_sizes == []
    finally:
        a.close()
        b.close()
