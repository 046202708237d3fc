"""Spec'd models on tagged envs: adapter resolution, instruction, readers (MOD-27, MOD-30, EVAL-15..17, DELTA-48)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import rlmesh.adapters as adapt
import rlmesh.eval as ev
from rlmesh.errors import AdapterResolutionError
from rlmesh.models import NumpyModel


class Robo(gym.Env[Any, Any]):
    """Dict obs (camera, eef position, goal text); float64 Box(4) action."""

    metadata: dict[str, Any] = {}

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {
                "img": spaces.Box(0, 255, (8, 8, 3), np.uint8),
                "pos": spaces.Box(-1, 1, (3,), np.float32),
                "goal": spaces.Text(20),
            }
        )
        self.action_space = spaces.Box(-1, 1, (4,), np.float64)
        self.t = 0
        self.actions: list[Any] = []

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.t = 0
        return self._obs(), {}

    def _obs(self) -> Any:
        return {
            "img": np.full((8, 8, 3), self.t, np.uint8),
            "pos": np.array([0.1, 0.2, 0.3], np.float32),
            "goal": "env goal",
        }

    def step(self, action: Any) -> Any:
        self.actions.append(action)
        self.t += 1
        return self._obs(), 1.0, self.t >= 2, False, {"success": True}


TAGS = adapt.EnvTags(
    observation={
        "img": adapt.ImageTag(adapt.IMAGE_PRIMARY),
        "pos": adapt.StateTag(adapt.EEF_POS),
        "goal": adapt.TextTag(adapt.INSTRUCTION),
    },
    action=adapt.Action(
        adapt.Actuator(adapt.ACTION_DELTA_POS, dim=3), adapt.Actuator(adapt.ACTION_GRIPPER, dim=1)
    ),
)
SPEC = adapt.ModelSpec(
    input={
        "image": adapt.Image(adapt.IMAGE_PRIMARY, size=4),
        "state": adapt.State(adapt.EEF_POS),
        "task": adapt.Text(adapt.INSTRUCTION),
    },
    output=adapt.Action(
        adapt.Actuator(adapt.ACTION_DELTA_POS, dim=3), adapt.Actuator(adapt.ACTION_GRIPPER, dim=1)
    ),
)


@pytest.fixture
def env() -> Robo:
    return adapt.tag(Robo(), TAGS)  # type: ignore[no-any-return]


def test_a_spec_d_model_sees_only_its_payload_and_the_env_gets_its_own_action_dtype(
    env: Robo,
) -> None:
    seen: list[Any] = []

    def predict(x: Any) -> Any:
        seen.append(x)
        return np.array([0.1, 0.2, 0.3, 1.0], np.float32)

    result = ev.run(NumpyModel(predict, spec=SPEC), env)
    assert result.episodes[0].success is True
    assert set(seen[0]) == {"image", "state", "task"}
    assert seen[0]["image"].shape == (4, 4, 3)
    assert seen[0]["task"] == "env goal"
    assert env.actions[0].dtype == np.float64 and env.actions[0].shape == (4,)  # DELTA-48 cast


def test_instruction_overrides_every_text_leaf(env: Robo) -> None:
    # MOD-30
    seen: list[Any] = []
    ev.run(
        NumpyModel(lambda x: seen.append(x["task"]) or np.zeros(4, np.float32), spec=SPEC),
        env,
        instruction="pick it",
    )
    assert seen == ["pick it", "pick it"]


def test_spec_none_on_a_tagged_env_asks_for_a_spec_or_no_adapter(env: Robo) -> None:
    # MOD-27
    with pytest.raises(AdapterResolutionError, match="spec=NO_ADAPTER"):
        ev.run(NumpyModel(lambda x: np.zeros(4)), env)


def test_no_adapter_drives_the_raw_env_values(env: Robo) -> None:
    seen: list[Any] = []
    ev.run(NumpyModel(lambda x: seen.append(x) or np.zeros(4), spec=ev.NO_ADAPTER), env)
    assert set(seen[0]) == {"img", "pos", "goal"}


def test_a_spec_that_is_not_a_model_spec_is_refused(env: Robo) -> None:
    with pytest.raises(AdapterResolutionError, match="ModelSpec or NO_ADAPTER"):
        ev.run(NumpyModel(lambda x: np.zeros(4), spec="nope"), env)


def test_random_sample_ignores_tags(env: Robo) -> None:
    assert ev.run(ev.RANDOM_SAMPLE, env).total_steps == 2


def test_session_reads_roles_through_the_adapter_pipeline(env: Robo) -> None:
    # EVAL-15..17
    with ev.session(NumpyModel(lambda x: np.zeros(4), spec=SPEC), env) as sess:
        obs, _ = sess.reset()
        roles = sess.observation_roles()
        assert roles.images == (adapt.IMAGE_PRIMARY,) and roles.texts == (adapt.INSTRUCTION,)
        np.testing.assert_allclose(sess.read(obs, adapt.EEF_POS), [0.1, 0.2, 0.3])
        assert sess.read(obs, adapt.Image(adapt.IMAGE_PRIMARY, size=2)).shape == (2, 2, 3)
        reader = sess.reader(adapt.EEF_POS, adapt.INSTRUCTION)
        assert set(reader(obs)) == {adapt.EEF_POS, adapt.INSTRUCTION}
        assert sess.frame_sources() == (adapt.IMAGE_PRIMARY,)
        with pytest.raises(TypeError):
            sess.reader()


def test_step_events_read_lazily_through_the_session(env: Robo) -> None:
    got: list[Any] = []

    class H(ev.RunHooks):
        def on_step(self, event: Any) -> None:
            got.append(event.read(adapt.EEF_POS))

    ev.run(NumpyModel(lambda x: np.zeros(4, np.float32), spec=SPEC), env, hooks=H())
    assert len(got) == 2
    np.testing.assert_allclose(got[0], [0.1, 0.2, 0.3])


def test_an_untagged_env_has_empty_roles() -> None:
    with ev.session(NumpyModel(lambda x: np.zeros(4)), Robo()) as sess:
        assert sess.observation_roles().images == ()


def test_replayed_chunk_steps_keep_frame_stacks_consecutive() -> None:
    # DELTA-69: stack=3, horizon 2, frames numbered by step -> [[0,0,0],[0,1,2],[2,3,4]]
    class Long(Robo):
        def step(self, action: Any) -> Any:
            obs, r, _te, tr, info = super().step(action)
            return obs, r, self.t >= 5, tr, info

    spec = adapt.ModelSpec(
        input={
            "image": adapt.Image(adapt.IMAGE_PRIMARY, stack=3),
            "state": adapt.State(adapt.EEF_POS),
        },
        output=SPEC.output,
    )
    stacks: list[list[int]] = []

    class Chunky(NumpyModel):
        def predict_chunk(self, x: Any, h: int) -> Any:
            stacks.append([int(frame[0, 0, 0]) for frame in x["image"]])
            return np.zeros((h, 4), np.float32)

    ev.run(Chunky(spec=spec), adapt.tag(Long(), TAGS), execution_horizon=2)
    assert stacks == [[0, 0, 0], [0, 1, 2], [2, 3, 4]]


def test_frame_history_over_the_budget_is_refused(
    env: Robo, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DELTA-48: 1 env x stack 3 x (8*8*3 bytes) = 576 bytes
    monkeypatch.setenv("RLMESH_FRAME_HISTORY_LIMIT_BYTES", "500")
    spec = adapt.ModelSpec(
        input={"image": adapt.Image(adapt.IMAGE_PRIMARY, stack=3)}, output=SPEC.output
    )
    with pytest.raises(ValueError, match="frame history would hold 576 bytes"):
        ev.run(NumpyModel(lambda x: np.zeros(4, np.float32), spec=spec), env)
    monkeypatch.setenv("RLMESH_FRAME_HISTORY_LIMIT_BYTES", "576")
    ev.run(NumpyModel(lambda x: np.zeros(4, np.float32), spec=spec), env)
