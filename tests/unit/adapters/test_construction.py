"""Constructor validation of tags, leaves and actuators (ADP-13, ADP-20..37, DELTA-60..67)."""

from __future__ import annotations

import pytest

import rlmesh.adapters as A

ACT = A.Action(A.Actuator(A.ACTION_GRIPPER, dim=1))


def test_role_constants_have_their_wire_strings_ADP_15() -> None:
    assert (A.IMAGE_PRIMARY, A.IMAGE_SECONDARY, A.IMAGE_WRIST) == (
        "image/primary",
        "image/secondary",
        "image/wrist",
    )
    assert (A.INSTRUCTION, A.JOINT_POS, A.JOINT_VEL) == (
        "text/instruction",
        "proprio/joint_pos",
        "proprio/joint_vel",
    )
    assert (A.EEF_POS, A.EEF_ROT, A.GRIPPER_POS) == (
        "proprio/eef_pos",
        "proprio/eef_rot",
        "proprio/gripper",
    )
    assert (A.ACTION_DELTA_POS, A.ACTION_DELTA_ROT, A.ACTION_GRIPPER) == (
        "action/delta_eef_pos", "action/delta_eef_rot", "action/gripper")  # fmt: skip
    assert (A.ACTION_JOINT_POS, A.ACTION_JOINT_VEL) == ("action/joint_pos", "action/joint_vel")
    assert (A.EEF_WRENCH, A.BASE_ANG_VEL, A.BASE_ROT, A.COMMAND_BASE_VEL) == (
        "proprio/eef_wrench", "proprio/base_ang_vel", "proprio/base_rot", "command/base_vel")  # fmt: skip
    assert (A.ACTION_EEF_POS, A.ACTION_EEF_ROT) == ("action/eef_pos", "action/eef_rot")


def test_seed_bimanual_second_arm_roles_exist_beside_parts() -> None:
    assert (A.EEF_POS_2, A.EEF_ROT_2, A.GRIPPER_POS_2) == (
        "proprio/eef_pos_2",
        "proprio/eef_rot_2",
        "proprio/gripper_2",
    )
    assert (A.ACTION_DELTA_POS_2, A.ACTION_DELTA_ROT_2, A.ACTION_GRIPPER_2) == (
        "action/delta_eef_pos_2", "action/delta_eef_rot_2", "action/gripper_2")  # fmt: skip
    assert A.PARTS == ["left_arm", "right_arm", "head", "torso", "base", "left_leg", "right_leg"]
    assert tuple(A.PARTS) == (
        A.LEFT_ARM,
        A.RIGHT_ARM,
        A.HEAD,
        A.TORSO,
        A.BASE,
        A.LEFT_LEG,
        A.RIGHT_LEG,
    )
    assert A.ENV_BRANCH_METADATA_KEY == "rlmesh.adapters.v1.env_branch"
    assert A.IMAGE_LAYOUTS == ["hwc", "chw"]


def test_all_lists_the_74_release_names() -> None:
    assert len(A.__all__) == 74 == len(set(A.__all__))
    for name in A.__all__:
        assert hasattr(A, name), name


def test_env_tags_reject_lists_and_non_tags_ADP_20() -> None:
    with pytest.raises(TypeError, match="tuple"):
        A.EnvTags([A.TextTag("x/t")], ACT)
    with pytest.raises(TypeError, match="expected a dict"):
        A.EnvTags({"a": 3}, ACT)
    with pytest.raises(TypeError, match="Action"):
        A.EnvTags({}, [A.Actuator("x/a", 1)])


def test_duplicate_roles_within_a_kind_are_rejected_ADP_21() -> None:
    with pytest.raises(ValueError, match="image role 'image/primary' more than once"):
        A.EnvTags({"a": A.ImageTag(A.IMAGE_PRIMARY), "b": A.ImageTag(A.IMAGE_PRIMARY)}, ACT)
    with pytest.raises(ValueError, match="state role 'proprio/eef_pos' more than once"):
        A.EnvTags({"a": A.StateTag(A.EEF_POS), "b": A.Split(A.Field(A.EEF_POS, 3))}, ACT)
    # different kinds may share a role string
    A.EnvTags({"a": A.StateTag("x/r"), "b": A.TextTag("x/r")}, ACT)


