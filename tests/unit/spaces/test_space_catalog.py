"""Every catalog space through every generic property (STYLE "One catalog, every property")."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from space_catalog import IDS, SPACES, rebuilt

from rlmesh import Tensor
from rlmesh.spaces import (
    Space,
    SpaceSpec,
    from_gymnasium_space,
    space_from_spec,
    to_gymnasium_space,
)
from rlmesh.spaces._values import check_value, compile_encoder, compile_range_check
from strategies import gym_exact

catalog = pytest.mark.parametrize("space", SPACES, ids=IDS)


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, tuple):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, (np.ndarray, Tensor)):
        x, y = np.asarray(a), np.asarray(b)
        return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=True)
    return type(a) is type(b) and a == b


@catalog
def test_spec_dict_round_trip_is_exact(space: Space) -> None:  # SPC-3
    d = space.spec._to_dict()
    again = SpaceSpec._from_dict(d)
    assert again == space.spec
    assert again._to_dict() == d
    assert hash(again) == hash(space.spec)


@catalog
def test_space_from_spec_rebuilds_the_same_class_and_equal_space(space: Space) -> None:  # SPC-72
    again = space_from_spec(space.spec)
    assert type(again) is type(space)
    assert again == space and again == space.spec
    assert rebuilt(space) == space


@catalog
def test_repr_of_space_equals_repr_of_spec(space: Space) -> None:  # SPC-6
    assert repr(space) == repr(space.spec)


@catalog
def test_pickle_and_deepcopy_keep_the_space_and_its_random_stream(space: Space) -> None:
    space.seed(7)
    space.sample()
    clone = pickle.loads(pickle.dumps(space))
    assert clone == space and type(clone) is type(space)
    assert _same(clone.sample(), space.sample())
    dup = copy.deepcopy(space)
    assert _same(dup.sample(), space.sample())
    assert pickle.loads(pickle.dumps(space.spec)) == space.spec


@catalog
def test_samples_are_contained(space: Space) -> None:  # SPC-73, VAL-4
    space.seed(0)
    for _ in range(50):
        value = space.sample()
        assert space.contains(value), value
        assert value in space if space.kind != "dict" else space.contains(value)


@catalog
def test_numpy_bridge_samples_are_canonical_and_contained(space: Space) -> None:
    np_space = rebuilt(space, "numpy")
    np_space.seed(1)
    encode = compile_encoder(space.spec)
    for _ in range(20):
        value = np_space.sample()
        assert np_space.contains(value) and space.contains(value)
        assert _same(encode(value), value)  # already canonical: the encoder changes nothing
        check_value(space.spec, value)


@catalog
def test_plain_samples_use_tensors_for_array_leaves(space: Space) -> None:  # VAL-2
    space.seed(2)
    for leaf in _leaves(space.sample()):
        assert isinstance(leaf, (Tensor, int, str)) and not isinstance(leaf, np.ndarray)


@catalog
def test_equal_seeds_give_equal_sample_sequences(space: Space) -> None:  # SMP-1
    assert space.seed(123) == 123
    first = [space.sample() for _ in range(5)]
    other = rebuilt(space)
    assert other.seed(123) == 123
    assert all(_same(a, b) for a, b in zip(first, [other.sample() for _ in range(5)], strict=True))


@catalog
def test_seed_none_draws_and_returns_an_int(space: Space) -> None:  # SMP-1
    seed = space.seed()
    assert isinstance(seed, int) and seed >= 0
    a = space.sample()
    space.seed(seed)
    assert _same(space.sample(), a)


@catalog
def test_batched_samples_encode_with_lanes(space: Space) -> None:  # VAL-15
    np_space = rebuilt(space, "numpy")
    np_space.seed(3)
    lanes = [np_space.sample() for _ in range(3)]
    encode = compile_encoder(space.spec, lanes=3)
    batch = encode(lanes)
    check = compile_range_check(space.spec, lanes=3)
    assert check is None or check(batch) == []
    check_value(space.spec, lanes, lanes=3)


@catalog
def test_gymnasium_round_trip_keeps_the_space_exactly(space: Space) -> None:  # GYM-1..7
    gym_space = to_gymnasium_space(space)
    if gym_exact(space.spec):
        assert from_gymnasium_space(gym_space) == space
    else:  # an unrestricted Text comes back over string.printable (CNF2-A2); Gymnasium's side is stable
        assert to_gymnasium_space(from_gymnasium_space(gym_space)) == gym_space
    assert to_gymnasium_space(space.spec) == gym_space
    assert space.to_gymnasium_space() == gym_space


def _free_text(spec: SpaceSpec) -> bool:
    if spec.kind == "text":
        return not spec._d["charset"]
    return any(_free_text(c) for _, c in spec._children())


@catalog
def test_gymnasium_and_rlmesh_agree_on_samples(space: Space) -> None:
    gym_space = to_gymnasium_space(space)
    gym_space.seed(0)
    np_space = rebuilt(space, "numpy")
    np_space.seed(0)
    # An unrestricted rlmesh Text maps to Gymnasium's alphanumeric default (GYM-5), which
    # admits fewer strings than rlmesh samples (SMP-3 adds " .,!?").
    ours_in_gym = not _free_text(space.spec)
    for _ in range(20):
        assert space.contains(gym_space.sample())
        if ours_in_gym:
            assert gym_space.contains(np_space.sample())
