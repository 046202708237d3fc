"""The drive loop: accounting, caps, hooks, failures, chunk replay, timings (EVAL-1..4, EVAL-20..27, EVAL-50..52)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from eval_envs import CountEnv, DictEnv

import rlmesh.eval as ev
from rlmesh.eval import RunHooks, _loop as loop
from rlmesh.models import Model, NumpyModel


def zero(obs: Any) -> Any:
    return np.zeros(1, dtype=np.float32)


class Trace(RunHooks):
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.results: list[Any] = []

    def on_run_start(self, context: Any) -> None:
        self.events.append(("run_start", context.num_envs))

    def on_episode_start(self, *, episode: int, seed: int | None) -> None:
        self.events.append(("start", episode, seed))

    def on_step(self, event: Any) -> None:
        self.events.append(("step", event.episode, event.step))
        self.results.append(event)

    def on_episode_end(self, result: Any) -> None:
        self.events.append(("end", result.index))

    def on_run_end(self, result: Any) -> None:
        self.events.append(("run_end", result.num_episodes))
        self.final = result


# -- accounting (EVAL-21, DELTA-39) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected_seeds"),
    [
        ({}, [None]),
        ({"seeds": [7, 8]}, [7, 8]),
        ({"seeds": [7], "max_episodes": 3}, [7, None, None]),
        ({"max_episodes": 2}, [None, None]),
        ({"seeds": [7, 8], "episodes": 2}, [7, 8]),
        ({"episodes": 2}, [None, None]),
    ],
)
def test_seeds_and_episode_counts_decide_which_episodes_run(
    kwargs: dict[str, Any], expected_seeds: list[Any]
) -> None:
    env = CountEnv(length=1)
    result = ev.run(NumpyModel(zero), env, **kwargs)
    assert [e.seed for e in result.episodes] == expected_seeds
    assert [s for s, _ in env.resets] == expected_seeds
    assert [e.index for e in result.episodes] == list(
        range(len(expected_seeds))
    )  # 0-based (DECISION-3)


@pytest.mark.parametrize("kwargs", [{"seeds": []}, {"max_episodes": 0}, {"episodes": 0}])
def test_an_empty_budget_returns_an_empty_result_without_resetting(kwargs: dict[str, Any]) -> None:
    env = CountEnv()
    hooks = Trace()
    result = ev.run(NumpyModel(zero), env, hooks=hooks, **kwargs)
    assert result.num_episodes == 0 and env.resets == []
    assert hooks.events == [("run_end", 0)]


def test_episodes_must_agree_with_the_seed_count() -> None:
    with pytest.raises(ValueError, match=r"episodes=3 does not match len\(seeds\)=2"):
        ev.run(NumpyModel(zero), CountEnv(), seeds=[1, 2], episodes=3)
    with pytest.raises(ValueError, match="disagree"):
        ev.run(NumpyModel(zero), CountEnv(), max_episodes=1, episodes=2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_episodes": -1}, "max_episodes must be >= 0, got -1"),
        ({"episodes": -1}, "episodes must be >= 0, got -1"),
        ({"max_episode_steps": 0}, "max_episode_steps"),
        ({"max_episode_seconds": 0}, "max_episode_seconds"),
        ({"trial_index_base": -1}, "trial_index_base"),
    ],
)
def test_run_arguments_are_validated_before_connecting(kwargs: dict[str, Any], match: str) -> None:
    env = CountEnv()
    with pytest.raises(ValueError, match=match):
        ev.run(NumpyModel(zero), env, **kwargs)
    assert env.resets == []


# -- caps (EVAL-22/23, DELTA-46) --------------------------------------------------------------


def test_max_episode_steps_marks_the_episode_and_the_capped_step_truncated() -> None:
    hooks = Trace()
    result = ev.run(NumpyModel(zero), CountEnv(length=10), max_episode_steps=3, hooks=hooks)
    (ep,) = result.episodes
    assert (ep.steps, ep.terminated, ep.truncated) == (3, False, True)
    assert [e.truncated for e in hooks.results] == [False, False, True]


def test_max_episode_seconds_truncates_at_the_top_of_the_step_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fake clock: every perf_counter() call advances one second.
    ticks = iter(range(10_000))
    monkeypatch.setattr(loop.time, "perf_counter", lambda: float(next(ticks)))
    result = ev.run(NumpyModel(zero), CountEnv(length=100), max_episode_seconds=2.5)
    (ep,) = result.episodes
    assert ep.truncated and not ep.terminated
    assert 0 < ep.steps < 100


def test_the_built_in_step_bound_truncates_endless_episodes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert loop.BUILTIN_STEP_BOUND == 100_000
    monkeypatch.setattr(loop, "BUILTIN_STEP_BOUND", 5)
    (ep,) = ev.run(NumpyModel(zero), CountEnv(length=10**9)).episodes
    assert (ep.steps, ep.truncated, ep.terminated) == (5, True, False)


def test_env_truncation_is_kept_as_truncated() -> None:
    (ep,) = ev.run(NumpyModel(zero), CountEnv(length=2, truncate=True)).episodes
    assert (ep.terminated, ep.truncated) == (False, True)


# -- hooks (EVAL-26/27) -----------------------------------------------------------------------


def test_hooks_fire_in_order_and_on_run_end_gets_the_returned_result() -> None:
    hooks = Trace()
    result = ev.run(NumpyModel(zero), CountEnv(length=1), seeds=[7, 8], hooks=hooks)
    assert hooks.events == [
        ("run_start", 1),
        ("start", 0, 7),
        ("step", 0, 0),
        ("end", 0),
        ("start", 1, 8),
        ("step", 1, 0),
        ("end", 1),
        ("run_end", 2),
    ]
    assert hooks.final is result


def test_step_events_carry_the_pre_step_observation_and_the_env_action() -> None:
    hooks = Trace()
    ev.run(NumpyModel(lambda o: o + 0.5), CountEnv(length=2), hooks=hooks)
    first, second = hooks.results
    np.testing.assert_array_equal(first.observation, [0.0])
    np.testing.assert_array_equal(second.observation, [1.0])
    np.testing.assert_array_equal(second.action, [1.5])
    assert first.predict_ms >= 0 and first.step_ms >= 0 and first.info == {}


@pytest.mark.parametrize("exc_type", [RuntimeError, KeyboardInterrupt])
def test_on_run_end_fires_exactly_once_with_completed_episodes_when_the_run_fails(
    exc_type: type[BaseException],
) -> None:
    ends: list[str] = []

    class Boom(Trace):
        def on_step(self, event: Any) -> None:
            super().on_step(event)
            if event.episode == 1:
                raise exc_type("boom")

    class M(NumpyModel):
        def predict(self, obs: Any) -> Any:
            return zero(obs)

        def on_episode_end(self, episode_id: str = "") -> None:
            ends.append(episode_id)

    hooks = Boom()
    with pytest.raises(exc_type, match="boom"):
        ev.run(M(), CountEnv(length=1), seeds=[1, 2, 3], hooks=hooks)
    assert [e for e in hooks.events if e[0] in ("end", "run_end")] == [("end", 0), ("run_end", 1)]
    assert hooks.final.num_episodes == 1
    assert len(ends) == 2  # the aborted episode is still ended on the way out


def test_the_runs_own_error_wins_over_an_on_run_end_error() -> None:
    class Both(RunHooks):
        def on_step(self, event: Any) -> None:
            raise ValueError("first")

        def on_run_end(self, result: Any) -> None:
            raise KeyError("second")

    with pytest.raises(ValueError, match="first"):
        ev.run(NumpyModel(zero), CountEnv(), hooks=Both())


def test_an_on_run_end_error_alone_propagates() -> None:
    class Late(RunHooks):
        def on_run_end(self, result: Any) -> None:
            raise KeyError("late")

    with pytest.raises(KeyError, match="late"):
        ev.run(NumpyModel(zero), CountEnv(), hooks=Late())


def test_session_run_leaves_the_session_open_and_can_run_again() -> None:
    # EVAL-25
    env = CountEnv(length=1)
    with ev.session(NumpyModel(zero), env) as sess:
        assert sess.run(seeds=[1]).num_episodes == 1
        assert sess.run(seeds=[2, 3]).num_episodes == 2
        obs, _ = sess.reset(seed=4)
        sess.step(sess.predict(obs))
    assert [s for s, _ in env.resets] == [1, 2, 3, 4]


# -- results (EVAL-24, EVAL-40) ----------------------------------------------------------------


def test_episode_results_report_reward_success_timings_and_trial() -> None:
    result = ev.run(
        NumpyModel(zero), CountEnv(length=3, success=True), seeds=[5], trial_index_base=10
    )
    (ep,) = result.episodes
    assert (ep.index, ep.seed, ep.steps, ep.reward, ep.terminated, ep.success, ep.trial) == (
        0,
        5,
        3,
        3.0,
        True,
        True,
        10,
    )
    assert ep.duration_s > 0 and ep.predict_ms > 0 and ep.step_ms > 0


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [("success", 0, False), ("task_success", 1.0, True), ("is_success", "yes", None)],
)
def test_success_comes_from_the_final_info(key: str, value: Any, expected: Any) -> None:
    (ep,) = ev.run(NumpyModel(zero), CountEnv(length=2, success=value, success_key=key)).episodes
    assert ep.success is expected


def test_success_rate_falls_back_to_terminated_with_one_warning() -> None:
    result = ev.run(NumpyModel(zero), CountEnv(length=1), max_episodes=2)
    with pytest.warns(UserWarning, match="no episode reported a task-outcome"):
        assert result.success_rate == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert result.success_rate == 1.0  # warned once


def test_run_fills_telemetry_rows() -> None:
    result = ev.run(NumpyModel(zero), CountEnv(length=2), max_episodes=2)
    rows = {r.op: r for r in result.telemetry}
    assert rows["env.step"].count == 4 and rows["env.reset"].count == 2
    assert "env.step" in result.format_telemetry()


# -- models and knobs (EVAL-3/4, MOD-26/29) ------------------------------------------------------


def test_a_bare_callable_is_wrapped_in_a_numpy_model() -> None:
    seen = []
    ev.run(lambda obs: seen.append(type(obs)) or zero(obs), CountEnv(length=1))
    assert seen == [np.ndarray]


def test_a_native_model_sees_tensors_and_returns_native_actions() -> None:
    from rlmesh import Tensor

    seen = []

    def predict(obs: Any) -> Any:
        seen.append(type(obs))
        return Tensor(np.zeros(1, dtype=np.float32).tobytes(), [1], "float32")

    env = CountEnv(length=1)
    ev.run(Model(predict), env)
    assert seen == [Tensor]
    assert isinstance(env.actions[0], np.ndarray)


def test_random_sample_steps_with_action_space_samples_and_warns_on_horizon() -> None:
    env = CountEnv(length=2)
    with pytest.warns(UserWarning, match="RANDOM_SAMPLE defines no predict_chunk"):
        result = ev.run(ev.RANDOM_SAMPLE, env, execution_horizon=3)
    assert result.total_steps == 2
    assert all(env.action_space.contains(a) for a in env.actions)


def test_execution_horizon_is_validated() -> None:
    with pytest.raises(ValueError, match="execution_horizon must be >= 1, got 0"):
        ev.session(NumpyModel(zero), CountEnv(), execution_horizon=0)
    with pytest.warns(UserWarning, match="running un-chunked") as record:
        ev.session(NumpyModel(zero), CountEnv(), execution_horizon=2)
    assert record[0].filename == __file__  # the warning points at the caller
    with pytest.raises(ValueError, match="execution_horizon must be <= 1024"):
        ev.session(Chunker(), CountEnv(), execution_horizon=2000)


def test_a_device_on_a_host_model_is_refused() -> None:
    class M(NumpyModel):
        device = "cuda"

        def predict(self, obs: Any) -> Any:
            return obs

    with pytest.raises(ValueError, match="requires a torch/jax model"):
        ev.session(M(), CountEnv())


def test_view_none_works_and_a_viewer_without_cameras_warns_once_and_the_run_goes_on() -> None:
    ev.run(NumpyModel(zero), CountEnv(), view=None)
    ev.run(NumpyModel(zero), CountEnv(), view=False)
    with pytest.warns(UserWarning, match="rlmesh view: env declares no image roles") as record:
        result = ev.run(
            NumpyModel(zero), CountEnv(), view="terminal", max_episodes=2
        )  # VIEW-3, VIEW-9
    assert len(result.episodes) == 2
    assert sum("rlmesh view" in str(w.message) for w in record) == 1


def test_prefetch_lead_is_validated() -> None:
    with pytest.raises(ValueError, match="prefetch_lead must be an int >= 0"):
        ev.run(NumpyModel(zero), CountEnv(), prefetch_lead=-1)
    with pytest.raises(ValueError, match="prefetch_lead=2"):
        ev.run(ev.RANDOM_SAMPLE, CountEnv(), prefetch_lead=2)


def test_model_run_and_session_delegate_to_the_entry_points() -> None:
    # EVAL-2
    m = NumpyModel(zero)
    assert m.run(CountEnv(length=1), seeds=[1, 2]).num_episodes == 2
    with m.session(CountEnv()) as sess:
        assert isinstance(sess, ev.Session)


# -- chunk replay (EVAL-50..52, DELTA-34) --------------------------------------------------------


class Chunker(NumpyModel):
    def __init__(self, length: int = 4) -> None:
        self.length = length
        self.calls = 0
        super().__init__()

    def predict_chunk(self, obs: Any, horizon: int) -> Any:
        self.calls += 1
        return np.arange(self.length, dtype=np.float32).reshape(self.length, 1) + 10 * self.calls


@pytest.mark.parametrize(
    ("horizon", "steps", "calls"), [(1, 6, 6), (2, 6, 3), (3, 6, 2), (4, 6, 2)]
)
def test_chunk_replay_calls_the_model_once_per_horizon(
    horizon: int, steps: int, calls: int
) -> None:
    m = Chunker(length=4)
    ev.run(m, CountEnv(length=steps), execution_horizon=horizon, max_episode_steps=steps)
    assert m.calls == calls


def test_replayed_frames_reach_the_env_in_model_order_and_reset_drops_the_tail() -> None:
    m = Chunker(length=4)
    env = CountEnv(length=3)
    ev.run(m, env, execution_horizon=4, max_episodes=2)
    got = [float(np.asarray(a)[0]) for a in env.actions]
    assert got == [10.0, 11.0, 12.0, 20.0, 21.0, 22.0]


def test_an_over_producing_dict_chunk_is_capped_to_the_horizon() -> None:
    # EVAL-52
    class Arm(NumpyModel):
        def predict_chunk(self, obs: Any, h: int) -> Any:
            return {"arm": np.arange(10, dtype=np.float32).reshape(5, 2) / 10}

    env = DictEnv(length=3)
    ev.run(Arm(), env, execution_horizon=3)
    assert [a["arm"][0] for a in env.actions] == pytest.approx([0.0, 0.2, 0.4])


def test_a_short_chunk_replays_what_it_got_with_one_warning() -> None:
    m = Chunker(length=2)
    with pytest.warns(RuntimeWarning, match="fewer than execution_horizon=4"):
        ev.run(m, CountEnv(length=4), execution_horizon=4)
    assert m.calls == 2


def test_native_chunk_checks_the_horizon_and_every_chunk_length() -> None:
    class K(Chunker):
        native_chunk = 4

    with pytest.raises(
        ValueError, match="execution_horizon=8 exceeds the model's declared native_chunk=4"
    ):
        ev.run(K(), CountEnv(), execution_horizon=8)
    bad = K(length=3)
    with pytest.raises(ValueError, match="native_chunk=4 but its chunk corner returned 3 frames"):
        ev.run(bad, CountEnv(), execution_horizon=1)


def test_a_predict_failure_keeps_its_type_and_names_the_input() -> None:
    import sys

    def broken(obs: Any) -> Any:
        raise KeyError("nope")

    with pytest.raises(KeyError) as info:
        ev.run(NumpyModel(broken), CountEnv())
    if sys.version_info >= (3, 11):
        assert any("spec-less (raw obs) model input: float32[1]" in n for n in info.value.__notes__)