def test_duplicate_identity_includes_part_and_provenance_DELTA_60() -> None:
    A.EnvTags(
        {"l": A.StateTag(A.EEF_POS, part=A.LEFT_ARM), "r": A.StateTag(A.EEF_POS, part=A.RIGHT_ARM)},
        ACT,
    )
    A.EnvTags(
        {
            "s": A.StateTag(A.EEF_POS, provenance="sensed"),
            "e": A.StateTag(A.EEF_POS, provenance="estimated"),
        },
        ACT,
    )
    with pytest.raises(ValueError, match="under part 'left_arm' more than once"):
        A.EnvTags(
            {
                "a": A.StateTag(A.EEF_POS, part=A.LEFT_ARM),
                "b": A.StateTag(A.EEF_POS, part=A.LEFT_ARM),
            },
            ACT,
        )
    with pytest.raises(ValueError, match="with provenance 'sensed'"):
        A.EnvTags(
            {
                "a": A.StateTag(A.EEF_POS, provenance="sensed"),
                "b": A.StateTag(A.EEF_POS, provenance="sensed"),
            },
            ACT,
        )


def test_a_second_arm_role_and_its_right_arm_part_spelling_are_one_identity() -> None:
    with pytest.raises(ValueError, match="more than once"):
        A.EnvTags({"a": A.StateTag(A.EEF_POS_2), "b": A.StateTag(A.EEF_POS, part=A.RIGHT_ARM)}, ACT)


def test_split_rules_ADP_25() -> None:
    with pytest.raises(ValueError, match="at least one field"):
        A.Split()
    with pytest.raises(ValueError, match="more than once"):
        A.Split(A.Field(A.EEF_POS, 3), A.Field(A.EEF_POS, 3))
    with pytest.raises(ValueError, match="state field dim must be >= 1"):
        A.Field(A.EEF_POS, 0)
    with pytest.raises(ValueError, match="role-less"):
        A.Field(dim=2, encoding="rot6d")
    with pytest.raises(ValueError, match="role-less"):
        A.Field(dim=2, range=(0, 1))
    assert A.Split(A.Field(A.EEF_POS, 3), A.Field(dim=10)).dim == 13


def test_encoding_accept_sets_canonicalize_ADP_13() -> None:
    assert A.StateTag(A.EEF_ROT, encoding=["quat_xyzw"]).encoding == "quat_xyzw"
    assert A.StateTag(A.EEF_ROT, encoding=["rot6d", "quat_xyzw", "rot6d"]).encoding == (
        "rot6d",
        "quat_xyzw",
    )
    assert A.State(A.EEF_ROT, encoding=("mystery", "rot6d")).encoding == ("mystery", "rot6d")
    with pytest.raises(ValueError, match="at least one encoding"):
        A.StateTag(A.EEF_ROT, encoding=[])
    with pytest.raises(TypeError, match="encoding names"):
        A.State(A.EEF_ROT, encoding=["rot6d", 3])
    with pytest.raises(TypeError, match="model-side"):
        A.StateTag(A.EEF_ROT, encoding=A.CustomEncoding("rot6d", from_base=abs))


def test_actuator_rules_ADP_29() -> None:
    with pytest.raises(ValueError, match=r"'action/gripper'.*dim must be >= 1"):
        A.Actuator(A.ACTION_GRIPPER, dim=0)
    with pytest.raises(ValueError, match="dim is required"):
        A.Actuator(A.ACTION_GRIPPER)
    with pytest.raises(ValueError, match="role-less"):
        A.Actuator(dim=2, binary=True)
    with pytest.raises(ValueError, match="role-less"):
        A.Actuator(dim=2, part="left_arm")
    with pytest.raises(ValueError, match="fill applies only"):
        A.Actuator(A.ACTION_GRIPPER, 1, fill=1.0)
    with pytest.raises(ValueError, match="requires range"):
        A.Actuator(A.ACTION_GRIPPER, 1, clip=True)
    with pytest.raises(ValueError, match="dim must be 4"):
        A.Actuator(A.ACTION_DELTA_ROT, 3, encoding=A.CustomEncoding("quat_xyzw", to_base=abs))
    with pytest.raises(ValueError, match="finite"):
        A.Actuator(A.ACTION_GRIPPER, 1, range=(0, float("inf")))
    with pytest.raises(ValueError, match="single number"):
        A.Actuator(dim=1, fill=True)
    with pytest.raises(ValueError, match="not a list"):
        A.Actuator(A.ACTION_DELTA_ROT, 3, encoding=["axis_angle"])
    with pytest.raises(ValueError, match="observation-only"):
        A.Actuator(A.ACTION_DELTA_ROT, 3, encoding="gravity_xyz")
    with pytest.raises(ValueError, match="per-axis scale"):
        A.Actuator("x/a", 2, scale=(1, 2, 3))
    with pytest.raises(ValueError, match="labels do not match"):
        A.Actuator("x/a", 2, labels=("a",))
    with pytest.raises(ValueError, match="frame"):
        A.Actuator("x/a", 2, frame="moon")
    assert A.Actuator("x/a", labels=("u", "v")).dim == 2
    assert A.Actuator(dim=3, fill=0.5).fill == 0.5


