"""Gymnasium conversion with full fidelity (GYM-1..GYM-7, OPP-10/11/12)."""

from __future__ import annotations

import builtins
import string
from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings

from rlmesh.errors import DependencyMissing
from rlmesh.spaces import (
    Box,
    Dict,
    Discrete,
    MultiBinary,
    SpaceSpec,
    Text,
    from_gymnasium_space,
    to_gymnasium_space,
)
from strategies import gym_exact, space_specs

gs = gym.spaces
I64, U64 = np.iinfo(np.int64), np.iinfo(np.uint64)

GYM_CATALOG = [
    gs.Box(-1.0, 1.0, (3,)),
    gs.Box(-1.0, 1.0, (), np.float32),
    gs.Box(-np.inf, np.inf, (2, 2), np.float64),
    gs.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, np.inf], np.float32)),
    gs.Box(-0.1, 0.3, (2,), np.float16),
    gs.Box(0, 255, (4, 4, 3), np.uint8),
    gs.Box(int(I64.min), int(I64.max), (2,), np.int64),
    gs.Box(0, int(U64.max), (2,), np.uint64),
    gs.Box(np.array([0, 1], np.int16), np.array([5, 9], np.int16)),
    gs.Box(0, 1, (3,), np.bool_),
    gs.Discrete(3),
    gs.Discrete(5, start=-2, dtype=np.int32),
    gs.Discrete(4, start=250, dtype=np.uint8),
    gs.MultiBinary(4),
    gs.MultiBinary([2, 3]),
    gs.MultiDiscrete([2, 3]),
    gs.MultiDiscrete(np.array([[2, 3], [4, 5]]), dtype=np.int32, start=np.array([[1, 1], [0, -3]])),
    gs.MultiDiscrete([2, 2, 2], dtype=np.uint8, start=[1, 2, 3]),
    gs.Text(5, charset=string.printable),
    gs.Text(5, min_length=0, charset="xyz"),
    gs.Text(3, charset="αβ"),
    gs.Dict(OrderedDict([("zeta", gs.Discrete(2)), ("alpha", gs.Box(0, 1, (1,)))])),
    gs.Dict({"b": gs.Discrete(2), "a": gs.Discrete(3)}),
    gs.Tuple([gs.Discrete(2), gs.Text(3, charset=string.printable), gs.Tuple([gs.MultiBinary(2)])]),
]


def assert_gym_identical(a, b) -> None:
    """Equal, and equal in what Gymnasium's __eq__ ignores (bound arrays, dtypes, key order)."""
    assert type(a) is type(b) and a == b
    assert getattr(a, "dtype", None) == getattr(b, "dtype", None)
    if isinstance(a, gs.Box):
        assert a.shape == b.shape
        for x, y in ((a.low, b.low), (a.high, b.high)):
            assert x.dtype == y.dtype and np.array_equal(x, y)
    if isinstance(a, gs.MultiDiscrete):
        assert np.array_equal(a.nvec, b.nvec) and np.array_equal(a.start, b.start)
    if isinstance(a, gs.Dict):
        assert list(a.spaces) == list(b.spaces)
        for k in a.spaces:
            assert_gym_identical(a.spaces[k], b.spaces[k])
    if isinstance(a, gs.Tuple):
        for x, y in zip(a.spaces, b.spaces, strict=True):
            assert_gym_identical(x, y)


@pytest.mark.parametrize("gym_space", GYM_CATALOG, ids=repr)
def test_gymnasium_space_round_trips_exactly(gym_space) -> None:  # GYM-1..7
    ours = from_gymnasium_space(gym_space)
    assert_gym_identical(to_gymnasium_space(ours), gym_space)
    assert_gym_identical(to_gymnasium_space(ours.spec), gym_space)


@pytest.mark.parametrize("gym_space", GYM_CATALOG, ids=repr)
def test_gymnasium_samples_are_contained_in_the_converted_space(gym_space) -> None:
    ours = from_gymnasium_space(gym_space)
    gym_space.seed(0)
    for _ in range(10):
        assert ours.contains(gym_space.sample())


def test_box_conversion_keeps_rank0_exact_int_bounds_and_uniformity() -> None:  # GYM-2
    assert from_gymnasium_space(gs.Box(-1.0, 1.0, (), np.float32)) == Box(-1.0, 1.0, ())
    b = from_gymnasium_space(gs.Box(0, int(I64.max), (2,), np.int64))
    assert (b.bounds_kind, b.high) == ("typed_uniform", [2**63 - 1])
    assert from_gymnasium_space(gs.Box(-np.inf, np.inf, (2,))).bounds_kind == "unbounded"
    e = from_gymnasium_space(
        gs.Box(np.array([0.0, 1.0], np.float32), np.array([2.0, 3.0], np.float32))
    )
    assert (e.bounds_kind, e.low, e.high) == ("elementwise", [0.0, 1.0], [2.0, 3.0])


