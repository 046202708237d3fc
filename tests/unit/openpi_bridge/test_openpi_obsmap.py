"""The openpi bridge's observation map and client settings (no sockets)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh.adapters as adapt
from rlmesh.errors import AdapterResolutionError, ShapeMismatch
from rlmesh.openpi import Image, PolicyClient, State, obs_map_from_json
from rlmesh.openpi._client import _ActionCheck
from rlmesh.openpi._obsmap import compile_obs_map

OBS_SPACE = gym.spaces.Dict(
    {
        "agentview": gym.spaces.Box(0, 255, (32, 24, 3), np.uint8),
        "robot": gym.spaces.Dict(
            {
                "eef": gym.spaces.Box(-1, 1, (3,), np.float32),
                "grip": gym.spaces.Box(0, 1, (1,), np.float32),
            }
        ),
        "goal": gym.spaces.Text(64),
    }
)
ACT_SPACE = gym.spaces.Box(-1, 1, (4,), np.float32)


def contract(tagged: bool = False) -> Any:
    metadata = None
    if tagged:
        tags = adapt.EnvTags(
            observation={
                "agentview": adapt.ImageTag(adapt.IMAGE_PRIMARY),
                "robot": {
                    "eef": adapt.StateTag(adapt.EEF_POS),
                    "grip": adapt.StateTag(adapt.GRIPPER_POS),
                },
                "goal": adapt.TextTag(adapt.INSTRUCTION),
            },
            action=adapt.Action(
                adapt.Actuator(adapt.ACTION_DELTA_POS, dim=3),
                adapt.Actuator(adapt.ACTION_GRIPPER, dim=1),
            ),
        )
        metadata = tags.to_metadata()
    return SimpleNamespace(observation_space=OBS_SPACE, action_space=ACT_SPACE, metadata=metadata)


def observation() -> dict[str, Any]:
    image = np.arange(32 * 24 * 3, dtype=np.uint32).reshape(32, 24, 3).astype(np.uint8)
    return {
        "agentview": image,
        "robot": {
            "eef": np.array([0.1, 0.2, 0.3], np.float32),
            "grip": np.array([0.5], np.float32),
        },
        "goal": "stack the blocks",
    }


def test_paths_nested_paths_and_the_whole_observation() -> None:
    mapper = compile_obs_map(
        {"observation/eef": "robot/eef", "observation/image": "agentview", "all": ""},
        contract(),
        prompt="go",
    )
    out = mapper(observation())
    assert out["observation/eef"].tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert out["observation/image"].shape == (32, 24, 3)
    assert out["all"]["goal"] == "stack the blocks"
    assert out["prompt"] == "go"
    assert mapper.keys == ["observation/eef", "observation/image", "all", "prompt"]


def test_without_a_map_a_dict_observation_goes_key_by_key() -> None:
    out = compile_obs_map(None, contract(), prompt=None)(observation())
    assert sorted(out) == ["agentview", "goal", "robot/eef", "robot/grip"]
    flat = compile_obs_map(
        None, SimpleNamespace(observation_space=gym.spaces.Box(-1, 1, (3,))), prompt=None
    )
    assert list(flat(np.zeros(3))) == ["observation/state"]
    unknown = compile_obs_map(None, None, prompt=None)  # no space known: the value decides
    assert sorted(unknown(observation())) == ["agentview", "goal", "robot/eef", "robot/grip"]


def test_images_resize_with_the_adapters_kernels_and_cast() -> None:
    mapper = compile_obs_map(
        {"img": Image("agentview", size=(16, 12)), "f": Image("agentview", dtype="float32")},
        contract(),
        prompt=None,
    )
    out = mapper(observation())
    assert out["img"].shape == (16, 12, 3) and out["img"].dtype == np.uint8
    assert out["f"].dtype == np.float32 and out["f"].shape == (32, 24, 3)
    chw = compile_obs_map({"img": Image("", size=8)}, None, prompt=None)
    assert chw(np.zeros((3, 20, 10), np.uint8))["img"].shape == (8, 8, 3)  # CHW is transposed


def test_states_flatten_concatenate_and_cast() -> None:
    out = compile_obs_map(
        {"observation/state": State("robot/eef", "robot/grip", dtype="float64")},
        contract(),
        prompt=None,
    )(observation())
    assert out["observation/state"].dtype == np.float64
    assert out["observation/state"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.5])


def test_roles_of_a_tagged_env_and_its_instruction_as_the_prompt() -> None:
    mapper = compile_obs_map(
        {
            "image": Image(adapt.IMAGE_PRIMARY, size=16),
            "eef": adapt.EEF_POS,
            "state": State(adapt.EEF_POS, adapt.GRIPPER_POS),
        },
        contract(tagged=True),
        prompt=None,
    )
    out = mapper(observation())
    assert out["image"].shape == (16, 16, 3)
    assert out["eef"].tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert out["state"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.5])
    assert out["prompt"] == "stack the blocks"  # the env's instruction role
    given = compile_obs_map({"eef": adapt.EEF_POS}, contract(tagged=True), prompt="mine")
    assert given(observation())["prompt"] == "mine"


def test_a_key_that_names_nothing_says_which_paths_and_roles_there_are() -> None:
    with pytest.raises(
        AdapterResolutionError, match=r"obs_map\['cam'\] = 'wrist'.*robot/eef.*untagged"
    ):
        compile_obs_map({"cam": "wrist"}, contract(), prompt=None)
    with pytest.raises(AdapterResolutionError, match=r"needs an image"):
        compile_obs_map({"cam": Image("robot/eef")}, contract(), prompt=None)
    with pytest.raises(TypeError, match="must be a path or role string"):
        compile_obs_map({"cam": 3}, contract(), prompt=None)
    with pytest.raises(TypeError, match="State"):
        compile_obs_map(
            {"s": adapt.Concat(adapt.EEF_POS, adapt.GRIPPER_POS)}, contract(), prompt=None
        )


def test_a_value_that_does_not_fit_its_entry_is_ShapeMismatch_naming_the_key() -> None:
    mapper = compile_obs_map({"img": Image("pixels", size=8)}, None, prompt=None)
    with pytest.raises(ShapeMismatch, match=r"obs_map\['img'\].*needs uint8") as info:
        mapper({"pixels": np.zeros((4, 4, 3), np.float32)})
    assert info.value.key == "img"
    with pytest.raises(ShapeMismatch, match="no 'pixels' there"):
        mapper({"other": 1})


def test_actions_are_checked_against_the_envs_action_space() -> None:
    check = _ActionCheck(ACT_SPACE)
    out = check({"actions": np.ones((10, 4), np.float64)})
    assert out.shape == (10, 4) and out.dtype == np.float32 and out.flags.writeable
    assert check({"actions": np.ones(4)}).shape == (1, 4)  # one action: a one-frame chunk
    with pytest.raises(ShapeMismatch, match=r"float32\[H, 4\]") as info:
        check({"actions": np.ones((10, 7))})
    assert info.value.key == "actions"
    with pytest.raises(ShapeMismatch, match="has no 'actions'"):
        check({"action": np.ones((1, 4))})
    with pytest.raises(TypeError, match="one actions array"):
        _ActionCheck(gym.spaces.Dict({"a": ACT_SPACE}))
    assert _ActionCheck(gym.spaces.Discrete(3))({"actions": np.array([2, 1])}).tolist() == [2, 1]


def test_obs_map_from_json() -> None:
    got = obs_map_from_json(
        {
            "a": "x",
            "b": {"image": "cam", "size": [8, 6], "dtype": "float32"},
            "c": {"state": ["p", "q"]},
        }
    )
    assert got == {"a": "x", "b": Image("cam", size=(8, 6), dtype="float32"), "c": State("p", "q")}
    with pytest.raises(ValueError, match="unknown image option"):
        obs_map_from_json({"b": {"image": "cam", "sise": 8}})
    with pytest.raises(ValueError, match="must be a path or role string"):
        obs_map_from_json({"b": 3})


def test_a_client_checks_its_settings_and_pickles_them_only() -> None:
    with pytest.raises(ValueError, match=r"ws://host:port"):
        PolicyClient("http://127.0.0.1:8000")
    with pytest.raises(ValueError, match="request_timeout_seconds"):
        PolicyClient("ws://127.0.0.1:8000", request_timeout_seconds=0)
    client = PolicyClient("ws://127.0.0.1:8000", obs_map={"observation/state": ""}, prompt="p")
    copy = pickle.loads(pickle.dumps(client))  # what workers= ships: no connection
    assert (copy.url, copy.obs_map, copy.prompt) == (client.url, client.obs_map, client.prompt)
    assert copy.observation_keys == []