def test_action_rules_ADP_28() -> None:
    with pytest.raises(ValueError, match="at least one"):
        A.Action()
    with pytest.raises(TypeError, match="Actuator"):
        A.Action("action/gripper")
    act = A.Action(A.Actuator("x/a", 2), A.Actuator(dim=3), clip=[-1, 1])
    assert act.dim == 5 and act.clip == (-1.0, 1.0) and act.actuators == act.components


def test_image_rules_ADP_32() -> None:
    with pytest.raises(ValueError, match="image/primary"):
        A.Image(A.IMAGE_PRIMARY, height=4, size=4)
    with pytest.raises(ValueError, match=r"'image/primary'.*fill only applies"):
        A.Image(A.IMAGE_PRIMARY, fill=3)
    with pytest.raises(ValueError, match="stack must be between 1 and 64, got 65"):
        A.Image(A.IMAGE_PRIMARY, stack=65)
    with pytest.raises(ValueError, match="min <= max"):
        A.Image(A.IMAGE_PRIMARY, normalize=(1, 0))
    with pytest.raises(ValueError, match="finite"):
        A.Image(A.IMAGE_PRIMARY, normalize=(0, float("nan")))
    with pytest.raises(ValueError, match="layout"):
        A.Image(A.IMAGE_PRIMARY, layout="whc")
    assert A.Image(A.IMAGE_PRIMARY, normalize=(0, 0)).normalize == (0.0, 0.0)
    assert A.Image(A.IMAGE_PRIMARY, fit=["crop", "pad"]).fit == ("crop", "pad")
    assert (
        A.Image(A.IMAGE_PRIMARY, resample="weird", dtype="weird").resample == "weird"
    )  # judged at resolve


def test_image_release_fields_DELTA_67() -> None:
    assert A.Image(A.IMAGE_PRIMARY, stack=4, stride=2).offsets == (-6, -4, -2, 0)
    assert A.Image(A.IMAGE_PRIMARY, render=224).render == (224, 224)
    with pytest.raises(ValueError, match="not both"):
        A.Image(A.IMAGE_PRIMARY, crop=0.5, crop_area=0.25)
    with pytest.raises(ValueError, match="not both"):
        A.Image(A.IMAGE_PRIMARY, stack=2, stride=1, offsets=(-1, 0))
    with pytest.raises(ValueError, match="end at 0"):
        A.Image(A.IMAGE_PRIMARY, stack=2, offsets=(-1, -2))
    with pytest.raises(ValueError, match="stack=3 entries"):
        A.Image(A.IMAGE_PRIMARY, stack=3, offsets=(-1, 0))
    with pytest.raises(ValueError, match="at most 128"):
        A.Image(A.IMAGE_PRIMARY, stack=2, offsets=(-200, 0))
    with pytest.raises(ValueError, match="requires stack > 1"):
        A.Image(A.IMAGE_PRIMARY, stack_pad="black")
    with pytest.raises(ValueError, match="1 and 100"):
        A.Image(A.IMAGE_PRIMARY, jpeg_quality=0)
    with pytest.raises(ValueError, match=r"1\.\.4096"):
        A.Image(A.IMAGE_PRIMARY, render=(0, 5))
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        A.Image(A.IMAGE_PRIMARY, crop=1.5)