def test_discrete_multibinary_multidiscrete_keep_dtype_and_start() -> None:  # GYM-3/4, OPP-11
    d = from_gymnasium_space(gs.Discrete(5, start=-2, dtype=np.int32))
    assert (d.n, d.start, d.dtype) == (5, -2, "int32")
    assert from_gymnasium_space(gs.MultiBinary(3)).dtype == "int8"
    md = from_gymnasium_space(gs.MultiDiscrete([3, 4], dtype=np.int16, start=[1, -1]))
    assert (md.nvec, md.start, md.dtype) == ([3, 4], [1, -1], "int16")


def test_rlmesh_dtypes_gymnasium_cannot_spell_natively_still_round_trip() -> None:
    mb = MultiBinary(3)  # uint8: Gymnasium's class is always int8
    g = to_gymnasium_space(mb)
    assert (
        g.dtype == np.uint8
        and g.sample().dtype == np.uint8
        and g.contains(np.array([0, 1, 1], np.uint8))
    )
    assert from_gymnasium_space(g) == mb
    full = Discrete(256, dtype="uint8")  # n itself does not fit uint8
    g = to_gymnasium_space(full)
    assert g.dtype == np.uint8 and from_gymnasium_space(g) == full


def test_counts_beyond_int64_have_no_gymnasium_form() -> None:
    with pytest.raises(ValueError, match="cannot be represented as a Gymnasium space"):
        to_gymnasium_space(Discrete(2**64, start=-(2**63)))


def test_text_default_charset_means_unrestricted() -> None:  # GYM-5
    assert from_gymnasium_space(gs.Text(5)).charset == ""
    assert from_gymnasium_space(gs.Text(5, charset="cab")).charset == "abc"
    # unrestricted goes out over string.printable (GYM-7, CNF2-A2); only the default comes back as ""
    assert to_gymnasium_space(Text(4, min_length=0)) == gs.Text(
        4, min_length=0, charset=string.printable
    )
    assert to_gymnasium_space(from_gymnasium_space(gs.Text(5))) == gs.Text(
        5, charset=string.printable
    )
    assert from_gymnasium_space(gs.Text(4, min_length=0)).min_length == 0


def test_dict_key_order_is_declared_order_not_sorted() -> None:  # OPP-12
    ours = Dict({"zeta": Discrete(2), "alpha": Discrete(3)})
    g = to_gymnasium_space(ours)
    assert list(g.spaces) == ["zeta", "alpha"]
    assert list(from_gymnasium_space(g)) == ["zeta", "alpha"]


def test_gym_dict_keys_are_stringified() -> None:  # GYM-6
    g = gs.Dict(OrderedDict([(1, gs.Discrete(2))]))
    assert list(from_gymnasium_space(g)) == ["1"]


@pytest.mark.parametrize(
    "gym_space",
    [gs.Sequence(gs.Discrete(2)), gs.Graph(gs.Box(0, 1, (2,)), None), gs.OneOf([gs.Discrete(2)])],
    ids=lambda s: type(s).__name__,
)
def test_unsupported_gymnasium_spaces_raise_TypeError(gym_space) -> None:  # GYM-6
    with pytest.raises(
        TypeError, match=f"^Unsupported space type: {type(gym_space).__name__} at \\['x'\\] "
    ):
        from_gymnasium_space(gs.Dict({"x": gym_space}))


def test_subclasses_of_gymnasium_spaces_convert() -> None:  # GYM-1
    class MyBox(gs.Box):
        pass

    assert from_gymnasium_space(MyBox(0.0, 1.0, (2,))) == Box(0.0, 1.0, (2,))


def test_conversion_passes_rlmesh_and_gymnasium_spaces_through() -> None:
    d = Discrete(3)
    assert from_gymnasium_space(d) == d and from_gymnasium_space(d.spec) == d
    g = gs.Discrete(3)
    assert to_gymnasium_space(g) is g
    with pytest.raises(TypeError, match="expects an rlmesh space"):
        to_gymnasium_space(3)


def test_missing_gymnasium_raises_DependencyMissing_naming_the_extra(monkeypatch) -> None:  # GYM-1
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.split(".")[0] in ("gymnasium", "gym"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(
        ImportError, match=r'pip install gymnasium \(the "gymnasium" extra of rlmesh-py\)'
    ) as info:
        to_gymnasium_space(Discrete(2))
    assert isinstance(info.value, DependencyMissing)


@settings(max_examples=150, deadline=None)
@given(space_specs())
def test_any_spec_survives_rlmesh_to_gymnasium_and_back(spec: SpaceSpec) -> None:  # GYM-1..7
    try:
        g = to_gymnasium_space(spec)
    except ValueError as exc:  # counts beyond int64 (e.g. Discrete(2**64)) have no Gymnasium form
        assert "cannot be represented as a Gymnasium space" in str(exc)
        return
    back = from_gymnasium_space(g).spec
    if gym_exact(spec):
        assert back == spec
    assert_gym_identical(to_gymnasium_space(back), g)
