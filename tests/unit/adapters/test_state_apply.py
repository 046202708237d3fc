"""State and text payloads: concat, slicing, conversion, ranges, padding, containers (ADP-97..106, DELTA-64..68)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlmesh.adapters as A

from ._helpers import TEXT, box, dict_space, resolve_std

ACT1 = A.Action(A.Actuator("x/a", 1))


def _one(obs_tags: Any, space: Any, inputs: Any) -> A.Adapter:
    return A.resolve(A.EnvTags(obs_tags, ACT1), space, box([1]), A.ModelSpec(inputs, ACT1))


def test_concat_slices_converts_and_keeps_declared_order(std_obs: dict[str, Any]) -> None:
    ad = resolve_std(
        {
            "s": A.Concat(
                A.GRIPPER_POS, A.State(A.EEF_POS, index=2), A.State(A.EEF_ROT, encoding="rot6d")
            )
        }
    )
    s = ad.transform_obs(std_obs)["s"]
    assert s.dtype == np.float32 and s.shape == (9,)
    assert np.allclose(s, [0.04, -0.04, 0.3, 0, 1, 0, 0, 0, 1], atol=1e-6)


def test_model_accept_set_prefers_no_conversion_ADP_78(std_obs: dict[str, Any]) -> None:
    ad = resolve_std({"s": A.State(A.EEF_ROT, encoding=["rot6d", "quat_xyzw"])})
    assert ad.transform_obs(std_obs)["s"].tolist() == [0.5, 0.5, 0.5, 0.5]
    assert '"s" <- concat(eef_quat)' in ad.describe()


def test_env_accept_set_first_recognized_entry_is_native_ADP_23() -> None:
    tags = {"q": A.StateTag(A.EEF_ROT, encoding=["mystery", "quat_wxyz", "quat_xyzw"])}
    ad = _one(tags, dict_space(q=box([4])), {"s": A.State(A.EEF_ROT, encoding="quat_xyzw")})
    assert ad.transform_obs({"q": [1, 0, 0, 0]})["s"].tolist() == [0, 0, 0, 1]


def test_optional_parts_zero_fill_with_widths_from_index_dim_or_encoding_ADP_33(
    std_obs: dict[str, Any],
) -> None:
    ad = resolve_std({"s": A.Concat(
        A.State("x/a", index=4, optional=True), A.State("x/b", dim=2, optional=True),
        A.State("x/c", encoding=["nope", "rot6d"], optional=True), A.State("x/d", dim=2, optional=True, fill=-1.0),
    )})  # fmt: skip
    assert ad.transform_obs(std_obs)["s"].tolist() == [0.0] * 9 + [-1.0, -1.0]
    notes = [a for a in ad.advisories() if "zero-filled" in a.message]
    assert (
        notes[0].severity == "caution"
        and "4 component(s) zero-filled for an absent env role" in notes[0].message
    )


def test_pad_to_right_pads_and_reshape_and_dtype_apply_last_ADP_104(
    std_obs: dict[str, Any],
) -> None:
    ad = resolve_std({"s": A.Concat(A.EEF_POS, pad_to=6, reshape=(2, -1), dtype="float64")})
    s = ad.transform_obs(std_obs)["s"]
    assert s.dtype == np.float64 and s.shape == (2, 3)
    assert np.allclose(s, [[0.1, -0.2, 0.3], [0, 0, 0]])


def test_list_container_widens_float32_values_ADP_104(std_obs: dict[str, Any]) -> None:
    s = resolve_std({"s": A.State(A.EEF_POS, container="list")}).transform_obs(std_obs)["s"]
    assert isinstance(s, list) and s[0] == 0.10000000149011612


def test_integer_state_dtypes_refuse_lossy_values_ADP_104(std_obs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="non-integral"):
        resolve_std({"s": A.State(A.EEF_POS, dtype="int32")}).transform_obs(std_obs)
    assert resolve_std({"s": A.State(A.GRIPPER_POS, dtype="int8")}).transform_obs(
        {**std_obs, "gripper": np.array([3.0, -2.0])}
    )["s"].tolist() == [3, -2]


def test_range_map_is_affine_and_never_clamps_ADP_33() -> None:
    ad = _one({"g": A.StateTag(A.GRIPPER_POS)}, dict_space(g=box([2], low=0.0, high=0.08)),
              {"s": A.State(A.GRIPPER_POS, range=(-1, 1))})  # fmt: skip
    assert np.allclose(ad.transform_obs({"g": [0.04, 0.16]})["s"], [0.0, 3.0], atol=1e-6)
    assert "(range (0.0, 0.08)->(-1.0, 1.0))" in ad.describe()


def test_a_model_range_against_an_unbounded_env_is_a_no_op_with_an_info_advisory_ADP_95() -> None:
    ad = _one(
        {"g": A.StateTag(A.GRIPPER_POS)},
        dict_space(g=box([1])),
        {"s": A.State(A.GRIPPER_POS, range=(-1, 1))},
    )
    assert ad.transform_obs({"g": [5.0]})["s"].tolist() == [5.0]
    (adv,) = ad.advisories()
    assert adv.severity == "info" and "no-op" in adv.message and "does not clamp" in adv.message


def test_tag_range_supplies_bounds_where_the_space_has_none_ADP_23() -> None:
    ad = _one(
        {"g": A.StateTag(A.GRIPPER_POS, range=(0, 2))},
        dict_space(g=box([1])),
        {"s": A.State(A.GRIPPER_POS, range=(0, 1))},
    )
    assert ad.transform_obs({"g": [1.0]})["s"].tolist() == [0.5]


def test_split_fields_read_their_slice_of_a_flat_root_ADP_59_97() -> None:
    tags = A.Split(A.Field(A.EEF_POS, 3), A.Field(dim=2), A.Field(A.GRIPPER_POS, 1, range=(0, 2)))
    ad = A.resolve(A.EnvTags(tags, ACT1), box([6]), box([1]),
                   A.ModelSpec(A.Concat(A.GRIPPER_POS, A.State(A.EEF_POS, dim=2)), ACT1))  # fmt: skip
    flat = np.array([1, 2, 3, 9, 9, 4], np.float32)
    assert ad.transform_obs(flat).tolist() == [4, 1, 2]
    assert ad.transform_obs({"<obs>": flat}).tolist() == [4, 1, 2]
    assert ad.describe().splitlines()[1] == '  "<root>" <- concat(<root>[5:6], <root>[0:3][:2])'
    with pytest.raises(ValueError, match="at least 6 elements"):
        ad.transform_obs(np.zeros(4, np.float32))


def test_split_field_ranges_come_from_their_own_slice_of_the_bounds_ADP_59() -> None:
    tags = A.Split(A.Field("x/a", 2), A.Field("x/b", 1))
    space = {
        "kind": "box",
        "dtype": "float32",
        "shape": [3],
        "low": [0.0, 0.0, -1.0],
        "high": [1.0, 1.0, 1.0],
    }
    ad = A.resolve(A.EnvTags(tags, ACT1), space, box([1]),
                   A.ModelSpec({"a": A.State("x/a", range=(0, 2)), "b": A.State("x/b", range=(0, 2))}, ACT1))  # fmt: skip
    out = ad.transform_obs(np.array([0.5, 1.0, 0.0], np.float32))
    assert out["a"].tolist() == [1.0, 2.0] and out["b"].tolist() == [1.0]


def test_leaf_values_accept_numbers_lists_bools_and_data_mappings_ADP_99() -> None:
    ad = _one({"a": A.StateTag("x/a"), "b": A.StateTag("x/b"), "c": A.StateTag("x/c")},
              dict_space(a=box([]), b=box([2, 2]), c=box([2])), {"s": A.Concat("x/a", "x/b", "x/c")})  # fmt: skip
    out = ad.transform_obs({"a": True, "b": [[1, 2], [3, 4]], "c": {"data": [5, 6]}})
    assert out["s"].tolist() == [1, 1, 2, 3, 4, 5, 6]


def test_missing_keys_name_the_path_and_available_keys_ADP_99() -> None:
    ad = _one({"a": A.StateTag("x/a")}, dict_space(a=box([1])), {"s": A.Concat("x/a")})
    with pytest.raises(ValueError, match=r'no key "a".*available: \[\'b\'\]'):
        ad.transform_obs({"b": [1]})


def test_nested_dict_and_tuple_sources_are_walked_ADP_97() -> None:
    tags = {"robot": {"arm": (A.StateTag("x/a"), A.StateTag("x/b"))}}
    space = dict_space(robot=dict_space(arm={"kind": "tuple", "children": [box([1]), box([2])]}))
    ad = _one(tags, space, {"s": A.Concat("x/b", "x/a")})
    assert ad.transform_obs({"robot": {"arm": ([1.0], [2.0, 3.0])}})["s"].tolist() == [2, 3, 1]
    assert '"s" <- concat(robot.arm[1], robot.arm[0])' in ad.describe()
    assert ad.referenced_obs_keys == ("robot",)


def test_only_referenced_keys_are_read_ADP_98() -> None:
    ad = _one(
        {"a": A.StateTag("x/a")}, dict_space(a=box([1]), junk=box([1])), {"s": A.Concat("x/a")}
    )
    assert ad.transform_obs({"a": [1], "junk": object()})["s"].tolist() == [1]


def test_labels_gather_observation_values_by_name_DELTA_64() -> None:
    ad = _one({"j": A.StateTag(A.JOINT_POS, labels=("a", "b", "c"))}, dict_space(j=box([3])),
              {"s": A.State(A.JOINT_POS, labels=("c", "a"))})  # fmt: skip
    assert ad.transform_obs({"j": [1, 2, 3]})["s"].tolist() == [3, 1]
    assert "perm[2,0]" in ad.describe()


def test_state_scale_offset_then_leaf_clip_DELTA_65_66() -> None:
    ad = _one({"p": A.StateTag(A.EEF_POS)}, dict_space(p=box([3])),
              {"s": A.Concat(A.State(A.EEF_POS, scale=(1, 2, 3), offset=0.5), clip=(-1, 1))})  # fmt: skip
    assert np.allclose(ad.transform_obs({"p": [0.1, 0.2, 0.3]})["s"], [0.6, 0.9, 1.0])
    assert "(+0.5 *[1.0,2.0,3.0])" in ad.describe() and "clip[-1.0,1.0]" in ad.describe()


def test_constant_parts_contribute_fixed_blocks_DELTA_66() -> None:
    ad = _one(
        {"p": A.StateTag("x/p")},
        dict_space(p=box([1])),
        {"s": A.Concat("x/p", A.Constant(dim=2, fill=7))},
    )
    assert ad.transform_obs({"p": [1]})["s"].tolist() == [1, 7, 7]
    assert "const(2)=7" in ad.describe()


def test_previous_reads_the_last_raw_model_action_and_resets_to_fill_DELTA_66() -> None:
    out = A.Action(A.Actuator("x/a", 2, scale=10.0))
    tags = A.EnvTags({"p": A.StateTag("x/p")}, A.Action(A.Actuator("x/a", 2)))
    spec = A.ModelSpec({"s": A.Concat("x/p", A.Previous("x/a", fill=9))}, out)
    ad = A.resolve(tags, dict_space(p=box([1])), box([2]), spec)
    assert ad.transform_obs({"p": [0]})["s"].tolist() == [0, 9, 9]
    assert ad.transform_action([0.3, 0.4]).tolist() == pytest.approx([3.0, 4.0])
    assert ad.transform_obs({"p": [0]})["s"].tolist() == pytest.approx([0, 0.3, 0.4])
    assert ad.history_keys() == ("s",)
    ad.reset()
    assert ad.transform_obs({"p": [0]})["s"].tolist() == [0, 9, 9]
    assert "previous x/a (fill 9)" in ad.describe()


def test_post_rotate_right_multiplies_before_reencoding_DELTA_66() -> None:
    rz = A.Rotation.from_matrix([[0, -1, 0], [1, 0, 0], [0, 0, 1]])
    ad = _one({"q": A.StateTag(A.EEF_ROT, encoding="quat_xyzw")}, dict_space(q=box([4])),
              {"s": A.State(A.EEF_ROT, encoding="rot6d", post_rotate=rz)})  # fmt: skip
    assert np.allclose(ad.transform_obs({"q": [0, 0, 0, 1]})["s"], rz.value, atol=1e-7)
    assert "(post_rotate)" in ad.describe()


def test_gravity_xyz_observations_come_from_any_rotation_DELTA_66() -> None:
    ad = _one({"q": A.StateTag(A.BASE_ROT, encoding="quat_wxyz")}, dict_space(q=box([4])),
              {"g": A.State(A.BASE_ROT, encoding="gravity_xyz")})  # fmt: skip
    assert np.allclose(ad.transform_obs({"q": [1, 0, 0, 0]})["g"], [0, 0, -1])


def test_text_sources_fall_back_to_fill_and_lists_wrap_ADP_105() -> None:
    tags = {"t": A.TextTag(A.INSTRUCTION), "p": A.StateTag("x/p")}
    space = dict_space(t=TEXT, p=box([1]))
    ad = _one(tags, space, {"a": A.Text(A.INSTRUCTION, container="list"), "b": A.Text(A.INSTRUCTION, fill="dflt"),
                            "c": A.Text(A.INSTRUCTION)})  # fmt: skip
    assert ad.transform_obs({"t": "go", "p": [0]}) == {"a": ["go"], "b": "go", "c": "go"}
    assert ad.transform_obs({"p": [0]}) == {"b": "dflt"}
    with pytest.raises(ValueError, match="expected a string"):
        ad.transform_obs({"t": 3, "p": [0]})


def test_text_fill_only_plans_need_no_env_text_ADP_82() -> None:
    ad = _one(
        {"p": A.StateTag("x/p")}, dict_space(p=box([1])), {"t": A.Text(A.INSTRUCTION, fill="do it")}
    )
    assert ad.transform_obs({"p": [0]}) == {"t": "do it"}
    assert '"t" <- text fill "do it"' in ad.describe()


def test_tuple_inputs_build_list_payloads_and_bare_leaves_build_bare_values_ADP_100() -> None:
    tags = {"p": A.StateTag("x/p"), "t": A.TextTag(A.INSTRUCTION)}
    space = dict_space(p=box([1]), t=TEXT)
    ad = _one(tags, space, (A.Text(A.INSTRUCTION), {"state": A.Concat("x/p")}))
    out = ad.transform_obs({"p": [2], "t": "hi"})
    assert isinstance(out, list) and out[0] == "hi" and out[1]["state"].tolist() == [2]
    gap = _one(tags, space, (A.Text(A.INSTRUCTION), A.Concat("x/p")))
    assert gap.transform_obs({"p": [2]})[0] == {}  # omitted text leaves a {} gap
    bare = _one(tags, space, A.Concat("x/p"))
    assert bare.transform_obs({"p": [2], "t": "hi"}).tolist() == [2]


def test_flat_envs_accept_a_bare_observation_or_the_obs_envelope_ADP_97() -> None:
    ad = A.resolve(
        A.EnvTags(A.StateTag("x/p"), ACT1),
        box([2]),
        box([1]),
        A.ModelSpec({"s": A.Concat("x/p")}, ACT1),
    )
    assert ad.transform_obs([1, 2])["s"].tolist() == [1, 2]
    assert ad.transform_obs({"<obs>": np.array([1, 2])})["s"].tolist() == [1, 2]
    assert ad.referenced_obs_keys == ("<obs>",)


def test_transform_obs_never_mutates_the_observation() -> None:
    ad = _one({"p": A.StateTag("x/p")}, dict_space(p=box([3])), {"s": A.Concat("x/p", clip=(0, 0))})
    arr = np.array([1, 2, 3], np.float32)
    ad.transform_obs({"p": arr})
    assert arr.tolist() == [1, 2, 3]


def test_obs_custom_encoding_repacks_its_own_slice_ADP_38_DELTA_68() -> None:
    def to_wxyz(v: np.ndarray) -> np.ndarray:
        return v[[3, 0, 1, 2]]

    def to_xyzw(v: np.ndarray) -> np.ndarray:
        return v[[1, 2, 3, 0]]

    enc = A.CustomEncoding("quat_xyzw", from_base=to_wxyz, to_base=to_xyzw, name="wxyz_mine")
    ad = _one({"p": A.StateTag("x/p"), "q": A.StateTag(A.EEF_ROT, encoding="axis_angle")}, dict_space(p=box([1]), q=box([3])),
              {"s": A.Concat("x/p", A.State(A.EEF_ROT, encoding=enc), pad_to=6)})  # fmt: skip
    out = ad.transform_obs({"p": [7], "q": [0, 0, 0]})["s"]
    assert out.tolist() == [7, 1, 0, 0, 0, 0]
    assert "host-side encodings:\n  obs    's'[1:5]: quat_xyzw -> wxyz_mine" in ad.describe()


def test_obs_custom_encoding_output_is_checked_at_apply_ADP_40() -> None:
    enc = A.CustomEncoding("quat_xyzw", from_base=lambda v: v[:3], to_base=lambda v: v)
    ad = A.resolve(A.EnvTags({"q": A.StateTag(A.EEF_ROT, encoding="quat_xyzw")}, ACT1), dict_space(q=box([4])), box([1]),
                   A.ModelSpec({"s": A.State(A.EEF_ROT, encoding=enc)}, ACT1), check_inverse=False)  # fmt: skip
    with pytest.raises(ValueError, match="flat width-4"):
        ad.transform_obs({"q": [0, 0, 0, 1]})


def test_second_arm_roles_and_right_arm_parts_bind_each_other_DELTA_60() -> None:
    ad = _one({"r": A.StateTag(A.EEF_POS, part=A.RIGHT_ARM), "l": A.StateTag(A.EEF_POS)}, dict_space(r=box([3]), l=box([3])),
              {"s": A.Concat(A.EEF_POS, A.EEF_POS_2)})  # fmt: skip
    assert ad.transform_obs({"r": [2, 2, 2], "l": [1, 1, 1]})["s"].tolist() == [1, 1, 1, 2, 2, 2]
    seed = _one({"a": A.StateTag(A.EEF_POS), "b": A.StateTag(A.EEF_POS_2)}, dict_space(a=box([3]), b=box([3])),
                {"s": A.Concat(A.State(A.EEF_POS, part=A.RIGHT_ARM), A.EEF_POS)})  # fmt: skip
    assert seed.transform_obs({"a": [1, 1, 1], "b": [2, 2, 2]})["s"].tolist() == [2, 2, 2, 1, 1, 1]


def test_an_optional_second_arm_part_zero_fills_on_a_single_arm_env_ADP_16() -> None:
    ad = _one(
        {"p": A.StateTag(A.EEF_POS)},
        dict_space(p=box([3])),
        {"s": A.Concat(A.EEF_POS, A.State(A.EEF_POS_2, optional=True, dim=3))},
    )
    assert ad.transform_obs({"p": [1, 1, 1]})["s"].tolist() == [1, 1, 1, 0, 0, 0]
    assert not [a for a in ad.advisories() if "ad-hoc" in a.message]


def test_a_part_less_request_binds_the_only_part_with_an_info_advisory_DELTA_60() -> None:
    ad = _one(
        {"l": A.StateTag(A.EEF_POS, part=A.LEFT_ARM)},
        dict_space(l=box([3])),
        {"s": A.Concat(A.EEF_POS)},
    )
    assert ad.transform_obs({"l": [1, 2, 3]})["s"].tolist() == [1, 2, 3]
    (adv,) = ad.advisories()
    assert (
        adv.severity == "info"
        and 'declares it only under part "left_arm"; bound to that leaf' in adv.message
    )


def test_ad_hoc_optional_state_roles_draw_the_release_advisory_but_stay_out_of_describe_DELTA_61() -> (
    None
):
    ad = _one(
        {"p": A.StateTag("x/p")},
        dict_space(p=box([1])),
        {"s": A.Concat("x/p", A.State("vendor/extra", dim=2, optional=True))},
    )
    msgs = [a.message for a in ad.advisories()]
    assert any(
        m.startswith('model declares ad-hoc role "vendor/extra" that this env does not')
        for m in msgs
    )
    assert "dropped:" not in ad.describe()
