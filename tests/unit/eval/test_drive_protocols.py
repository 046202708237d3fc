"""The eval drive's three protocols (issue 23 item 1): env side, route, observer list.

A scripted env side and a recording route drive the scalar and the vector loops
directly; the observer list fans out in order, and an observer's ``on_step`` that
ends an episode truncates it.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
from rlmesh.eval._drive import Drive
from rlmesh.eval._loop import run_session
from rlmesh.eval._observers import DriveStep, HooksObserver, Observer, ObserverList
from rlmesh.models._route import LocalRoute, RandomRoute, ServedRoute, as_route
from rlmesh.spaces import Box, Discrete


class Context:
    """What the loops hand ``on_run_start`` and read ``StepEvent.read`` through."""

    def read(self, observation: object, item: object) -> Any:
        return ("read", item)


class ScalarSide:
    """A scripted single env: rewards 1, 2, 3, ...; terminates after ``length`` steps."""

    is_vector = False
    num_envs = 1
    lanes = 1
    remote = False
    canonical = False
    metadata: dict[str, Any] = {}

    def __init__(self, length: int) -> None:
        self.length = length
        self.t = 0
        self.calls: list[Any] = []

    def reset(self, seed: int | None, options: Any) -> tuple[Any, dict[str, Any]]:
        self.calls.append(("reset", seed, options))
        self.t = 0
        return np.array([0.0]), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.calls.append(("step", action))
        self.t += 1
        done = self.t >= self.length
        return np.array([float(self.t)]), float(self.t), done, False, {"is_success": done}


class VectorSide:
    """A scripted vector env with driver-owned (mask) resets: lane ``i`` ends after ``lengths[i]`` steps."""

    is_vector = True
    remote = False
    canonical = False
    autoreset = "NextStep"
    per_lane_reset = "mask"
    autoreset_indices = False
    metadata: dict[str, Any] = {}

    def __init__(self, lengths: Sequence[int]) -> None:
        self.lengths = list(lengths)
        self.num_envs = self.lanes = len(lengths)
        self.t = [0] * self.num_envs
        self.calls: list[Any] = []

    def _obs(self) -> Any:
        return np.array([[float(t)] for t in self.t])

    def reset_all(self, seeds: Sequence[int | None]) -> Any:
        self.calls.append(("reset_all", list(seeds)))
        self.t = [0] * self.num_envs
        return self._obs()

    def reset_lanes(self, how: str, which: Sequence[int], seeds: Sequence[int | None]) -> Any:
        self.calls.append(("reset_lanes", how, list(which), [seeds[i] for i in which]))
        for i in which:
            self.t[i] = 0
        return self._obs()

    def step_lanes(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        self.calls.append(("step_lanes", np.asarray(action).tolist()))
        self.t = [t + 1 for t in self.t]
        term = np.array([t >= n for t, n in zip(self.t, self.lengths)])
        return self._obs(), np.ones(self.num_envs), term, np.zeros(self.num_envs, bool), {}


class RecordingRoute:
    """A route in the protocol's shape that records every call and answers ``lane * 10 + step``."""

    horizon = 1
    spec_less = True
    chunk_pos = 0
    chunk_len = 0

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def bind(self, env: Any, *, lanes: int = 1) -> None:
        self.calls.append(("bind", lanes))

    def begin_episode(self, episode_id: str, seed: int | None, lane: int = 0) -> None:
        self.calls.append(("begin", seed, lane))

    def end_episode(self, episode_id: str, lane: int = 0) -> None:
        self.calls.append(("end", lane))

    def predict(self, observation: Any) -> Any:
        self.calls.append(("predict",))
        return 7

    def predict_lanes(
        self, observation: Any, rolling: Sequence[bool], last_action: list[Any]
    ) -> Any:
        self.calls.append(("predict_lanes", list(rolling)))
        for lane in range(len(last_action)):
            last_action[lane] = lane
        return np.arange(len(last_action))

    def advisories(self) -> tuple[Any, ...]:
        return ("advice",)

    def close(self) -> None:
        self.calls.append(("close",))


