"""Metadata, info and reset options across the wire (MET-1, MET-3, INFO-5, SRV-10..13, ENVCALL-1, DELTA-20).

``sanitize_metadata`` belongs to another part and is not exercised here.
"""

from __future__ import annotations

import enum
import logging
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from integration_envs import CountdownEnv

import rlmesh.numpy as rnp

pytestmark = pytest.mark.timeout(60)


class Color(enum.Enum):
    RED = "red"


class InfoEnv(CountdownEnv):
    """Puts one of every metadata-codec value kind into its step info."""

    metadata = {
        "render_modes": ["rgb_array"],
        "render_fps": 30,
        "calibration": np.arange(6, dtype=np.float32).reshape(2, 3),
        "nested": {"a": (1, 2), "b": None},
    }

    def step(self, action: Any) -> Any:
        obs, r, term, trunc, _ = super().step(action)
        info = {
            "matrix": np.arange(6, dtype=np.int16).reshape(2, 3),
            "flags": np.array([True, False]),
            "scalar": np.float32(0.5),
            "big": 2**53 + 1,
            "two": 2.0,
            "blob": b"\x00\xff",
            "pair": (1, "x"),
            "color": Color.RED,
            "nested": {"deep": [np.int64(3), {"k": None}]},
            "text": "ok",
        }
        return obs, r, term, trunc, info


def test_numpy_arrays_and_python_values_in_info_survive_the_round_trip(serve):
    server = serve(InfoEnv(5))
    with rnp.RemoteEnv(server.address) as env:
        env.reset()
        _, _, _, _, info = env.step(0)
    matrix = info["matrix"]
    assert isinstance(matrix, np.ndarray) and matrix.dtype == np.int16 and matrix.shape == (2, 3)
    np.testing.assert_array_equal(matrix, np.arange(6).reshape(2, 3))
    assert matrix.flags.writeable
    assert info["flags"].dtype == np.bool_ and info["flags"].tolist() == [True, False]
    assert info["scalar"] == 0.5 and type(info["scalar"]) is float
    assert info["big"] == 2**53 + 1 and type(info["big"]) is int  # MET-1: exact
    assert info["two"] == 2.0 and type(info["two"]) is float
    assert info["blob"] == b"\x00\xff"
    assert info["pair"] == [1, "x"]  # tuples become lists
    assert info["color"] == "red"  # enums travel as their value
    assert info["nested"] == {"deep": [3, {"k": None}]}
    assert info["text"] == "ok"


def test_endpoint_metadata_reaches_the_client_as_an_immutable_mapping(serve):
    server = serve(InfoEnv(5))
    with rnp.RemoteEnv(server.address) as env:
        md = env.metadata
        assert md["render_fps"] == 30 and md["render_modes"] == ["rgb_array"]
        np.testing.assert_array_equal(
            md["calibration"], np.arange(6, dtype=np.float32).reshape(2, 3)
        )
        assert md["calibration"].dtype == np.float32
        assert md["nested"] == {"a": [1, 2], "b": None}
        with pytest.raises(TypeError):
            md["render_fps"] = 60  # type: ignore[index]
        assert env.env_contract.metadata["render_fps"] == 30


def test_an_env_without_metadata_gives_an_empty_mapping(serve):
    class Bare:
        observation_space = gym.spaces.Discrete(2)
        action_space = gym.spaces.Discrete(2)

        def reset(self, **kwargs: Any) -> Any:
            return 0, {}

        def step(self, action: Any) -> Any:
            return 0, 0.0, False, False, {}

        def close(self) -> None:
            pass

    server = serve(Bare())
    with rnp.RemoteEnv(server.address) as env:
        assert dict(env.metadata) == {}
        assert env.env_contract.metadata is None
        with pytest.raises(TypeError):
            env.metadata["x"] = 1  # type: ignore[index]


