"""``prefetch_lead`` (DELTA-40): the next chunk is predicted in the background while at most
that many replay frames remain; a chunk prefetched across an episode boundary is thrown away.

No wall clock: overlap is shown with an event the env sets and the background forward waits for.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from eval_envs import CountEnv

import rlmesh.eval as ev
from rlmesh.models import NumpyModel


class OriginChunks(NumpyModel[Any, Any]):
    """Each chunk's actions carry the step the chunk was predicted from (``obs[0]``)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []
        self.threads: set[str] = set()

    def predict_chunk(self, obs: Any, horizon: int) -> Any:
        self.seen.append(int(obs[0]))
        self.threads.add(threading.current_thread().name)
        return np.full((horizon, 1), float(obs[0]), np.float32)


def _actions(env: CountEnv) -> list[int]:
    return [int(np.asarray(a).reshape(-1)[0]) for a in env.actions]


@pytest.mark.parametrize(
    ("lead", "seen", "actions"),
    [
        (0, [0, 4, 8], [0, 0, 0, 0, 4, 4, 4, 4, 8, 8]),
        (1, [0, 3, 7], [0, 0, 0, 0, 3, 3, 3, 3, 7, 7]),
        (3, [0, 1, 5, 9], [0, 0, 0, 0, 1, 1, 1, 1, 5, 5]),
        (9, [0, 1, 5, 9], [0, 0, 0, 0, 1, 1, 1, 1, 5, 5]),
    ],
)
def test_delta_40_the_next_chunk_is_predicted_while_at_most_lead_replay_frames_remain(
    lead: int, seen: list[int], actions: list[int]
) -> None:
    model, env = OriginChunks(), CountEnv(length=10)
    result = ev.run(model, env, execution_horizon=4, prefetch_lead=lead)
    assert result.episodes[0].steps == 10
    assert _actions(env) == actions
    assert model.seen == seen
    starts = [step for step in range(0, 10, 4)]  # each chunk starts acting at a multiple of H
    assert all(0 <= step - actions[step] <= lead for step in starts)  # at most `lead` steps stale
    assert (any(t.startswith("rlmesh-prefetch") for t in model.threads)) == (lead > 0)


def test_delta_40_a_chunk_prefetched_across_an_episode_boundary_is_thrown_away() -> None:
    model, env = OriginChunks(), CountEnv(length=10)
    result = ev.run(model, env, execution_horizon=4, prefetch_lead=3, max_episodes=2)
    assert [e.steps for e in result.episodes] == [10, 10]
    # the chunk prefetched at step 9 of episode 1 never acts in episode 2: it re-plans from obs 0
    assert _actions(env) == [0, 0, 0, 0, 1, 1, 1, 1, 5, 5] * 2
    assert model.seen == [0, 1, 5, 9] * 2


class Rendezvous(CountEnv):
    """Notifies every step so a forward can wait for the env to move on."""

    def __init__(self) -> None:
        super().__init__(length=8)
        self.moved = threading.Condition()

    def step(self, action: Any) -> Any:
        out = super().step(action)
        with self.moved:
            self.moved.notify_all()
        return out


class WaitsForTheEnv(NumpyModel[Any, Any]):
    """A prefetched forward waits until the env steps past the observation it saw.

    In line it could never see that (the loop steps only after the forward returns),
    so a True proves the forward overlapped env steps.
    """

    def __init__(self, env: Rendezvous) -> None:
        super().__init__()
        self.env = env
        self.overlapped: list[bool] = []

    def predict_chunk(self, obs: Any, horizon: int) -> Any:
        seen = int(obs[0])
        if seen > 0:
            with self.env.moved:
                self.overlapped.append(
                    self.env.moved.wait_for(lambda: self.env.t > seen, timeout=30)
                )
        return np.zeros((horizon, 1), np.float32)


def test_delta_40_a_prefetched_forward_runs_while_the_env_steps() -> None:
    env = Rendezvous()
    model = WaitsForTheEnv(env)
    ev.run(model, env, execution_horizon=4, prefetch_lead=3)
    assert model.overlapped == [True, True]  # prefetched at steps 1 and 5


class FailsWhenPrefetched(NumpyModel[Any, Any]):
    def predict_chunk(self, obs: Any, horizon: int) -> Any:
        if int(obs[0]) > 0:
            raise ZeroDivisionError("the prefetched forward failed")
        return np.zeros((horizon, 1), np.float32)


def test_delta_40_a_failed_prefetch_raises_its_own_type_when_its_chunk_is_due() -> None:
    env = CountEnv(length=10)
    with pytest.raises(ZeroDivisionError, match="prefetched forward failed"):
        ev.run(FailsWhenPrefetched(), env, execution_horizon=4, prefetch_lead=3)
    assert (
        len(env.actions) == 4
    )  # the first chunk played out; the failure surfaced when the next was due


def test_delta_40_prefetch_lead_is_refused_where_there_is_no_native_loop_to_overlap() -> None:
    with pytest.raises(ValueError, match="drives the native runtime loop"):
        ev.run(ev.RANDOM_SAMPLE, CountEnv(), prefetch_lead=1)
    import rlmesh

    with pytest.raises(ValueError, match="drives the native runtime loop"):
        ev.run(rlmesh.RemoteModel("127.0.0.1:1"), CountEnv(), prefetch_lead=1)


def test_delta_40_prefetch_lead_on_a_vector_env_is_a_value_error() -> None:
    gym = pytest.importorskip("gymnasium")
    envs = gym.vector.SyncVectorEnv([lambda: CountEnv(length=3) for _ in range(2)])
    with pytest.raises(ValueError, match="vector env"):
        ev.run(OriginChunks(), envs, execution_horizon=4, prefetch_lead=2)