class Recorder(Observer):
    """An observer writing every call into a shared log; ends the episode at step ``end_at``."""

    def __init__(
        self, name: str, log: list[Any], end_at: int | None = None, events: bool = False
    ) -> None:
        self.name, self.log, self.end_at = name, log, end_at
        self.wants_events = events

    def on_run_start(self, context: Any) -> None:
        self.log.append((self.name, "run_start"))

    def on_episode_start(
        self, episode: int, seed: int | None, lane: int, observation: Any, episodes: int
    ) -> None:
        self.log.append((self.name, "episode_start", episode, seed, lane))

    def on_step(self, step: DriveStep) -> bool:
        self.log.append((self.name, "step", step.lane, step.steps, step.event is not None))
        return self.end_at is not None and step.steps >= self.end_at

    def on_episode_end(self, result: Any, lane: int) -> None:
        self.log.append((self.name, "episode_end", result.index, lane))

    def on_run_end(self, result: Any) -> None:
        self.log.append((self.name, "run_end", result.num_episodes))


def _drive(side: Any, route: Any, observers: Sequence[Observer] = ()) -> Drive:
    drive = Drive(route, object(), "local", close_env=False, workflow_edition=None)
    drive.env = side  # the env side, opened: the drive only talks to its protocol
    drive.observers = lambda hooks, context: ObserverList(observers)  # type: ignore[method-assign]
    return drive


def _run(drive: Drive, **kw: Any) -> Any:
    args: dict[str, Any] = dict(
        seeds=None,
        max_episodes=None,
        episodes=None,
        max_episode_steps=None,
        max_episode_seconds=None,
        hooks=None,
        trial_index_base=0,
    )
    args.update(kw)
    return run_session(drive, Context(), **args)


# -- the scalar loop ---------------------------------------------------------------------------


def test_a_scripted_env_side_and_route_drive_the_scalar_loop() -> None:
    side, route = ScalarSide(3), RecordingRoute()
    result = _run(_drive(side, route), seeds=[5, 6])
    assert [
        (e.index, e.seed, e.steps, e.reward, e.terminated, e.truncated, e.success)
        for e in result.episodes
    ] == [
        (0, 5, 3, 6.0, True, False, True),
        (1, 6, 3, 6.0, True, False, True),
    ]
    assert result.advisories == ("advice",)  # the route's advisories reach the result
    assert side.calls[0] == ("reset", 5, None) and side.calls[1] == ("step", 7)
    # begin/end per episode, the last episode ended when the run ends
    assert [c for c in route.calls if c[0] in ("begin", "end")] == [
        ("begin", 5, 0),
        ("end", 0),
        ("begin", 6, 0),
        ("end", 0),
    ]


def test_the_scalar_loop_returns_the_episode_books_the_session_reads() -> None:
    side, route = ScalarSide(100), RecordingRoute()
    drive = _drive(side, route)
    result = _run(drive, max_episode_steps=4)
    episode = drive.episode  # the one record the loop filled
    assert (episode.steps, episode.reward, episode.terminated, episode.truncated) == (
        4,
        10.0,
        False,
        True,
    )
    assert result.episodes[0].truncated and result.episodes[0].steps == 4


def test_the_observer_list_fans_out_in_order_and_builds_events_only_when_wanted() -> None:
    log: list[Any] = []
    observers = [Recorder("a", log), Recorder("b", log)]
    _run(_drive(ScalarSide(2), RecordingRoute(), observers))
    assert log == [
        ("a", "run_start"),
        ("b", "run_start"),
        ("a", "episode_start", 0, None, 0),
        ("b", "episode_start", 0, None, 0),
        ("a", "step", 0, 1, False),
        ("b", "step", 0, 1, False),
        ("a", "step", 0, 2, False),
        ("b", "step", 0, 2, False),
        ("a", "episode_end", 0, 0),
        ("b", "episode_end", 0, 0),
        ("a", "run_end", 1),
        ("b", "run_end", 1),
    ]
    log.clear()
    _run(
        _drive(
            ScalarSide(1), RecordingRoute(), [Recorder("a", log), Recorder("b", log, events=True)]
        )
    )
    assert (
        "a",
        "step",
        0,
        1,
        True,
    ) in log  # one observer wants events: every observer sees the event


