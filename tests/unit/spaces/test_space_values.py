"""Encoder coercion, structural conformance and range checks (VAL-10..15, CNF-1..5)."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

from rlmesh import Tensor
from rlmesh.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Text, Tuple
from rlmesh.spaces._values import check_value, compile_encoder, compile_range_check


def enc(space, value, lanes=None):
    return compile_encoder(space.spec, lanes=lanes)(value)


class TestArrayLeaves:
    def test_right_array_is_returned_without_a_copy(self) -> None:
        x = np.zeros((2, 3), np.float32)
        assert enc(Box(-1.0, 1.0, (2, 3)), x) is x
        y = np.zeros(3, np.uint8)
        assert enc(MultiBinary(3), y) is y

    def test_lists_and_other_dtypes_are_coerced_to_the_spec_dtype(self) -> None:  # VAL-11
        out = enc(Box(-1.0, 1.0, (3,)), [0, 0.5, True])
        assert (
            out.dtype == np.float32 and out.flags.c_contiguous and out.tolist() == [0.0, 0.5, 1.0]
        )
        assert enc(Box(-1.0, 1.0, (2,), "float64"), np.zeros(2, np.float16)).dtype == np.float64

    def test_non_contiguous_and_big_endian_arrays_are_normalized(self) -> None:
        strided = np.zeros((3, 4), np.float32)[:, ::2]
        out = enc(Box(-1.0, 1.0, (3, 2)), strided)
        assert out.flags.c_contiguous and out.shape == (3, 2)
        big = np.arange(3, dtype=">i4")
        out = enc(Box(0, 10, (3,), "int32"), big)
        assert out.dtype == np.dtype("<i4") and out.tolist() == [0, 1, 2]

    def test_numpy_scalars_and_array_likes_are_accepted(self) -> None:  # VAL-10
        assert enc(Box(-1.0, 1.0, ()), np.float64(0.25)).shape == ()

        class ArrayLike:
            def __array__(self, dtype=None, copy=None):
                return np.ones(2)

        assert enc(Box(-1.0, 1.0, (2,)), ArrayLike()).tolist() == [1.0, 1.0]

    def test_device_tensors_are_moved_to_the_host(self) -> None:  # VAL-10
        class CudaLike:
            device = "cuda:0"

            def __array__(self, dtype=None, copy=None):
                raise TypeError("can't convert a cuda tensor to numpy")

            def cpu(self):
                return np.ones(2)

        assert enc(Box(-1.0, 1.0, (2,)), CudaLike()).tolist() == [1.0, 1.0]

    def test_tensor_is_used_as_is_when_its_dtype_matches(self) -> None:  # VAL-10
        t = Tensor(np.arange(3, dtype=np.float32).tobytes(), [3], "float32")
        out = enc(Box("-inf", "inf", (3,)), t)
        assert out.tolist() == [0.0, 1.0, 2.0] and np.shares_memory(out, np.asarray(t))

    def test_tensor_dtype_mismatch_is_never_coerced(self) -> None:  # VAL-10
        t = Tensor(bytes(24), [3], "float64")
        with pytest.raises(
            ValueError,
            match=r"^\$: Tensor dtype float64 does not match the Box dtype float32.*astype\('float32'\)",
        ):
            enc(Box(-1.0, 1.0, (3,)), t)

    def test_float_to_int_needs_integral_finite_values(self) -> None:  # VAL-11
        assert enc(Box(0, 9, (2,), "int32"), [1.0, 2.0]).tolist() == [1, 2]
        with pytest.raises(
            ValueError, match="float value supplied for integer dtype int32 is not integral"
        ):
            enc(Box(0, 9, (2,), "int32"), [1.5, 2.0])
        with pytest.raises(ValueError, match="not integral"):
            enc(Box(0, 9, (2,), "int32"), [np.inf, 2.0])

    def test_integers_out_of_dtype_range_never_wrap(self) -> None:  # VAL-11
        with pytest.raises(
            ValueError,
            match="value supplied for integer dtype uint8 is not representable in its range",
        ):
            enc(Box(0, 255, (2,), "uint8"), [300, 1])
        with pytest.raises(ValueError, match="uint8 is not representable"):
            enc(Box(0, 255, (2,), "uint8"), [-1, 1])
        with pytest.raises(ValueError, match="int64 is not representable"):
            enc(Box("-inf", "inf", (1,), "int64"), np.array([2**64 - 1], np.uint64))
        assert enc(Box(0, 2**64 - 1, (1,), "uint64"), [2**64 - 1]).tolist() == [2**64 - 1]

    def test_bool_targets_take_only_zero_and_one(self) -> None:
        assert enc(Box(0, 1, (2,), "bool"), [0, 1]).tolist() == [False, True]
        with pytest.raises(ValueError, match="dtype bool"):
            enc(Box(0, 1, (2,), "bool"), [0, 2])

    def test_shape_mismatch_names_expected_and_actual(self) -> None:  # CNF-2
        with pytest.raises(ValueError, match=r"^\$: Box value has shape \(4,\), expected \(3,\)$"):
            enc(Box(-1.0, 1.0, (3,)), np.zeros(4))
        with pytest.raises(ValueError, match=r"shape \(1,\), expected \(\)"):
            enc(Box(-1.0, 1.0, ()), [0.5])

    def test_multi_leaves_accept_any_array_with_the_right_count(self) -> None:  # CNF-2
        assert enc(MultiDiscrete([[2, 2], [2, 2]]), [0, 1, 1, 0]).shape == (2, 2)
        with pytest.raises(
            ValueError, match=r"MultiBinary value has shape \(2,\), expected \(3,\)"
        ):
            enc(MultiBinary(3), [0, 1])

    def test_nan_is_a_structural_error_naming_the_element(self) -> None:  # CNF-2, CNF-5
        with pytest.raises(ValueError, match=r"^\$: Box value contains NaN at element 2$"):
            enc(Box("-inf", "inf", (3,)), [0.0, 1.0, np.nan])
        with pytest.raises(ValueError, match="NaN"):
            enc(MultiDiscrete([3, 3]), [0.0, np.nan])

    def test_multidiscrete_out_of_range_is_structural(self) -> None:  # CNF-2, CNF-5
        with pytest.raises(
            ValueError,
            match=r"^\$: MultiDiscrete value at element 1: value 5 not in range \[0, 4\)$",
        ):
            enc(MultiDiscrete([3, 4]), [0, 5])
        with pytest.raises(ValueError, match=r"value 0 not in range \[1, 3\)"):
            enc(MultiDiscrete([2, 2], start=[1, 1]), [1, 0])

    def test_multibinary_values_must_be_zero_or_one(self) -> None:  # OPP-25
        with pytest.raises(
            ValueError, match=r"MultiBinary value at element 1 is 2; expected 0 or 1"
        ):
            enc(MultiBinary(3), [0, 2, 1])
        with pytest.raises(ValueError, match="is -1; expected 0 or 1"):
            enc(MultiBinary(2, dtype="int8"), [-1, 1])

    def test_wrong_kinds_and_strings_are_TypeErrors(self) -> None:  # CNF-2
        with pytest.raises(TypeError, match=r"^\$: Box value must be array-like, got str"):
            enc(Box(-1.0, 1.0, (1,)), "a")
        with pytest.raises(TypeError, match="must be numeric"):
            enc(Box(-1.0, 1.0, (1,)), np.array(["a"]))
        with pytest.raises(TypeError, match="rectangular"):
            enc(Box(-1.0, 1.0, (2,)), [[1.0], [1.0, 2.0]])

    def test_complex_values_are_rejected_with_a_remedy(self) -> None:  # DT-4
        with pytest.raises(ValueError, match="split them into real/imag float parts"):
            enc(Box(-1.0, 1.0, (1,)), np.array([1j]))


class TestDiscreteAndText:
    def test_discrete_accepts_ints_bools_and_integral_floats(self) -> None:  # VAL-13
        d = Discrete(4)
        assert [enc(d, v) for v in (2, True, 2.0, np.int8(3), np.array(1), np.float32(1.0))] == [
            2,
            1,
            2,
            3,
            1,
            1,
        ]
        assert type(enc(d, np.int64(3))) is int

    def test_discrete_rejects_fractional_floats_with_the_reference_message(self) -> None:  # VAL-13
        with pytest.raises(ValueError, match=r"^\$: Discrete value must be an integer, got 1\.5$"):
            enc(Discrete(4), 1.5)
        with pytest.raises(TypeError, match="Discrete value must be an integer, got str"):
            enc(Discrete(4), "1")
        with pytest.raises(TypeError, match=r"array of shape \(1,\)"):
            enc(Discrete(4), np.array([1]))

    def test_discrete_range_is_structural(self) -> None:  # CNF-2, CNF-5
        with pytest.raises(ValueError, match=r"^\$: Discrete value 5 not in range \[0, 4\)$"):
            enc(Discrete(4), 5)
        with pytest.raises(ValueError, match=r"not in range \[-2, 1\)"):
            enc(Discrete(3, start=-2), 1)

    def test_text_takes_str_only(self) -> None:  # VAL-13
        assert enc(Text(3), np.str_("ab")) == "ab" and type(enc(Text(3), np.str_("ab"))) is str
        with pytest.raises(TypeError, match=r"^\$: Text value must be a str, got int"):
            enc(Text(3), 3)


class TestComposites:
    def test_dict_output_has_declared_keys_in_declared_order(self) -> None:  # VAL-12
        space = Dict({"b": Discrete(2), "a": Discrete(2)})
        out = enc(space, {"a": 1, "zz": 9, "b": 0})
        assert list(out) == ["b", "a"] and out == {"b": 0, "a": 1}

    def test_missing_dict_key_is_a_KeyError_with_path(self) -> None:  # VAL-12
        space = Dict({"outer": Dict({"k": Discrete(2)})})
        with pytest.raises(KeyError, match=r"\$\.outer: missing dict key 'k'") as info:
            enc(space, {"outer": {}})
        assert str(info.value) == "$.outer: missing dict key 'k'"

    def test_child_errors_carry_the_json_path(self) -> None:  # CNF-5
        space = Dict({"arm": Tuple([Discrete(2), Box(-1.0, 1.0, (7,))])})
        with pytest.raises(
            ValueError, match=r"^\$\.arm\[1\]: Box value has shape \(6,\), expected \(7,\)$"
        ):
            enc(space, {"arm": (1, np.zeros(6))})

    def test_namedtuples_and_mappings_are_unwrapped(self) -> None:  # VAL-13
        Point = namedtuple("Point", "x y")
        space = Dict({"x": Discrete(3), "y": Discrete(3)})
        assert enc(space, Point(1, 2)) == {"x": 1, "y": 2}
        assert enc(Tuple([Discrete(3), Discrete(3)]), Point(1, 2)) == (1, 2)

    def test_tuple_arity_and_type_errors(self) -> None:  # VAL-12
        t = Tuple([Discrete(2), Discrete(2)])
        assert enc(t, [1, 0]) == (1, 0)
        with pytest.raises(ValueError, match=r"^\$: Tuple value has 3 elements, expected 2$"):
            enc(t, (1, 0, 1))
        with pytest.raises(TypeError, match="Tuple value must be a tuple or list"):
            enc(t, {"a": 1})
        with pytest.raises(TypeError, match="Dict value must be a mapping"):
            enc(Dict({"a": Discrete(2)}), [1])


class TestLanes:
    def test_array_leaf_accepts_one_batched_array_or_a_list_of_lanes(self) -> None:  # VAL-15
        box = Box(-1.0, 1.0, (2,))
        x = np.zeros((3, 2), np.float32)
        assert enc(box, x, lanes=3) is x
        assert enc(box, [[0, 0], [1, 1], [0.5, 0.5]], lanes=3).shape == (3, 2)
        assert enc(box, [np.zeros(2), np.ones(2), np.zeros(2)], lanes=3).dtype == np.float32
        t = Tensor(np.ones(2, np.float32).tobytes(), [2], "float32")
        assert enc(box, [t, t, t], lanes=3).tolist() == [[1.0, 1.0]] * 3
        fused = Tensor(np.ones((3, 2), np.float32).tobytes(), [3, 2], "float32")
        assert enc(box, fused, lanes=3).shape == (3, 2)

    def test_wrong_lane_count_says_expected_and_got(self) -> None:  # VAL-15
        with pytest.raises(ValueError, match=r"^\$: expected 3 batched values, got 2$"):
            enc(Box(-1.0, 1.0, (2,)), np.zeros((2, 2)), lanes=3)
        with pytest.raises(ValueError, match="expected 3 batched values, got 2"):
            enc(Discrete(2), [0, 1], lanes=3)
        with pytest.raises(ValueError, match="expected 2 batched values, got 3"):
            enc(Text(2), ["a", "b", "c"], lanes=2)
        with pytest.raises(ValueError, match="expected 2 batched values, got 1"):
            enc(Dict({"a": Discrete(2)}), [{"a": 1}], lanes=2)

    def test_batched_discrete_is_an_int_array_of_the_spec_dtype(self) -> None:  # VAL-15
        out = enc(Discrete(4, dtype="int32"), [1, 2.0, True], lanes=3)
        assert out.dtype == np.int32 and out.tolist() == [1, 2, 1]
        assert enc(Discrete(4), np.array([3, 0]), lanes=2).tolist() == [3, 0]
        with pytest.raises(ValueError, match=r"Discrete value 4 not in range \[0, 4\) \(lane 1\)"):
            enc(Discrete(4), [0, 4], lanes=2)
        with pytest.raises(ValueError, match=r"Discrete value 7 not in range \[0, 4\) \(lane 0\)"):
            enc(Discrete(4), np.array([7, 1]), lanes=2)

    def test_batched_text_is_a_list_of_str(self) -> None:
        assert enc(Text(3), ("a", "b"), lanes=2) == ["a", "b"]
        with pytest.raises(TypeError, match="sequence of 2 str"):
            enc(Text(3), "ab", lanes=2)

    def test_dict_batch_from_a_list_of_dicts_or_a_dict_of_batches(self) -> None:  # VAL-15
        space = Dict({"p": Box(-1.0, 1.0, (2,)), "d": Discrete(3), "t": Text(2)})
        per_lane = [{"p": [0, 0], "d": 1, "t": "a"}, {"p": [1, 1], "d": 2, "t": "b", "x": 0}]
        fused = {"p": np.zeros((2, 2)), "d": [1, 2], "t": ["a", "b"]}
        for value in (per_lane, fused):
            out = enc(space, value, lanes=2)
            assert (
                list(out) == ["p", "d", "t"] and out["p"].shape == (2, 2) and out["t"] == ["a", "b"]
            )
        with pytest.raises(KeyError, match=r"missing dict key 'd' \(lane 1\)"):
            enc(space, [{"p": [0, 0], "d": 1, "t": "a"}, {"p": [0, 0], "t": "a"}], lanes=2)

    def test_tuple_batches_tuple_of_batches_or_list_of_lanes(self) -> None:
        t = Tuple([Discrete(3), Text(2)])
        assert enc(t, ([1, 2], ["a", "b"]), lanes=2)[1] == ["a", "b"]  # tuple: batched children
        out = enc(t, [(1, "a"), (2, "b")], lanes=2)  # list: per-lane tuples
        assert out[0].tolist() == [1, 2] and out[1] == ["a", "b"]
        out = enc(t, [(1, "a"), (2, "b"), (0, "c")], lanes=3)
        assert out[1] == ["a", "b", "c"]

    def test_lane_errors_name_the_lane(self) -> None:
        with pytest.raises(ValueError, match=r"Box value contains NaN at element 1 \(lane 1\)"):
            enc(Box("-inf", "inf", (2,)), [[0, 0], [0, np.nan]], lanes=2)
        with pytest.raises(
            ValueError, match=r"MultiBinary value at element 0 is 3; expected 0 or 1 \(lane 1\)"
        ):
            enc(MultiBinary(2), [[0, 0], [3, 0]], lanes=2)

    def test_lanes_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match="lanes must be a positive int"):
            compile_encoder(Discrete(2).spec, lanes=0)


class TestRangeChecks:
    @pytest.mark.parametrize(
        "space",
        [
            Box(0, 255, (2,), "uint8"),
            Box("-inf", "inf", (2,)),
            Box(-128, 127, (2,), "int8"),
            Box(0, 1, (2,), "bool"),
            Box(-1e6, 1e6, (2,), "float16"),
            Discrete(3),
            MultiBinary(2),
            MultiDiscrete([2, 2]),
            Dict({"a": Discrete(2), "b": Tuple([MultiBinary(2)])}),
        ],
        ids=repr,
    )
    def test_no_check_when_no_range_deviation_is_possible(self, space) -> None:
        assert compile_range_check(space.spec) is None

    def test_box_deviation_names_element_and_side(self) -> None:  # CNF-3, CNF-5
        check = compile_range_check(Box(0.0, 1.0, (5,)).spec)
        assert check(np.array([0, 0, 0, 2, -1], np.float32)) == [
            ("$", "Box value at element 3 out of bounds: above high bound")
        ]
        assert check(np.array([0, -1, 0, 0, 0], np.float32)) == [
            ("$", "Box value at element 1 out of bounds: below low bound")
        ]
        assert check(np.zeros(5, np.float32)) == []

    def test_elementwise_and_int_bounds(self) -> None:
        check = compile_range_check(Box(np.array([0, 5]), np.array([1, 6]), dtype="int16").spec)
        assert check(np.array([1, 4], np.int16)) == [
            ("$", "Box value at element 1 out of bounds: below low bound")
        ]
        check = compile_range_check(Box(0, 2**64 - 2, (1,), "uint64").spec)
        assert check(np.array([2**64 - 1], np.uint64))[0][1].endswith("above high bound")

    def test_lane_range_deviation_names_the_lane(self) -> None:
        check = compile_range_check(Box(0.0, 1.0, (2,)).spec, lanes=2)
        assert check(np.array([[0, 0], [0, 3]], np.float32)) == [
            ("$", "Box value at element 1 out of bounds: above high bound (lane 1)")
        ]

    def test_text_length_and_charset_deviations(self) -> None:  # CNF-3
        check = compile_range_check(Dict({"t": Text(3, min_length=2, charset="ab")}).spec)
        assert check({"t": "a"}) == [("$.t", "Text value length 1 outside [2, 3]")]
        assert check({"t": "abz"}) == [
            ("$.t", "Text value character 'z' at index 2 not in charset")
        ]
        lanes = compile_range_check(Text(3).spec, lanes=2)
        assert lanes(["abc", ""]) == [("$", "Text value length 0 outside [1, 3] (lane 1)")]

    def test_range_deviations_pass_the_encoder(self) -> None:  # VAL-14
        out = enc(Box(0.0, 1.0, (2,)), [5.0, 5.0])
        assert out.tolist() == [5.0, 5.0]

    def test_check_value_raises_structural_then_range(self) -> None:  # CNF-1
        spec = Dict({"a": Box(0.0, 1.0, (2,)), "b": Discrete(2)}).spec
        with pytest.raises(ValueError, match=r"^\$\.b: Discrete value 2"):
            check_value(spec, {"a": [5.0, 5.0], "b": 2})
        with pytest.raises(ValueError, match=r"^\$\.a: Box value at element 0 out of bounds"):
            check_value(spec, {"a": [5.0, 5.0], "b": 1})
        check_value(spec, {"a": [0.5, 0.5], "b": 1})
