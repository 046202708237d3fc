"""Session lifecycle: lazy connect, manual driving, episode edges, close (EVAL-5..18, EVAL-30..32, DELTA-31/47/48)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from eval_envs import ContractOnly, CountEnv, counting_vector

import rlmesh.eval as ev
from rlmesh.eval import Session
from rlmesh.models import NumpyModel


class Recorder(NumpyModel):
    """Records predicts, contexts and episode ends."""

    def __init__(self) -> None:
        self.ends: list[str] = []
        self.contexts: list[dict[str, Any]] = []
        super().__init__()

    def predict(self, obs: Any, context: Any) -> Any:
        self.contexts.append(context)
        return np.zeros(1, dtype=np.float32)

    def on_episode_end(self, episode_id: str = "") -> None:
        self.ends.append(episode_id)


def test_Session_is_not_constructed_directly() -> None:
    # EVAL-5
    with pytest.raises(TypeError, match=r"use rlmesh.session\(model, env\)"):
        Session()


def test_session_connects_lazily_on_first_use() -> None:
    # EVAL-10: no reset, no contract read at session()
    env = CountEnv()
    sess = ev.session(NumpyModel(lambda o: o), env)
    assert sess._conn is None and env.resets == []
    sess.reset(seed=3)
    assert sess._conn is not None and env.resets == [(3, None)]
    sess.close()


def test_manual_reset_predict_step_drive_one_episode() -> None:
    env = CountEnv(length=2)
    with ev.session(NumpyModel(lambda o: o * 0 + 0.5), env) as sess:
        obs, info = sess.reset()
        assert info == {"reset": True} and not sess.done
        steps = 0
        while not sess.done:
            obs, reward, terminated, _truncated, info = sess.step(sess.predict(obs))
            assert isinstance(reward, float) and isinstance(terminated, bool)
            steps += 1
        assert steps == 2 and env.resets == [(None, None)]
        np.testing.assert_array_equal(env.actions[0], [0.5])


def test_reset_without_a_seed_calls_reset_with_no_seed() -> None:
    # EVAL-12: env.reset() when seed is None
    class NoSeedEnv(CountEnv):
        def reset(self) -> Any:  # type: ignore[override]
            return np.zeros(1, dtype=np.float32)  # a bare obs: info becomes {}

    with ev.session(NumpyModel(lambda o: o), NoSeedEnv()) as sess:
        _obs, info = sess.reset()
        assert info == {}


def test_on_episode_end_fires_once_per_episode_at_the_next_reset_and_at_close() -> None:
    # EVAL-12, MOD-23
    m = Recorder()
    sess = ev.session(m, CountEnv())
    sess.reset()
    first = sess._episode_id
    assert m.ends == []
    sess.reset()
    assert m.ends == [first]
    second = sess._episode_id
    sess.close()
    sess.close()
    assert m.ends == [first, second]


def test_local_episode_ids_are_fresh_uuid4_hex_and_the_context_carries_seed_and_counters() -> None:
    # DELTA-30/31
    m = Recorder()
    with ev.session(m, CountEnv()) as sess:
        obs, _ = sess.reset(seed=7)
        sess.predict(obs)
        sess.predict(obs)
        eid = sess._episode_id
    assert re.fullmatch(r"[0-9a-f]{32}", eid)
    a, b = m.contexts
    assert a["episode_id"] == eid == b["episode_id"]
    assert (a["episode_seed"], a["predict_index"], b["predict_index"]) == (7, 0, 1)
    assert a["predict_seed"] == ev.predict_seed(7, 0)
    assert a["state"] is b["state"]


def test_use_after_close_raises_and_close_is_idempotent() -> None:
    # EVAL-32
    sess = ev.session(NumpyModel(lambda o: o), CountEnv())
    sess.close()
    sess.close()
    for call in (
        lambda: sess.reset(),
        lambda: sess.predict(np.zeros(1)),
        lambda: sess.step(np.zeros(1)),
        lambda: sess.run(),
        lambda: sess.read(np.zeros(1), "x"),
        lambda: sess.reader("x"),
        lambda: sess.observation_roles(),
    ):
        with pytest.raises(RuntimeError, match="session is closed"):
            call()


def test_close_never_closes_a_user_env_unless_close_env() -> None:
    # EVAL-31
    env = CountEnv()
    with ev.session(NumpyModel(lambda o: o), env) as sess:
        sess.reset()
    assert env.closed == 0
    with ev.session(NumpyModel(lambda o: o), env, close_env=True) as sess:
        sess.reset()
    assert env.closed == 1


def test_close_runs_every_step_and_reraises_the_first_error() -> None:
    # DELTA-48
    class Boom(NumpyModel):
        def predict(self, obs: Any) -> Any:
            return obs

        def on_episode_end(self, episode_id: str = "") -> None:
            raise KeyError("end hook")

    env = CountEnv()
    sess = ev.session(Boom(), env, close_env=True)
    sess.reset()
    with pytest.raises(KeyError, match="end hook"):
        sess.close()
    assert env.closed == 1


def test_a_model_instance_is_borrowed_but_a_class_is_owned_and_closed() -> None:
    # DELTA-29
    closes = []

    class M(NumpyModel):
        def predict(self, obs: Any) -> Any:
            return obs

        def close(self) -> None:
            closes.append(type(self).__name__)

    ev.run(M(), CountEnv())
    assert closes == []
    ev.run(M, CountEnv())
    assert closes == ["M"]


def test_a_local_env_negotiates_no_workflow_edition() -> None:
    with (
        ev.session(NumpyModel(lambda o: o), CountEnv()) as sess,
        pytest.raises(RuntimeError, match="a local env negotiates no workflow edition"),
    ):
        _ = sess.selected_workflow_edition


def test_contract_and_num_envs_of_a_local_env() -> None:
    env = CountEnv()
    env.metadata = {"k": 1}
    with ev.session(NumpyModel(lambda o: o), env) as sess:
        assert sess.num_envs == 1
        assert dict(sess.contract.metadata) == {"k": 1}
        assert sess.frame_sources() == ()


def test_manual_driving_of_a_vector_env_is_refused_with_num_envs() -> None:
    # EVAL-60, DELTA-48
    with (
        ev.session(NumpyModel(lambda o: o), counting_vector(3)) as sess,
        pytest.raises(ValueError, match="num_envs=3"),
    ):
        sess.reset()


def test_trial_index_reaches_only_an_env_that_declares_it() -> None:
    # DELTA-47
    plain = CountEnv()
    with (
        ev.session(NumpyModel(lambda o: o), plain) as sess,
        pytest.warns(UserWarning, match='declares no "trial_index" reset option'),
    ):
        sess.reset(trial_index=3)
    assert plain.resets == [(None, None)]
    declared = CountEnv()
    declared.metadata = {ev.ENV_RESET_OPTIONS_KEY: ["trial_index"]}
    with ev.session(NumpyModel(lambda o: o), declared) as sess:
        sess.reset(seed=1, trial_index=3)
    assert declared.resets == [(1, {"trial_index": 3})]


@pytest.mark.parametrize(
    ("target", "match"),
    [
        (42, r"reset\(\) and step\(\)"),
        (ContractOnly(), "only env_contract cannot be stepped"),
        (CountEnv, "is a class"),
    ],
)
def test_env_targets_of_no_accepted_form_are_refused(target: Any, match: str) -> None:
    # EVAL-6
    with pytest.raises(TypeError, match=match):
        ev.session(NumpyModel(lambda o: o), target)


def test_a_duck_factory_is_made_once_and_its_env_closed_with_the_session() -> None:
    # EVAL-6, DELTA-51
    built: list[CountEnv] = []

    class Factory:
        def make(self) -> CountEnv:
            env = CountEnv()
            built.append(env)
            return env

    ev.run(NumpyModel(lambda o: o), Factory(), max_episodes=2)
    assert len(built) == 1 and built[0].closed == 1


def test_an_EnvFactory_class_target_builds_and_closes_its_env() -> None:
    from rlmesh.authoring import EnvFactory

    built: list[CountEnv] = []

    class Factory(EnvFactory):
        def make(self) -> Any:
            env = CountEnv()
            built.append(env)
            return env

    ev.run(NumpyModel(lambda o: o), Factory, seeds=[1])
    assert built[0].resets == [(1, None)] and built[0].closed == 1