def test_an_observer_ending_the_episode_truncates_it() -> None:
    log: list[Any] = []
    result = _run(
        _drive(ScalarSide(100), RecordingRoute(), [Recorder("v", log, end_at=2)]), seeds=[1, 2]
    )
    assert [(e.steps, e.terminated, e.truncated) for e in result.episodes] == [
        (2, False, True),
        (2, False, True),
    ]


def test_every_observer_sees_on_run_end_even_when_one_raises() -> None:
    log: list[Any] = []

    class Boom(Recorder):
        def on_run_end(self, result: Any) -> None:
            super().on_run_end(result)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        _run(_drive(ScalarSide(1), RecordingRoute(), [Boom("a", log), Recorder("b", log)]))
    assert [e for e in log if e[1] == "run_end"] == [("a", "run_end", 1), ("b", "run_end", 1)]


def test_the_user_hooks_ride_in_the_list_as_one_observer() -> None:
    seen: list[Any] = []

    class Hooks(rlmesh.RunHooks):
        def on_episode_start(self, *, episode: int, seed: int | None) -> None:
            seen.append(("start", episode, seed))

        def on_step(self, event: rlmesh.StepEvent) -> None:
            seen.append(("step", event.step, event.read("x")))

    observer = HooksObserver(Hooks())
    assert observer.wants_events
    result = _run(_drive(ScalarSide(2), RecordingRoute(), [observer]), seeds=[3])
    assert seen == [("start", 0, 3), ("step", 0, ("read", "x")), ("step", 1, ("read", "x"))]
    assert result.num_episodes == 1


def test_no_observers_means_no_observer_calls() -> None:
    class Counting(ObserverList):
        calls = 0

        def on_step(self, step: DriveStep) -> bool:
            Counting.calls += 1
            return False

    drive = _drive(ScalarSide(5), RecordingRoute())
    drive.observers = lambda hooks, context: Counting(())  # type: ignore[method-assign]
    _run(drive)
    assert Counting.calls == 0


# -- the vector loop ---------------------------------------------------------------------------


def test_a_scripted_vector_env_side_and_route_drive_the_vector_loop() -> None:
    side, route = VectorSide([2, 3]), RecordingRoute()
    result = _run(_drive(side, route), seeds=[10, 11, 12])
    assert sorted((e.index, e.seed, e.steps) for e in result.episodes) == [
        (0, 10, 2),
        (1, 11, 3),
        (2, 12, 2),
    ]
    assert side.calls[0] == ("reset_all", [10, 11])
    assert ("reset_lanes", "mask", [0], [12]) in side.calls
    assert side.calls[1] == ("step_lanes", [0, 1])  # the route's batched action reaches the env
    begins = [c for c in route.calls if c[0] == "begin"]
    assert begins[:2] == [("begin", 10, 0), ("begin", 11, 1)] and ("begin", 12, 0) in begins
    assert (
        route.calls.count(("end", 0)) >= 2 and ("end", 1) in route.calls
    )  # every lane episode ended


def test_an_observer_ending_a_vector_lane_truncates_it_and_the_lane_is_reset() -> None:
    log: list[Any] = []
    side = VectorSide([50, 50])
    result = _run(
        _drive(side, RecordingRoute(), [Recorder("v", log, end_at=3)]), seeds=[1, 2, 3, 4]
    )
    assert all((e.steps, e.truncated, e.terminated) == (3, True, False) for e in result.episodes)
    assert [e.seed for e in sorted(result.episodes, key=lambda e: e.index)] == [1, 2, 3, 4]
    assert any(c[0] == "reset_lanes" for c in side.calls)


# -- the route protocol ------------------------------------------------------------------------


def test_every_route_speaks_the_route_protocol() -> None:
    local = LocalRoute(
        rlmesh.numpy.Model(lambda o: 0),
        instruction=None,
        trust_entrypoints=None,
        execution_horizon=1,
    )
    random = RandomRoute()
    assert as_route(local) is local and as_route(random) is random
    served = as_route(types.SimpleNamespace(horizon=1, spec_less=True))
    assert isinstance(served, ServedRoute)
    for route in (local, random, served):
        for name in (
            "bind",
            "begin_episode",
            "end_episode",
            "predict",
            "predict_lanes",
            "advisories",
            "close",
        ):
            assert callable(getattr(route, name)), (route, name)
        assert route.chunk_pos == 0 and route.chunk_len == 0