def test_state_rules_ADP_33_DELTA_66() -> None:
    with pytest.raises(ValueError, match="both dim and index"):
        A.State(A.EEF_POS, dim=2, index=1)
    with pytest.raises(ValueError, match="fill applies only"):
        A.State(A.EEF_POS, fill=1.0)
    with pytest.raises(ValueError, match="allows only part, labels, dim and fill"):
        A.State(A.ACTION_GRIPPER, source="action", range=(0, 1))
    with pytest.raises(ValueError, match="post_rotate needs"):
        A.State(A.EEF_ROT, post_rotate=A.Rotation.from_matrix([[1, 0, 0], [0, 1, 0], [0, 0, 1]]))
    with pytest.raises(ValueError, match="labels cannot be combined with index"):
        A.State(A.JOINT_POS, labels=("a",), index=0)
    assert A.State(A.JOINT_POS, labels=("a", "b")).dim == 2
    assert A.State(A.EEF_POS, provenance=["sensed"]).provenance == "sensed"
    prev = A.Previous(A.ACTION_GRIPPER, part=A.LEFT_ARM, fill=-1)
    assert (prev.source, prev.part, prev.fill) == ("action", "left_arm", -1.0)


def test_concat_rules_ADP_34() -> None:
    with pytest.raises(ValueError, match="at least one"):
        A.Concat()
    with pytest.raises(ValueError, match="leaf-level"):
        A.Concat(A.State(A.EEF_POS, pad_to=4))
    with pytest.raises(TypeError, match="role string, a State or a Constant"):
        A.Concat(3)
    with pytest.raises(ValueError, match="only Constant"):
        A.Concat(A.Constant(dim=2))
    with pytest.raises(ValueError, match=">= 1"):
        A.Constant(dim=0)
    assert A.Concat(A.EEF_POS, A.Constant(dim=2, fill=1)).parts[1] == A.Constant(dim=2, fill=1.0)


def test_text_and_custom_rules_ADP_35_36() -> None:
    with pytest.raises(ValueError, match="container"):
        A.Text(A.INSTRUCTION, container="tuple")
    with pytest.raises(ValueError, match="exactly one"):
        A.Custom()
    with pytest.raises(ValueError, match="exactly one"):
        A.Custom(transform=abs, entrypoint="math:fabs")
    with pytest.raises(ValueError, match="module:callable"):
        A.Custom(entrypoint="no_colon")


def test_custom_encoding_rules_ADP_37() -> None:
    with pytest.raises(ValueError, match="native encoding"):
        A.CustomEncoding("quat")
    with pytest.raises(ValueError, match="at least one of from_base"):
        A.CustomEncoding("rot6d")
    with pytest.raises(ValueError, match="not a mix"):
        A.CustomEncoding("rot6d", from_base=abs, to_base="m:f")
    assert A.CustomEncoding("euler_xyz", to_base=abs).width == 3


def test_observation_roles_are_grouped_in_declaration_order_ADP_26() -> None:
    tags = A.EnvTags(
        {
            "z": A.ImageTag(A.IMAGE_WRIST),
            "a": A.ImageTag(A.IMAGE_PRIMARY),
            "flat": A.Split(A.Field(A.EEF_POS, 3), A.Field(dim=1), A.Field(A.GRIPPER_POS, 1)),
            "t": A.TextTag(A.INSTRUCTION),
            "l": A.StateTag(A.JOINT_POS, part=A.LEFT_ARM),
            "r": A.StateTag(A.JOINT_POS, part=A.RIGHT_ARM),
        },
        ACT,
    )
    roles = tags.observation_roles
    assert roles == A.ObservationRoles(
        images=("image/wrist", "image/primary"),
        states=("proprio/eef_pos", "proprio/gripper", "proprio/joint_pos", "proprio/joint_pos"),
        texts=("text/instruction",),
    )


def test_specs_are_frozen() -> None:
    tags = A.EnvTags({}, ACT)
    with pytest.raises(AttributeError):
        tags.action = ACT  # type: ignore[misc]
    with pytest.raises(AttributeError):
        A.ImageTag(A.IMAGE_PRIMARY).role = "x"  # type: ignore[misc]


def test_adapter_resolution_error_is_a_value_error_with_a_code_ADP_2() -> None:
    err = A.AdapterResolutionError("boom", code="missing_role")
    assert isinstance(err, ValueError) and err.code == "missing_role" and str(err) == "boom"
    assert "missing_role" in A.AdapterResolutionError.CODES
