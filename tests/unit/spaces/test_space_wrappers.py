"""The space wrappers' constructors, attributes and errors (SPC-10..SPC-73, SMP-2..4)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rlmesh import Tensor
from rlmesh.spaces import (
    Box,
    Dict,
    Discrete,
    MultiBinary,
    MultiDiscrete,
    Space,
    SpaceSpec,
    Text,
    Tuple,
    __all__ as spaces_all,
    space_from_spec,
)


def test_spaces_module_exports_exactly_the_twelve_names() -> None:  # api-surface A.5
    assert sorted(spaces_all) == sorted(
        [
            "Box",
            "Dict",
            "Discrete",
            "MultiBinary",
            "MultiDiscrete",
            "Space",
            "SpaceSpec",
            "Text",
            "Tuple",
            "from_gymnasium_space",
            "space_from_spec",
            "to_gymnasium_space",
        ]
    )


class TestBox:
    def test_uniform_float_box_reports_float_bounds(self) -> None:  # SPC-12
        b = Box(-1, 1, (3,))
        assert (b.bounds_kind, b.low, b.high) == ("uniform", -1.0, 1.0)
        assert (b.kind, b.shape, b.dtype) == ("box", [3], "float32")
        assert b.spec.shape == [3]

    def test_unbounded_box_reports_none_bounds(self) -> None:
        b = Box("-inf", "inf", (2,))
        assert (b.bounds_kind, b.low, b.high) == ("unbounded", None, None)

    def test_int_bounds_stay_exact_for_int64_and_uint64(self) -> None:  # DELTA-27
        assert Box(0, 2**63 - 1, (2,), "int64").high == [9223372036854775807]
        assert Box(0, 2**64 - 1, (2,), "uint64").high == [18446744073709551615]
        assert Box(0, 2**63, (1,), "uint64").high == [9223372036854775808]
        assert Box(0, 255, (2,), "uint8").bounds_kind == "typed_uniform"

    def test_float_bounds_on_an_int_dtype_truncate_toward_zero(self) -> None:  # SPC-13
        b = Box(-1.7, 2.9, (2,), "int32")
        assert (b.low, b.high) == ([-1], [2])

    def test_out_of_range_int_bound_raises(self) -> None:  # DELTA-27
        with pytest.raises(ValueError, match="value 300 is out of range for Uint8"):
            Box(0, 300, (2,), "uint8")
        with pytest.raises(ValueError, match="value -1 is out of range for Uint8"):
            Box(-1.0, 3, (2,), "uint8")

    def test_missing_shape_or_high_raise_TypeError(self) -> None:  # SPC-10
        with pytest.raises(TypeError, match="shape is required"):
            Box(-1.0, 1.0)
        with pytest.raises(TypeError, match="high is required"):
            Box(-1.0, shape=(2,))

    def test_nan_bound_and_low_above_high_raise(self) -> None:  # SPC-13
        with pytest.raises(ValueError, match="NaN"):
            Box(float("nan"), 1.0, (2,))
        with pytest.raises(ValueError, match="low must be <= high"):
            Box(2.0, 1.0, (2,))

    def test_one_sided_infinite_int_bound_raises_but_both_infinite_is_unbounded(self) -> None:
        with pytest.raises(ValueError, match="one-sided infinite"):
            Box(0, "inf", (2,), "int64")
        assert Box("-inf", "inf", (2,), "int64").bounds_kind == "unbounded"

    def test_rank0_box_samples_and_contains_scalars(self) -> None:  # OPP-10
        b = Box(-1.0, 1.0, ())
        assert b.shape == [] and b.sample().shape == []
        assert b.contains(0.5) and b.contains(np.float32(0.5)) and not b.contains(1.5)
        assert not b.contains([0.5])

    def test_array_bounds_give_an_elementwise_box_and_fix_the_shape(self) -> None:
        b = Box(np.array([-1.0, 0.0]), np.array([1.0, 2.0]))
        assert (b.shape, b.bounds_kind, b.low, b.high) == (
            [2],
            "elementwise",
            [-1.0, 0.0],
            [1.0, 2.0],
        )

    def test_equal_elementwise_bounds_are_the_same_space_as_uniform(self) -> None:
        assert Box(np.zeros(3), np.ones(3)) == Box(0.0, 1.0, (3,))

    def test_box_adopts_a_box_spec_and_rejects_another_kind(self) -> None:  # SPC-10
        spec = Box(0.0, 1.0, (2,)).spec
        assert Box(spec).spec is spec
        with pytest.raises(ValueError, match="cannot adopt a 'discrete'"):
            Box(Discrete(2).spec)

    def test_dtype_names_are_normalized(self) -> None:  # DT-3
        assert Box(0, 1, (1,), np.float64).dtype == "float64"
        assert Box(0, 1, (1,), "Float16").dtype == "float16"
        with pytest.raises(ValueError, match="bfloat16"):
            Box(0, 1, (1,), "bfloat16")

    def test_float32_box_contains_its_own_rounded_bounds(self) -> None:
        b = Box(-1.1, 1.1, (2,))
        assert b.contains(np.array([-1.1, 1.1], np.float32))
        assert not b.contains(np.array([-1.2, 0.0], np.float32))


class TestSampling:
    def test_box_sampling_follows_the_bounds_form(self) -> None:  # SMP-2
        space = space_from_spec(
            Box(np.array([0.0, -np.inf, -np.inf]), np.array([np.inf, 0.0, np.inf])).spec,
            bridge="numpy",
        )
        space.seed(0)
        draws = np.stack([space.sample() for _ in range(300)])
        assert (draws[:, 0] >= 0).all() and (draws[:, 1] <= 0).all()
        assert (draws[:, 2] < 0).any() and (draws[:, 2] > 0).any()

    def test_int_box_samples_cover_inclusive_bounds(self) -> None:  # SMP-2
        space = space_from_spec(Box(2, 4, (50,), "int8").spec, bridge="numpy")
        space.seed(1)
        values = set(np.concatenate([space.sample() for _ in range(10)]).tolist())
        assert values == {2, 3, 4}

    def test_discrete_samples_lie_in_start_range(self) -> None:  # SMP-3
        d = Discrete(3, start=-1)
        d.seed(0)
        assert {d.sample() for _ in range(100)} == {-1, 0, 1}

    def test_full_int64_discrete_samples_without_overflow(self) -> None:
        d = Discrete(2**64, start=-(2**63))
        d.seed(0)
        assert all(d.contains(d.sample()) for _ in range(20))

    def test_text_sample_lengths_and_characters(self) -> None:  # SMP-3
        t = Text(4, min_length=0, charset="xy")
        t.seed(0)
        samples = [t.sample() for _ in range(200)]
        assert {len(s) for s in samples} == {0, 1, 2, 3, 4}
        assert set("".join(samples)) == {"x", "y"}

    def test_seeding_a_dict_does_not_seed_its_children(self) -> None:  # SMP-4
        d = Dict({"a": Discrete(1000)})
        d["a"].seed(5)
        first = d["a"].sample()
        d.seed(1)
        d.sample()
        d["a"].seed(5)
        assert d["a"].sample() == first

    def test_composite_samples_draw_children_in_declared_order(self) -> None:  # SMP-3
        a = Dict({"x": Discrete(1000), "y": Discrete(1000)})
        b = Tuple([Discrete(1000), Discrete(1000)])
        a.seed(9)
        b.seed(9)
        s = a.sample()
        assert (s["x"], s["y"]) == b.sample()

    def test_seed_rejects_negative_and_non_int(self) -> None:
        with pytest.raises(ValueError, match="non-negative"):
            Discrete(2).seed(-1)
        with pytest.raises(TypeError, match="non-negative int"):
            Discrete(2).seed("3")  # type: ignore[arg-type]


class TestDiscreteAndMulti:
    def test_discrete_attributes_and_validation(self) -> None:  # SPC-20
        d = Discrete(4, start=-1, dtype="int32")
        assert (d.n, d.start, d.dtype, d.shape) == (4, -1, "int32", [])
        with pytest.raises(ValueError, match="positive"):
            Discrete(0)
        with pytest.raises(ValueError, match="does not fit dtype uint8"):
            Discrete(257, dtype="uint8")
        with pytest.raises(ValueError, match="integer dtype"):
            Discrete(3, dtype="float32")
        with pytest.raises(TypeError, match=r"Discrete n must be an integer, got 2\.5"):
            Discrete(2.5)

    def test_multibinary_size_and_dims(self) -> None:  # SPC-30
        assert (MultiBinary(4).size, MultiBinary(4).dims, MultiBinary(4).shape) == (4, None, [4])
        assert (MultiBinary([2, 3]).size, MultiBinary([2, 3]).dims) == (None, [2, 3])
        assert MultiBinary(2).dtype == "uint8" and MultiBinary(2, dtype="bool").dtype == "bool"
        with pytest.raises(ValueError, match="MultiBinary dtype"):
            MultiBinary(2, dtype="int32")

    def test_multibinary_rejects_values_other_than_0_and_1(self) -> None:  # OPP-25
        m = MultiBinary(3)
        assert m.contains([0, 1, 1]) and m.contains([True, False, True])
        assert not m.contains([0, 2, 1])
        assert not m.contains([0, 1])

    def test_multidiscrete_nvec_start_and_range(self) -> None:  # SPC-40/41
        md = MultiDiscrete([2, 3], start=[1, 0])
        assert (md.nvec, md.start, md.shape) == ([2, 3], [1, 0], [2])
        assert MultiDiscrete([2, 3]).start == [0, 0]
        assert md.contains([2, 2]) and not md.contains([0, 0]) and not md.contains([3, 0])
        with pytest.raises(ValueError, match="same length"):
            MultiDiscrete([[2, 3], [4]])
        with pytest.raises(ValueError, match="positive"):
            MultiDiscrete([2, 0])

    def test_text_attributes_and_min_length_zero(self) -> None:  # SPC-50, DESIGN
        t = Text(8, min_length=0)
        assert (t.min_length, t.max_length, t.charset, t.shape, t.dtype) == (0, 8, "", [], "uint8")
        assert t.contains("") and not t.contains("x" * 9) and not t.contains(3)
        assert Text(3, charset={"b", "a"}).charset == "ab"
        assert Text(4, charset="αβ").contains("βαβ")
        with pytest.raises(ValueError, match="min_length"):
            Text(2, min_length=3)
        with pytest.raises(ValueError, match="max_length must be positive"):
            Text(0, min_length=0)


class TestComposites:
    def test_dict_mapping_access_in_declared_order(self) -> None:  # SPC-60, OPP-12
        d = Dict({"z": Discrete(2), "a": Box(0.0, 1.0, (1,))})
        assert list(d) == ["z", "a"] and list(d.keys()) == ["z", "a"]
        assert "z" in d and "q" not in d and len(d) == 2
        assert d["z"] == Discrete(2)
        assert [k for k, _ in d.items()] == ["z", "a"] and next(iter(d.values())) == Discrete(2)
        with pytest.raises(TypeError):
            d.spaces["z"] = Discrete(3)  # type: ignore[index]

    def test_dict_keeps_the_callers_child_wrappers(self) -> None:
        child = Discrete(3)
        assert Dict({"a": child})["a"] is child

    def test_dict_accepts_specs_and_validates_keys(self) -> None:  # SPC-60
        assert Dict({"a": Discrete(2).spec})["a"] == Discrete(2)
        with pytest.raises(ValueError, match="non-empty strings"):
            Dict({"": Discrete(2)})
        with pytest.raises(ValueError, match="non-empty strings"):
            Dict({1: Discrete(2)})  # type: ignore[dict-item]
        with pytest.raises(ValueError, match="cannot adopt"):
            Dict(Discrete(2).spec)
        with pytest.raises(TypeError, match="from_gymnasium_space"):
            Dict({"a": object()})

    def test_dict_membership_of_values_uses_contains(self) -> None:
        d = Dict({"a": Discrete(2)})
        assert d.contains({"a": 1}) and d.contains({"a": 1, "extra": 5})
        assert not d.contains({"b": 1}) and not d.contains([1])

    def test_tuple_children_and_arity(self) -> None:  # SPC-63
        t = Tuple([Discrete(2), Text(3)])
        assert len(t) == 2 and t[0] == Discrete(2) and isinstance(t.spaces, tuple)
        assert list(t) == [Discrete(2), Text(3)]
        assert t.contains((1, "ab")) and t.contains([1, "ab"])
        assert not t.contains((1,)) and not t.contains((1, "ab", 3)) and not t.contains({"a": 1})

    def test_children_share_the_parent_bridge(self) -> None:  # SPC-72
        d = space_from_spec(
            Dict({"a": Box(0.0, 1.0, (2,)), "t": Tuple([Box(0.0, 1.0, (1,))])}).spec, bridge="numpy"
        )
        assert isinstance(d["a"].sample(), np.ndarray)
        assert isinstance(d["t"][0].sample(), np.ndarray)
        assert isinstance(Dict({"a": Box(0.0, 1.0, (2,))})["a"].sample(), Tensor)


class TestSpaceBase:
    def test_unknown_public_attribute_suggests_gymnasium_conversion(self) -> None:  # SPC-71
        with pytest.raises(AttributeError, match=r"rlmesh\.spaces\.to_gymnasium_space"):
            Box(0.0, 1.0, (1,)).is_bounded  # noqa: B018

    def test_unknown_private_attribute_is_a_plain_AttributeError(self) -> None:  # SPC-71
        with pytest.raises(AttributeError) as info:
            Discrete(2)._nope  # noqa: B018
        assert str(info.value) == "_nope"

    def test_no_public_details_or_to_dict(self) -> None:  # SPC-2
        for obj in (Discrete(2), Discrete(2).spec):
            assert not hasattr(obj, "details") and not hasattr(obj, "to_dict")

    def test_equality_compares_specs_and_hash_matches(self) -> None:  # SPC-70
        assert Discrete(3) == Discrete(3) and Discrete(3) != Discrete(3, start=1)
        assert Discrete(3) != Discrete(3, dtype="int32")
        assert hash(Discrete(3)) == hash(Discrete(3).spec)
        assert Box(0.0, 1.0, (2,)) != "Box"
        assert space_from_spec(Discrete(3).spec, bridge="numpy") == Discrete(3)

    def test_space_from_spec_accepts_dict_form_and_rejects_unknown_kinds(self) -> None:  # SPC-72
        assert space_from_spec(Text(3).spec._to_dict()) == Text(3)
        with pytest.raises(ValueError, match="unsupported RLMesh space kind: 'graph'"):
            space_from_spec({"kind": "graph", "shape": [], "dtype": "float32", "details": {}})
        with pytest.raises(TypeError):
            space_from_spec(3)  # type: ignore[arg-type]

    def test_spec_to_space_and_spec_to_gym_space(self) -> None:  # SPC-2
        spec = Discrete(3).spec
        assert isinstance(spec.to_space(), Discrete)
        assert spec.to_gym_space().n == 3

    def test_wrappers_are_spaces_and_specs_are_immutable(self) -> None:
        assert all(isinstance(s, Space) for s in (Box(0, 1, (1,)), Discrete(2), Text(2)))
        with pytest.raises(AttributeError, match="immutable"):
            Discrete(2).spec._kind = "box"  # type: ignore[misc]

    def test_contains_is_false_for_any_encode_failure(self) -> None:  # SPC-73
        b = Box(0.0, 1.0, (2,))
        for bad in (None, "ab", {"a": 1}, [0.5], [[0.5, 0.5]], [0.5, float("nan")], object()):
            assert not b.contains(bad)

    def test_unpickled_space_without_rng_still_samples(self) -> None:
        fresh = pickle.loads(pickle.dumps(Discrete(3)))
        assert fresh.contains(fresh.sample())

    def test_spec_dtype_for_composites_is_float32(self) -> None:  # SPC-5
        assert Dict({}).dtype == "float32" and Tuple([]).spec.dtype == "float32"
        assert (
            SpaceSpec._from_dict(Dict({"a": Discrete(2)}).spec._to_dict())._details()["spaces"]["a"]
            == Discrete(2).spec
        )


ONE_OF_EACH_KIND = [
    Box(-1.0, 1.0, (2,)),
    Discrete(4, start=1),
    MultiBinary(3),
    MultiDiscrete([2, 3]),
    Text(5),
    Dict({"a": Discrete(2), "b": Box(0.0, 1.0, (1,))}),
    Tuple([Discrete(2), Text(3)]),
]


@pytest.mark.parametrize("space", ONE_OF_EACH_KIND, ids=lambda s: s.kind)
def test_spec_to_space_builds_the_wrapper_of_its_kind(space: Space) -> None:  # SPC-2, SPC-72
    """SpaceSpec.to_space and space_from_spec read the one kind -> wrapper table."""
    built = space.spec.to_space()
    assert type(built) is type(space) and built == space
    assert type(space_from_spec(space.spec)) is type(space)


@pytest.mark.parametrize("space", ONE_OF_EACH_KIND, ids=lambda s: s.kind)
def test_the_three_gymnasium_doors_agree(space: Space) -> None:  # GYM-7
    """spec.to_gym_space(), space.to_gymnasium_space() and to_gymnasium_space(space) are one conversion."""
    from conftest import require

    require("gymnasium")
    from rlmesh.spaces import to_gymnasium_space

    expected = to_gymnasium_space(space)
    assert space.spec.to_gym_space() == expected
    assert space.to_gymnasium_space() == expected