def test_a_local_route_does_not_canonicalise_a_remote_env_side_observation_again() -> None:
    contract = types.SimpleNamespace(
        observation_space=Box(0.0, 1.0, (2,)).spec, action_space=Discrete(2).spec, num_envs=1
    )
    local_side = types.SimpleNamespace(contract=contract, canonical=False)
    remote_side = types.SimpleNamespace(contract=contract, canonical=True)
    route = LocalRoute(
        rlmesh.numpy.Model(lambda o: 0),
        instruction=None,
        trust_entrypoints=None,
        execution_horizon=1,
    )
    route.bind(local_side)
    assert route.canonical is not None
    assert route.model_input([0.5, 0.25]).dtype == np.float32  # a local env's list is canonicalised
    route.bind(remote_side)
    assert route.canonical is None  # a remote env's observations are canonical already
    obs = np.array([0.5, 0.25], np.float32)
    assert route.model_input(obs) is obs


def test_a_local_route_predicts_a_batch_for_every_lane() -> None:
    class Batched(rlmesh.numpy.Model):
        def predict_batch(self, obs: Any) -> Any:
            return np.asarray(obs)[:, 0].astype(np.int64) % 2

    contract = types.SimpleNamespace(
        observation_space=Box(0.0, 9.0, (1,)).spec, action_space=Discrete(2).spec, num_envs=3
    )
    side = types.SimpleNamespace(
        contract=contract, canonical=False, single_action_space=gym.spaces.Discrete(2)
    )
    route = LocalRoute(Batched(), instruction=None, trust_entrypoints=None, execution_horizon=1)
    route.bind(side, lanes=3)
    for lane in range(3):
        route.begin_episode(f"e{lane}", None, lane)
    last: list[Any] = [None, None, None]
    action = route.predict_lanes(
        np.array([[1.0], [2.0], [3.0]], np.float32), [False, True, False], last
    )
    assert action.tolist()[0] == 1 and action.tolist()[2] == 1
    assert (
        last[0] == 1 and last[1] is not None
    )  # a rolling lane still gets an action the env ignores


# -- the env side ------------------------------------------------------------------------------


def test_a_local_env_side_checks_and_a_session_reads_through_it() -> None:
    sess = rlmesh.session(rlmesh.numpy.Model(lambda o: 0), gym.make("CartPole-v1"))
    try:
        obs, _ = sess.reset(seed=0)
        assert isinstance(obs, np.ndarray) and obs.dtype == np.float32
        _, r, te, tr, _ = sess.step(0)
        assert r == 1.0 and not (te or tr)
    finally:
        sess.close()


def test_an_address_serving_lanes_is_dialled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handshake's contract picks the client (RemoteEnv or RemoteVectorEnv): one dial, not two."""
    import rlmesh.client._env as client_env
    from rlmesh.client._numpy import RemoteEnv, RemoteVectorEnv
    from rlmesh.eval._targets import open_target

    dials: list[Any] = []
    real = client_env.ClientSession.connect

    def counting(*args: Any, **kwargs: Any) -> Any:
        dials.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(client_env.ClientSession, "connect", counting)
    lanes = rlmesh.serve.Lanes([gym.make("CartPole-v1") for _ in range(2)])
    with rlmesh.EnvServer(lanes, "127.0.0.1:0").start() as server:
        conn = open_target(server.address, "address")
        try:
            assert type(conn.env) is RemoteVectorEnv and conn.is_vector and conn.num_envs == 2
            assert len(dials) == 1
            obs, _ = conn.env.reset(seed=0)
            assert obs.shape == (2, 4)
        finally:
            conn.close(close_env=False)
    with rlmesh.EnvServer(gym.make("CartPole-v1"), "127.0.0.1:0").start() as server:
        conn = open_target(server.address, "address")
        try:
            assert type(conn.env) is RemoteEnv and not conn.is_vector
            assert len(dials) == 2
        finally:
            conn.close(close_env=False)
