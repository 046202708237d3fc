"""Vector envs in Session.run: fusion, per-lane accounting, seeds, caps (EVAL-60..69, DELTA-39/49)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from eval_envs import counting_vector

import rlmesh.eval as ev
from rlmesh.eval import RunHooks
from rlmesh.eval._vector import lane_info
from rlmesh.models import Model, NumpyModel


class Batched(NumpyModel):
    def __init__(self) -> None:
        self.calls: list[int] = []
        super().__init__()

    def predict_batch(self, obs: Any) -> Any:
        self.calls.append(len(obs))
        return np.full((len(obs), 1), 0.25, dtype=np.float32)


def test_a_batched_corner_is_called_once_per_step_with_all_lanes() -> None:
    # EVAL-63, EVAL-69: 2 lanes x 4-step episodes, 2 episodes -> 4 fused calls
    m = Batched()
    result = ev.run(m, counting_vector(2, length=4), max_episodes=2)
    assert m.calls == [2, 2, 2, 2]
    assert [(e.steps, e.reward, e.terminated) for e in result.episodes] == [(4, 4.0, True)] * 2


def test_the_episode_budget_is_exact_and_indices_follow_completion_order() -> None:
    # DELTA-39: 2 lanes, 3 episodes -> exactly 3 results
    result = ev.run(Batched(), counting_vector(2, length=4), episodes=3)
    assert result.num_episodes == 3
    assert sorted(e.index for e in result.episodes) == [0, 1, 2]


def test_per_episode_seeds_reach_each_lane_reset() -> None:
    # O-2 / EVAL-66: driver-owned lane resets carry the next episode's seed
    env = counting_vector(2, length=2)
    result = ev.run(Batched(), env, seeds=[11, 12, 13, 14])
    assert sorted(e.seed for e in result.episodes) == [11, 12, 13, 14]
    assert sorted(e.trial for e in result.episodes) == [0, 1, 2, 3]


def test_step_caps_apply_per_lane() -> None:
    result = ev.run(Batched(), counting_vector(2, length=10), max_episodes=3, max_episode_steps=3)
    assert [(e.steps, e.truncated, e.terminated) for e in result.episodes] == [(3, True, False)] * 3


def test_a_spec_less_predict_only_model_gets_the_whole_batch() -> None:
    # EVAL-61 / DELTA-49
    shapes = []

    def predict(obs: Any) -> Any:
        shapes.append(obs.shape)
        return np.zeros((obs.shape[0], 1), dtype=np.float32)

    ev.run(NumpyModel(predict), counting_vector(3, length=2), max_episodes=3)
    assert shapes and all(s == (3, 1) for s in shapes)


def test_a_predict_that_returns_one_action_for_a_batch_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="predict received a batch of 2 observations"):
        ev.run(NumpyModel(lambda obs: 0.0), counting_vector(2), max_episodes=2)


def test_a_chunked_batched_corner_runs_once_per_horizon_in_model_order() -> None:
    # EVAL-62: two-frame chunk [0.25, 0.75], 4-step episodes -> env sees 0.25, 0.75, 0.25, 0.75
    seen: list[float] = []
    calls = {"pcb": 0}

    class Chunks(NumpyModel):
        def predict_chunk_batch(self, obs: Any, h: int) -> Any:
            calls["pcb"] += 1
            frame = np.array([[0.25], [0.75]], dtype=np.float32)
            return np.stack([frame] * len(obs))

    class SeeActions(RunHooks):
        def on_step(self, event: Any) -> None:
            if event.episode == 0:
                seen.append(float(np.asarray(event.action)[0]))

    ev.run(
        Chunks(),
        counting_vector(2, length=4),
        max_episodes=2,
        execution_horizon=2,
        hooks=SeeActions(),
    )
    assert calls["pcb"] == 2
    assert seen == [0.25, 0.75, 0.25, 0.75]


def test_per_lane_step_events_and_episode_hooks_fire_for_scored_lanes() -> None:
    events: list[Any] = []

    class H(RunHooks):
        def on_episode_start(self, *, episode: int, seed: int | None) -> None:
            events.append(("start", episode))

        def on_episode_end(self, result: Any) -> None:
            events.append(("end", result.index))

        def on_step(self, event: Any) -> None:
            events.append(("step", event.episode, event.step))

    ev.run(Batched(), counting_vector(2, length=2), max_episodes=2, hooks=H())
    assert sorted(e for e in events if e[0] == "step") == [
        ("step", 0, 0),
        ("step", 0, 1),
        ("step", 1, 0),
        ("step", 1, 1),
    ]
    assert sorted(e for e in events if e[0] == "end") == [("end", 0), ("end", 1)]


def test_each_lane_episode_ends_the_models_episode_once() -> None:
    ends: list[str] = []

    class M(Batched):
        def on_episode_end(self, episode_id: str = "") -> None:
            ends.append(episode_id)

    ev.run(M(), counting_vector(2, length=2), max_episodes=4)
    assert len(ends) == len(set(ends)) >= 4


def test_random_sample_drives_a_vector_env() -> None:
    result = ev.run(ev.RANDOM_SAMPLE, counting_vector(3, length=2), max_episodes=5)
    assert result.num_episodes == 5


def test_a_native_model_batched_corner_receives_a_per_lane_list() -> None:
    got = []

    class M(Model):
        def predict_batch(self, obs: Any) -> Any:
            got.append(len(obs))
            return [np.zeros(1, dtype=np.float32) for _ in obs]

    ev.run(M(), counting_vector(2, length=2), max_episodes=2)
    assert got == [2, 2]


def test_lane_info_reads_gymnasium_masked_vector_info() -> None:
    info = {
        "is_success": np.array([True, False]),
        "_is_success": np.array([True, False]),
        "other": 3,
    }
    assert lane_info(info, 0, 2) == {"is_success": True, "other": 3}
    assert lane_info(info, 1, 2) == {"other": 3}


def test_batched_corners_get_one_context_per_row_with_each_lanes_seed() -> None:
    # DELTA-32
    rows: list[list[Any]] = []

    class Ctx(NumpyModel):
        def predict_batch(self, obs: Any, context: Any) -> Any:
            rows.append([(c["episode_seed"], c["predict_index"]) for c in context])
            return np.zeros((len(obs), 1), np.float32)

    ev.run(Ctx(), counting_vector(2, length=2), seeds=[5, 6])
    assert rows[0] == [(5, 0), (6, 0)] and rows[1] == [(5, 1), (6, 1)]
