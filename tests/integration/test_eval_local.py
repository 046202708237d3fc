"""Evaluate real Gymnasium envs: in-process, and served over loopback TCP (EVAL-6..9, DESIGN: one drive loop)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
import rlmesh.eval as ev
from rlmesh.models import Model, NumpyModel

pytestmark = pytest.mark.filterwarnings("ignore::rlmesh.WorkflowEditionWarning")

SEEDS = [1, 2, 3]


def balance(obs: Any) -> int:
    """A deterministic CartPole policy: push toward the pole's lean."""
    return int(np.asarray(obs)[2] > 0)


class BatchBalance(NumpyModel):
    def __init__(self) -> None:
        self.calls = 0
        super().__init__()

    def predict_batch(self, obs: Any) -> Any:
        self.calls += 1
        return (obs[:, 2] > 0).astype(np.int64)


def outcome(result: rlmesh.eval.RunResult) -> list[tuple[Any, ...]]:
    return [
        (e.index, e.seed, e.steps, e.reward, e.terminated, e.truncated) for e in result.episodes
    ]


@pytest.fixture(params=["tcp", "unix"])
def cartpole_server(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    address = "127.0.0.1:0" if request.param == "tcp" else f"unix://{tmp_path}/cartpole.sock"
    server = rlmesh.EnvServer(gym.make("CartPole-v1"), address).start()
    try:
        yield server
    finally:
        server.shutdown()


@pytest.fixture
def local_result() -> rlmesh.eval.RunResult:
    return ev.run(NumpyModel(balance), gym.make("CartPole-v1"), seeds=SEEDS)


def test_local_cartpole_runs_are_deterministic_under_seeds(local_result: Any) -> None:
    again = ev.run(NumpyModel(balance), gym.make("CartPole-v1"), seeds=SEEDS)
    assert outcome(again) == outcome(local_result)
    assert [e.index for e in local_result.episodes] == [0, 1, 2]
    assert all(e.steps > 10 for e in local_result.episodes)


@pytest.mark.parametrize("form", ["address", "server", "numpy_handle", "plain_handle"])
def test_a_served_env_gives_the_same_episodes_as_the_local_one(
    form: str, cartpole_server: Any, local_result: Any
) -> None:
    if form == "address":
        target: Any = cartpole_server.address
    elif form == "server":
        target = cartpole_server
    elif form == "numpy_handle":
        target = rlmesh.numpy.RemoteEnv(cartpole_server.address)
    else:
        target = rlmesh.RemoteEnv(cartpole_server.address)
    model = Model(balance) if form == "plain_handle" else NumpyModel(balance)
    result = ev.run(model, target, seeds=SEEDS)
    assert outcome(result) == outcome(local_result)
    if form.endswith("handle"):
        target.reset()  # a handle stays usable: the session never closed it
        target.close()


def test_runs_on_an_address_release_the_endpoint_each_time(cartpole_server: Any) -> None:
    # EVAL-9: a dialed connection is closed, so the single session slot frees up
    for _ in range(3):
        assert (
            ev.run(
                ev.RANDOM_SAMPLE, cartpole_server.address, seeds=[0], max_episode_steps=3
            ).total_steps
            == 3
        )


def test_a_remote_session_reports_the_negotiated_edition_and_contract(cartpole_server: Any) -> None:
    with ev.session(NumpyModel(balance), cartpole_server.address) as sess:
        assert sess.selected_workflow_edition == "2026.06"
        assert sess.contract.id == "CartPole-v1"
        obs, info = sess.reset(seed=1)
        assert isinstance(obs, np.ndarray) and "episode_ids" in info
        obs, reward, _terminated, _truncated, info = sess.step(sess.predict(obs))
        assert reward == 1.0


def test_a_remote_handle_is_closed_only_with_close_env(cartpole_server: Any) -> None:
    handle = rlmesh.numpy.RemoteEnv(cartpole_server.address)
    ev.run(NumpyModel(balance), handle, seeds=[1])
    assert not handle.closed
    handle.close()


def test_a_served_lanes_endpoint_takes_per_episode_seeds_and_caps() -> None:
    # O-2: lanes served with autoreset disabled are reset by the driver, one seed per episode
    # (a plain list of lanes now autoresets NEXT_STEP, issue 12; disabled is the explicit choice)
    lanes = rlmesh.serve.Lanes([gym.make("CartPole-v1") for _ in range(2)], autoreset="disabled")
    server = rlmesh.EnvServer(lanes, "127.0.0.1:0").start()
    try:
        model = BatchBalance()
        result = ev.run(model, server.address, seeds=SEEDS, max_episode_steps=40)
    finally:
        server.shutdown()
    local = ev.run(NumpyModel(balance), gym.make("CartPole-v1"), seeds=SEEDS, max_episode_steps=40)
    by_seed = {e.seed: (e.steps, e.terminated, e.truncated) for e in result.episodes}
    assert by_seed == {e.seed: (e.steps, e.terminated, e.truncated) for e in local.episodes}
    assert model.calls < result.total_steps  # lanes fused into one forward per step


def test_a_served_autoresetting_vector_env_counts_episodes_exactly() -> None:
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    server = rlmesh.EnvServer(venv, "127.0.0.1:0").start()
    try:
        result = ev.run(BatchBalance(), server.address, max_episodes=5)
        assert result.num_episodes == 5
        assert ev.run(ev.RANDOM_SAMPLE, server.address, max_episodes=3).num_episodes == 3
        # AR-10: the served Gymnasium vector env resets chosen lanes (reset_mask), so caps
        # and more seeds than lanes run as they do in-process
        capped = ev.run(BatchBalance(), server.address, max_episodes=4, max_episode_steps=3)
        assert [(e.steps, e.truncated) for e in capped.episodes] == [(3, True)] * 4
        seeded = ev.run(BatchBalance(), server.address, seeds=SEEDS)
        local = ev.run(
            BatchBalance(),
            gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)]),
            seeds=SEEDS,
        )
        assert [(e.seed, e.steps, e.reward) for e in seeded.episodes] == [
            (e.seed, e.steps, e.reward) for e in local.episodes
        ]
        assert len(SEEDS) > 2 and sorted(e.seed for e in seeded.episodes) == sorted(SEEDS)
    finally:
        server.shutdown()


def test_a_local_gymnasium_vector_env_matches_scalar_episodes(local_result: Any) -> None:
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(3)])
    model = BatchBalance()
    result = ev.run(model, venv, seeds=SEEDS)
    by_seed = {e.seed: (e.steps, e.reward) for e in result.episodes}
    assert by_seed == {e.seed: (e.steps, e.reward) for e in local_result.episodes}
    assert model.calls == max(e.steps for e in result.episodes)
