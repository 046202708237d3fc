"""Opaque spaces: an env's own ``gymnasium.Space`` kind, its values plain data, its peer answering."""

from __future__ import annotations

import copy
import enum
import pickle
from collections import namedtuple
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlmesh._plan import value_plan
from rlmesh.errors import ProtocolException, UnsupportedSpace
from rlmesh.spaces import Dict, Discrete, SpaceSpec, from_gymnasium_space, to_gymnasium_space
from rlmesh.spaces._opaque import LocalPeer, Opaque, bind_peers, plain
from rlmesh.spaces._peers import is_plain
from rlmesh.spaces._spec import value_nbytes


class Words(gym.spaces.Space):  # type: ignore[type-arg]
    """An env's own space: one of a few words."""

    WORDS = ("red", "green", "blue")

    def __init__(self) -> None:
        super().__init__(dtype=str)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return str(self.np_random.choice(self.WORDS))

    def contains(self, x: Any) -> bool:
        return x in self.WORDS


def grid_space() -> gym.spaces.Dict:
    return gym.spaces.Dict({"direction": gym.spaces.Discrete(4), "word": Words()})


def test_an_unknown_gymnasium_space_is_refused_unless_asked_to_carry_it_opaque() -> None:
    with pytest.raises(UnsupportedSpace, match="Unsupported space type: Words at"):
        from_gymnasium_space(grid_space(), path="observation_space")
    space = from_gymnasium_space(grid_space(), opaque=True)
    assert repr(space) == f'Dict("direction": Discrete(4), "word": Opaque({__name__}.Words))'
    assert space["word"].spec.kind == "opaque" and space["word"].type_name.endswith(".Words")


def test_gymnasium_own_kinds_stay_refused_even_as_opaque() -> None:
    seq = gym.spaces.Sequence(gym.spaces.Discrete(3))
    with pytest.raises(UnsupportedSpace, match="Unsupported space type: Sequence"):
        from_gymnasium_space(seq, opaque=True)


def test_sample_and_contains_are_the_env_space_s_own_and_repeatable() -> None:
    space = from_gymnasium_space(grid_space(), opaque=True)
    assert space.contains({"direction": 1, "word": "green"})
    assert not space.contains({"direction": 1, "word": "purple"})  # the peer says no
    assert not space.contains({"direction": 9, "word": "green"})  # the known leaf says no
    space.seed(11)
    first = [space.sample()["word"] for _ in range(6)]
    space.seed(11)
    assert [space.sample()["word"] for _ in range(6)] == first
    assert set(first) <= set(Words.WORDS)


def test_sampling_leaves_the_env_space_s_generator_alone() -> None:
    words = Words()
    words.seed(3)
    before = words.np_random.bit_generator.state
    peer = LocalPeer(words)
    peer.sample(1), peer.sample(2)
    assert words.np_random.bit_generator.state == before


def test_a_spec_without_peer_says_nothing_can_answer_for_it() -> None:
    space = Dict({"d": Discrete(4), "m": Opaque("MissionSpace")})
    with pytest.raises(RuntimeError, match="not connected to one"):
        space.sample()
    with pytest.raises(RuntimeError, match="not connected to one"):
        space.contains({"d": 0, "m": "x"})


def test_the_spec_round_trips_compares_by_type_and_keeps_its_peer_when_copied() -> None:
    spec = from_gymnasium_space(grid_space(), opaque=True).spec
    leaf = spec._d["spaces"]["word"]
    assert leaf._to_dict() == {
        "kind": "opaque",
        "shape": [],
        "dtype": "object",
        "details": {"type": f"{__name__}.Words"},
    }
    again = SpaceSpec._from_dict(spec._to_dict())
    assert again == spec and hash(again) == hash(spec)
    assert again._d["spaces"]["word"]._peer is None  # a peer is a connection's, not data
    assert copy.deepcopy(spec) is spec and leaf._peer is not None
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert value_nbytes(leaf) == 0
    with pytest.raises(ValueError, match="type name"):
        SpaceSpec._from_dict({"kind": "opaque", "details": {"type": ""}})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("a mission", "a mission"),
        (np.int64(3), 3),
        (np.arange(3, dtype=np.int8), [0, 1, 2]),
        ((1, (2.5, None)), [1, [2.5, None]]),
        ({"k": np.float32(0.5)}, {"k": 0.5}),
        (namedtuple("P", "x y")(1, 2), {"x": 1, "y": 2}),
        (enum.Enum("Color", "RED")["RED"], 1),
        (b"raw", b"raw"),
    ],
)
def test_values_become_plain_data(value: Any, expected: Any) -> None:
    out = plain(value)
    assert out == expected and is_plain(out)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (object(), "$: a value of an opaque space must be plain data"),
        ({1: "a"}, "dict keys of an opaque value must be str"),
        ([{"x": {1, 2}}], "$[0].x: a value of an opaque space must be plain data"),
        (2**70, "does not fit 64 bits"),
    ],
)
def test_values_that_are_not_plain_data_are_refused_with_their_path(value: Any, words: str) -> None:
    with pytest.raises(TypeError, match=words.replace("[", r"\[").replace("$", r"\$")):
        plain(value)


def test_opaque_values_travel_in_the_header_exactly_one_env_and_lanes() -> None:
    spec = Dict({"d": Discrete(4), "m": Opaque("M")}).spec
    plan = value_plan(spec, bridge="numpy")
    scalars, segments = plan.pack({"d": 2, "m": ("go", {"n": np.int32(1)})})
    assert (scalars, segments) == ([2, ["go", {"n": 1}]], [])
    assert plan.unpack(scalars, segments) == {"d": 2, "m": ["go", {"n": 1}]}
    lanes = value_plan(Opaque("M").spec, lanes=2, bridge="numpy")
    scalars, _ = lanes.pack(["a", "b"])
    assert lanes.unpack(scalars, []) == ["a", "b"]
    with pytest.raises(ProtocolException, match="opaque value must be plain data"):
        plan.join([2, np.zeros(2)], [])
    with pytest.raises(ProtocolException, match="a list of 2 plain values"):
        lanes.join(["a"], [])


def test_every_flavour_hands_opaque_values_over_as_they_are() -> None:
    spec = Opaque("M").spec
    for bridge in ("plain", "numpy"):
        assert value_plan(spec, bridge=bridge).unpack([{"a": [1]}], []) == {"a": [1]}


def test_the_gymnasium_stand_in_asks_the_same_peer_and_survives_batching() -> None:
    spec = from_gymnasium_space(grid_space(), opaque=True).spec
    gspace = to_gymnasium_space(spec)
    word = gspace["word"]
    assert isinstance(word, gym.spaces.Space) and repr(word).startswith("OpaqueSpace(")
    assert word.contains("red") and not word.contains("pink")
    assert gspace.contains({"direction": np.int64(2), "word": "blue"})
    batched = gym.vector.utils.batch_space(gspace, 2)
    assert batched["word"][1].sample() in Words.WORDS
    assert from_gymnasium_space(gspace).spec == spec  # back to the same opaque spec


def test_bind_peers_reaches_every_opaque_leaf_with_its_path() -> None:
    spec = Dict({"a": Opaque("X"), "b": Dict({"c": Opaque("Y")})}).spec
    seen: list[tuple[Any, ...]] = []

    def make(path: tuple[Any, ...], leaf: SpaceSpec) -> Any:
        seen.append(path)
        return LocalPeer(Words())

    bind_peers(spec, make)
    assert seen == [("a",), ("b", "c")]
