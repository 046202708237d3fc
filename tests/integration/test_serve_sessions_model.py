"""Issue 25: one loaded model serving several env workers at once (``ModelServer(sessions=N)``)."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from served_models import Lean, lean

import rlmesh
from conftest import child_env, stop_process, wait_for_ready_file
from rlmesh.errors import EndpointBusy
from rlmesh.numpy import Model
from rlmesh.serve import ModelServer, ping

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


class BatchedLean(Model):
    """The CartPole heuristic with a batched corner and per-episode state.

    Every row checks that its episode's own state counted exactly its own predicts
    (``context["state"]`` is per episode; a mix-up across sessions breaks the count),
    and ``on_episode_end`` records each episode once.
    """

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay
        self.batch_sizes: list[int] = []
        self.ends: list[str] = []
        self.state_errors: list[str] = []
        self.lock = threading.Lock()

    def predict_batch(self, observations: Any, context: Any) -> Any:
        self.batch_sizes.append(len(observations))
        for ctx in context:
            n = ctx["state"].get("n", 0)
            if n != ctx["predict_index"]:
                self.state_errors.append(
                    f"{ctx['episode_id']}: state {n} != index {ctx['predict_index']}"
                )
            ctx["state"]["n"] = n + 1
        if self.delay:
            threading.Event().wait(self.delay)
        return np.array([lean(o) for o in observations])

    def on_episode_end(self, episode_id: str = "") -> None:
        with self.lock:
            self.ends.append(episode_id)


def _drive(
    address: str, seeds: list[int], results: dict[int, Any], errors: list[BaseException], key: int
) -> None:
    try:
        results[key] = rlmesh.RemoteModel(address).run(gym.make("CartPole-v1"), seeds=seeds)
    except BaseException as exc:  # pragma: no cover - reported by the test
        errors.append(exc)


def _run_four(address: str) -> dict[int, Any]:
    results: dict[int, Any] = {}
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_drive, args=(address, [10 * k, 10 * k + 1], results, errors, k))
        for k in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    return results


@pytest.mark.parametrize("fuse", [True, False])
def test_four_env_workers_on_one_model_get_the_unbatched_results_with_their_own_episodes(fuse):
    model = BatchedLean(delay=0.002)
    server = ModelServer(model, "127.0.0.1:0", sessions=4, fuse=fuse).start()
    try:
        results = _run_four(server.address)
    finally:
        server.shutdown()
    for (
        k,
        result,
    ) in results.items():  # each session equals a local, unbatched run of the same seeds
        local = rlmesh.run(
            rlmesh.numpy.Model(lean), gym.make("CartPole-v1"), seeds=[10 * k, 10 * k + 1]
        )
        assert [e.reward for e in result.episodes] == [e.reward for e in local.episodes]
        assert [e.steps for e in result.episodes] == [e.steps for e in local.episodes]
    assert model.state_errors == []
    assert (
        len(model.ends) == 8 and len(set(model.ends)) == 8
    )  # on_episode_end once per episode, per session
    if fuse:
        assert max(model.batch_sizes) >= 2  # requests from several sessions shared one forward
    else:
        assert set(model.batch_sizes) == {1}  # in turn: one row per forward


def test_a_fifth_client_is_busy_and_health_counts_model_sessions():
    server = ModelServer(Lean(), "127.0.0.1:0", sessions=2).start()
    try:
        a = rlmesh.RemoteModel(server.address).session(gym.make("CartPole-v1"))
        a.reset(seed=0)
        b = rlmesh.RemoteModel(server.address).session(gym.make("CartPole-v1"))
        b.reset(seed=1)
        h = ping(server.address)
        assert (h.state, h.sessions_in_use, h.session_limit) == ("busy", 2, 2)
        with pytest.raises(EndpointBusy, match="all 2 sessions"):
            rlmesh.RemoteModel(server.address).session(gym.make("CartPole-v1")).reset(seed=0)
        a.close()
        c = rlmesh.RemoteModel(server.address).session(gym.make("CartPole-v1"))
        c.reset(seed=2)
        c.close()
        b.close()
    finally:
        server.shutdown()


def test_a_session_that_vanishes_mid_episode_ends_only_its_episode():
    model = Lean()
    server = ModelServer(model, "127.0.0.1:0", sessions=2).start()
    try:
        a = rlmesh.RemoteModel(server.address).session(gym.make("CartPole-v1"))
        obs, _ = a.reset(seed=0)
        a.step(a.predict(obs))
        b = rlmesh.RemoteModel(server.address).session(gym.make("CartPole-v1"))
        obs_b, _ = b.reset(seed=1)
        a._route.session.conn.sock.close()  # a's client vanishes
        for _ in range(5):
            obs_b, *_ = b.step(b.predict(obs_b))
        assert len(model.ends) == 1  # a's episode ended for the model; b's goes on
        b.close()
    finally:
        server.shutdown()


def test_serve_model_cli_takes_sessions(short_tmp):
    ready = short_tmp / "ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlmesh.cli",
            "serve-model",
            "served_models:zero",
            "--address",
            "127.0.0.1:0",
            "--sessions",
            "3",
            "--ready-file",
            str(ready),
        ],
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        address = wait_for_ready_file(proc, ready, 60)
        assert ping(address).session_limit == 3
        results = {}
        errors: list[BaseException] = []
        threads = [
            threading.Thread(target=_drive, args=(address, [k], results, errors, k))
            for k in range(3)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors and len(results) == 3
    finally:
        stop_process(proc)


class ZeroBatched(Model):
    """Action 0 for every row; records the row shapes of each forward."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.shapes: list[tuple[int, ...]] = []

    def predict_batch(self, observations: Any) -> Any:
        self.shapes.append(tuple(np.shape(observations)))
        if self.fail:
            raise ZeroDivisionError("the batch divided by zero")
        threading.Event().wait(0.002)
        return np.zeros(len(observations), np.int64)


def test_sessions_bound_to_different_envs_share_the_model_but_never_a_batch():
    from sessions_envs import SessionEnv

    model = ZeroBatched()
    server = ModelServer(model, "127.0.0.1:0", sessions=4).start()
    errors: list[BaseException] = []
    results: dict[int, Any] = {}

    def drive(k: int) -> None:
        try:
            env = gym.make("CartPole-v1") if k % 2 else gym.wrappers.TimeLimit(SessionEnv(), 30)
            results[k] = rlmesh.RemoteModel(server.address).run(env, seeds=[k])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=drive, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    server.shutdown()
    assert not errors and len(results) == 4
    assert {s[1:] for s in model.shapes} == {(4,), (3,)}  # rows of one forward always share a shape


def test_a_failing_batched_forward_is_a_model_error_for_each_session_in_it():
    model = ZeroBatched(fail=True)
    server = ModelServer(model, "127.0.0.1:0", sessions=2).start()
    errors: list[BaseException] = []

    def drive() -> None:
        try:
            rlmesh.RemoteModel(server.address).run(gym.make("CartPole-v1"), seeds=[0])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=drive) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(errors) == 2 and all("the batch divided by zero" in str(e) for e in errors)
    with rlmesh.RemoteModel(server.address).session(
        gym.make("CartPole-v1")
    ) as sess:  # the server lives on
        sess.reset(seed=0)
    server.shutdown()