def test_the_autoreset_mode_is_restored_to_the_gymnasium_enum_only_on_vector_clients(serve):
    vec = gym.vector.SyncVectorEnv([lambda: CountdownEnv(2)] * 2)
    server = serve(vec)
    with rnp.RemoteVectorEnv(server.address) as envs:
        assert envs.metadata["autoreset_mode"] is gym.vector.AutoresetMode.NEXT_STEP
        assert envs.env_contract.metadata["autoreset_mode"] == "NextStep"  # the wire form
        # a Gymnasium wrapper that reads the enum works on the remote vector env
        assert envs.metadata["autoreset_mode"] == vec.metadata["autoreset_mode"]


def test_the_contract_names_the_env_id_render_mode_and_lane_count(serve):
    server = serve(gym.make("CartPole-v1"))
    contract = server.env_contract
    assert (contract.id, contract.num_envs, contract.render_mode) == ("CartPole-v1", 1, None)
    assert repr(contract) == 'EnvContract(id="CartPole-v1", num_envs=1)'
    assert server.spec == contract
    with rnp.RemoteEnv(server.address) as env:
        assert env.env_contract.id == "CartPole-v1"
        assert env.spec == env.env_contract
        assert env.observation_space_spec == contract.observation_space
        assert env.action_space_spec == contract.action_space
        assert env.env_contract.to_dict()["id"] == "CartPole-v1"


@pytest.mark.parametrize("spec", [None, SimpleNamespace(id=None), SimpleNamespace(id=123)])
def test_an_env_without_a_string_spec_id_serves_as_UnknownEnv_v1(serve, spec):
    env = CountdownEnv(2)
    env.spec = spec  # type: ignore[assignment]
    server = serve(env)
    with rnp.RemoteEnv(server.address) as client:
        assert client.env_contract.id == "UnknownEnv-v1"


def test_the_contract_is_read_once_when_the_server_is_built(serve):
    env = CountdownEnv(2)
    env.metadata = {"render_modes": [], "version": 1}
    server = serve(env)
    env.metadata["version"] = 2  # SRV-6: later changes are not reflected
    env.action_space = gym.spaces.Discrete(7)
    with rnp.RemoteEnv(server.address) as client:
        assert client.metadata["version"] == 1
        assert client.action_space.n == 2


# -- reset options (ENVCALL-1, DELTA-20) --------------------------------------------------------


class OptionsEnv(CountdownEnv):
    def __init__(self) -> None:
        super().__init__(3)
        self.options: list[Any] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.options.append(options)
        return super().reset(seed=seed)


def test_reset_options_reach_the_env_as_a_plain_dict(serve):
    env = OptionsEnv()
    server = serve(env)
    with rnp.RemoteEnv(server.address) as client:
        client.reset()
        client.reset(options={"task": "pick", "goal": np.array([1.0, 2.0]), "level": 3})
        client.reset(seed=1)
    assert env.options[0] is None and env.options[2] is None  # passed only when given
    opts = env.options[1]
    assert opts["task"] == "pick" and opts["level"] == 3
    np.testing.assert_array_equal(opts["goal"], [1.0, 2.0])


def test_reset_options_the_codec_cannot_carry_are_a_TypeError_client_side(serve):
    server = serve(OptionsEnv())
    with (
        rnp.RemoteEnv(server.address) as client,
        pytest.raises(TypeError, match="sanitize_metadata"),
    ):
        client.reset(options={"handle": object()})


class NoOptionsEnv(CountdownEnv):
    def reset(self, *, seed: int | None = None) -> Any:  # type: ignore[override]
        return super().reset(seed=seed)


def test_options_for_an_env_whose_reset_takes_none_are_dropped_with_a_warning(serve, caplog):
    server = serve(NoOptionsEnv(3))
    with (
        rnp.RemoteEnv(server.address) as client,
        caplog.at_level(logging.WARNING, logger="rlmesh.serve"),
    ):
        obs, _ = client.reset(options={"task": "pick"})
        client.reset(options={"task": "place"})
    assert obs.tolist() == [0]
    messages = [r.getMessage() for r in caplog.records if "takes no options" in r.getMessage()]
    assert len(messages) == 1
