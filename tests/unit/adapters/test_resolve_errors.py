"""Every resolve-time failure message the spec pins (ADP-56..86, DELTA-60..68), and its ``.code``."""

from __future__ import annotations

import re
from typing import Any

import pytest

import rlmesh.adapters as A

from ._helpers import STD_ACTION_SPACE, TEXT, box, dict_space, resolve_std, std_output, std_tags

ACT1 = A.Action(A.Actuator(A.ACTION_GRIPPER, dim=1))
ACT1_SPACE = box([1])


def _fails(fn: Any, message: str, code: str | None = None) -> A.AdapterResolutionError:
    with pytest.raises(A.AdapterResolutionError, match=re.escape(message)) as info:
        fn()
    if code is not None:
        assert info.value.code == code
    return info.value


def _resolve(obs_tags: Any, obs_space: Any, inputs: Any, *, act_tags: A.Action = ACT1, act_space: Any = ACT1_SPACE,
             output: A.Action = ACT1, **kw: Any) -> A.Adapter:  # fmt: skip
    return A.resolve(
        A.EnvTags(obs_tags, act_tags), obs_space, act_space, A.ModelSpec(inputs, output), **kw
    )


TXT_IN = A.Text(A.INSTRUCTION, fill="x")


# -- join (ADP-56..66) ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tags", "space", "message"),
    [
        ({"a": A.TextTag("x/t")}, box([3]), 'observation "<root>" is tagged as a Dict space but the space is a 1-D Box'),
        ({"nope": A.TextTag("x/t")}, dict_space(t=TEXT), 'observation key "nope" does not resolve to a leaf of the observation space'),
        ((A.TextTag("x/t"),), {"kind": "tuple", "children": [TEXT, TEXT]}, 'observation tuple at "<root>" declares 1 item(s) but the space has 2'),
        ((A.TextTag("x/t"),), TEXT, 'observation "<root>" is tagged as a Tuple space but the space is a Text space'),
        ({"c": A.ImageTag(A.IMAGE_PRIMARY)}, dict_space(c=box([8, 8])), 'observation "c" is tagged as an image (3-D Box) but the space is a 2-D Box'),
        ({"s": A.StateTag("x/s")}, dict_space(s=TEXT), 'observation "s" is tagged as a numeric state but the space is a Text space'),
        ({"t": A.TextTag("x/t")}, dict_space(t=box([1])), 'observation "t" is tagged as a text space but the space is a 1-D Box'),
        ({"t": A.TextTag("x/t")}, dict_space(t={"kind": "discrete"}), "but the space is a Discrete space"),
        ({"t": A.TextTag("x/t")}, dict_space(t={"kind": "multi_binary", "shape": [2]}), "but the space is a MultiBinary space"),
        ({"t": A.TextTag("x/t")}, dict_space(t={"kind": "multi_discrete", "shape": [2]}), "but the space is a MultiDiscrete space"),
        ({"t": A.TextTag("x/t")}, dict_space(t={"kind": "dict", "keys": [], "children": []}), "but the space is a Dict space"),
        ({"t": A.TextTag("x/t")}, dict_space(t={"kind": "unspecified"}), "but the space is an unspecified space"),
        ({"q": A.StateTag(A.EEF_ROT, encoding="quat_xyzw")}, dict_space(q=box([5])), 'state "q" declares encoding quat_xyzw (4 dims) but the space width is 5'),
        ({"p": A.StateTag(A.EEF_POS)}, dict_space(p=box([4])), '"p" declares role "proprio/eef_pos", which is 3-D by convention, but its width is 4'),
        ({"w": A.StateTag(A.EEF_WRENCH)}, dict_space(w=box([3])), "which is 6-D by convention, but its width is 3"),
        ({"f": A.Split(A.Field("x/a", 2), A.Field(dim=3))}, dict_space(f=box([6])), 'state layout for "f" sums to 5 dims but the space width is 6'),
        ({"f": A.Split(A.Field(A.EEF_ROT, 3, encoding="quat_xyzw"))}, dict_space(f=box([3])), "declares encoding quat_xyzw (4 dims) but its dim is 3"),
        ({"f": A.Split(A.Field(A.EEF_POS, 2))}, dict_space(f=box([2])), "which is 3-D by convention, but its width is 2"),
        ({"p": A.StateTag("x/p", range=(0, 1))}, dict_space(p=box([2], low=-1.0, high=1.0)), '"p" tag range (0.0, 1.0) disagrees with the space\'s finite bounds (-1.0, 1.0)'),
        ({"j": A.StateTag(A.ACTION_JOINT_POS)}, dict_space(j=box([2])), 'observation "j" declares role "action/joint_pos", an action kind'),
        ({"q": A.StateTag(A.EEF_ROT, encoding="quat")}, dict_space(q=box([4])), 'state "q" declares unknown rotation encoding "quat"; expected one of'),
        ({"j": A.StateTag(A.JOINT_POS, labels=("a",))}, dict_space(j=box([2])), 'state "j" declares 1 labels but the space width is 2'),
    ],
)  # fmt: skip
def test_join_rejects_tags_that_do_not_fit_the_space(tags: Any, space: Any, message: str) -> None:
    _fails(lambda: _resolve(tags, space, TXT_IN), message)


def test_join_rejects_actions_that_do_not_fit_the_action_space_ADP_63_64() -> None:
    obs = ({"t": A.TextTag(A.INSTRUCTION)}, dict_space(t=TEXT))
    _fails(
        lambda: _resolve(*obs, TXT_IN, act_space={"kind": "discrete"}),
        "the action space must be a flat Box but it is a Discrete space",
    )
    _fails(
        lambda: _resolve(*obs, TXT_IN, act_space=box([7])),
        "action component dims sum to 1 but the action space width is 7",
        "dim_mismatch",
    )
    bad_rot = A.Action(A.Actuator(A.ACTION_DELTA_ROT, 4, encoding="axis_angle"))
    _fails(lambda: _resolve(*obs, TXT_IN, act_tags=bad_rot, act_space=box([4])),
           'action component "action/delta_eef_rot" declares encoding axis_angle (3 dims) but its dim is 4')  # fmt: skip
    law = A.Action(A.Actuator(A.ACTION_DELTA_POS, 2))
    _fails(lambda: _resolve(*obs, TXT_IN, act_tags=law, act_space=box([2])),
           '"action/delta_eef_pos" declares role "action/delta_eef_pos", which is 3-D by convention, but its width is 2')  # fmt: skip
    rng = A.Action(A.Actuator(A.ACTION_GRIPPER, 1, range=(0, 1)))
    _fails(lambda: _resolve(*obs, TXT_IN, act_tags=rng, act_space=box([1], low=-1.0, high=1.0)),
           '"action/gripper" tag range (0.0, 1.0) disagrees with the space\'s finite bounds (-1.0, 1.0)')  # fmt: skip


def test_a_space_bound_within_tolerance_agrees_and_the_tag_value_is_kept_ADP_65() -> None:
    tags = A.Action(A.Actuator(A.ACTION_GRIPPER, 1, range=(-1.0000001, 1.0), clip=True))
    ad = _resolve({"t": A.TextTag(A.INSTRUCTION)}, dict_space(t=TEXT), TXT_IN, act_tags=tags,
                  act_space=box([1], low=-1.0, high=1.0))  # fmt: skip
    assert ad.transform_action([-5.0]).tolist() == pytest.approx([-1.0000001])


# -- unknown kinds and unknown fields (ADP-54, ADP-69) -----------------------------------------------
RAW_ENV = {
    "observation": {
        "d": {"type": "depth", "role": "x/depth"},
        "t": {"type": "text", "role": "text/instruction"},
    },
    "action": {"components": [{"role": "action/gripper", "dim": 1}], "clip": None},
}
RAW_SPACE = dict_space(d=box([4, 4, 1]), t=TEXT)


def test_a_model_leaf_of_unknown_kind_fails_ADP_69() -> None:
    spec = {
        "input": {"v": {"type": "voxels"}},
        "output": {"components": [{"role": "action/gripper", "dim": 1}]},
    }
    _fails(lambda: A.resolve(RAW_ENV, RAW_SPACE, ACT1_SPACE, spec),
           'model input "v" is of unrecognized kind "voxels"; upgrade the runtime', "unsupported_kind")  # fmt: skip


def test_a_role_offered_only_as_an_unknown_kind_fails_before_any_fallback_ADP_69() -> None:
    spec = A.ModelSpec({"d": A.State("x/depth", dim=2, optional=True)}, ACT1)
    _fails(lambda: A.resolve(RAW_ENV, RAW_SPACE, ACT1_SPACE, spec),
           'model input "d" needs role "x/depth" but the env declares it as unrecognized observation kind "depth"; upgrade the runtime')  # fmt: skip


def test_an_unreferenced_unknown_kind_is_an_info_advisory_ADP_69() -> None:
    ad = A.resolve(RAW_ENV, RAW_SPACE, ACT1_SPACE, A.ModelSpec({"t": A.Text(A.INSTRUCTION)}, ACT1))
    msg = 'env feature "d" (role "x/depth"): unrecognized kind "depth"; ignored (no model input requires it)'
    assert [(a.severity, a.message) for a in ad.advisories()] == [("info", msg)]
    assert "dropped:\n  " + msg in ad.describe()


def test_bare_unknown_fields_from_a_peer_fail_at_resolve_ADP_54() -> None:
    raw = {
        **RAW_ENV,
        "observation": {
            "t": {"type": "text", "role": "text/instruction", "color": "red", "x-ok": 1}
        },
    }
    spec = A.ModelSpec({"t": A.Text(A.INSTRUCTION)}, ACT1)
    err = _fails(lambda: A.resolve(raw, dict_space(t=TEXT), ACT1_SPACE, spec),
                 'feature "t" declares unrecognized field "color";', "unsupported_kind")  # fmt: skip
    assert "x-" in str(err)
    raw2 = {**RAW_ENV, "observation": {"t": {"type": "text", "role": "text/instruction"}},
            "action": {"components": [{"role": "action/gripper", "dim": 1, "torque": 3}], "clip": None}}  # fmt: skip
    _fails(lambda: A.resolve(raw2, dict_space(t=TEXT), ACT1_SPACE, spec),
           'action component[0] (role "action/gripper") declares unrecognized field "torque"')  # fmt: skip


def test_duplicate_env_roles_from_a_peer_fail_at_resolve_ADP_67() -> None:
    raw = {"observation": {"a": {"type": "text", "role": "r"}, "b": {"type": "text", "role": "r"}},
           "action": {"components": [{"role": "action/gripper", "dim": 1}, {"role": "action/gripper", "dim": 1}], "clip": None}}  # fmt: skip
    spec = A.ModelSpec({"t": A.Text("r")}, ACT1)
    _fails(
        lambda: A.resolve(raw, dict_space(a=TEXT, b=TEXT), box([2]), spec),
        'duplicate env text role "r"',
        "duplicate",
    )
    raw["observation"] = {"a": {"type": "image", "role": "i"}, "b": {"type": "image", "role": "i"}}
    _fails(
        lambda: A.resolve(raw, dict_space(a=box([2, 2, 3]), b=box([2, 2, 3])), box([2]), spec),
        'duplicate env image role "i"',
    )
    raw["observation"] = {"a": {"type": "state", "role": "s"}, "b": {"type": "state", "role": "s"}}
    _fails(
        lambda: A.resolve(raw, dict_space(a=box([1]), b=box([1])), box([2]), spec),
        'duplicate env state role "s"',
    )
    raw["observation"] = {"a": {"type": "text", "role": "r"}}
    _fails(
        lambda: A.resolve(raw, dict_space(a=TEXT), box([2]), spec),
        'duplicate env action role "action/gripper"',
    )


# -- images (ADP-70..74, DELTA-67) --------------------------------------------------------------------
def _img(leaf: A.Image, *, h: int = 8, w: int = 8, cams: int = 1) -> A.Adapter:
    tags: dict[str, Any] = {"c": A.ImageTag(A.IMAGE_PRIMARY)}
    space = {"c": box([h, w, 3], "uint8")}
    if cams > 1:
        tags["d"] = A.ImageTag(A.IMAGE_SECONDARY)
        space["d"] = box([h, w, 3], "uint8")
    return _resolve(tags, dict_space(**space), {"img": leaf})


@pytest.mark.parametrize(
    ("leaf", "kw", "message", "code"),
    [
        (A.Image(A.IMAGE_WRIST), {"cams": 2}, 'model input "img" wants an image with role "image/wrist" but the env offers ["image/primary", "image/secondary"]', "missing_role"),
        (A.Image(A.IMAGE_WRIST, size=4, optional=True), {}, 'model input "img": an optional image the env does not provide needs height, width, and channels to size the zero-filled frame', "missing_width"),
        (A.Image(A.IMAGE_PRIMARY, resample="bicubic"), {}, "model input \"img\": unsupported resample \"bicubic\"; expected 'bilinear' or 'bilinear_aa'", "unsupported"),
        (A.Image(A.IMAGE_PRIMARY, dtype="float128"), {}, 'model input "img": unknown dtype "float128"', "unsupported"),
        (A.Image(A.IMAGE_PRIMARY, channels=1), {}, 'model input "img": expects 1 channel(s) but the env image has 3; the adapter does not convert between channel counts (e.g. RGB vs grayscale)', "dim_mismatch"),
        (A.Image(A.IMAGE_PRIMARY, size=4), {"w": 6}, "model input \"img\": target 4x4 changes the env's 8x6 aspect ratio; set fit to 'stretch', 'crop', or 'pad'", "unsupported"),
        (A.Image(A.IMAGE_PRIMARY, size=4, fit="zoom"), {"w": 6}, "names no mode this build recognizes", "unsupported"),
        (A.Image(A.IMAGE_PRIMARY, size=4, fit=["zoom"]), {}, "names no mode this build recognizes", "unsupported"),
        (A.Image(A.IMAGE_PRIMARY, height=16, width=8, fit="crop"), {}, "model input \"img\": every declared fit would upscale the env's 8x8 image to 16x8; set allow_upscale or declare a fit that downscales (e.g. 'pad')", "unsupported"),
        (A.Image(A.IMAGE_PRIMARY, size=16), {}, "model input \"img\": target 16x16 upscales the env's 8x8 image; set allow_upscale to interpolate detail that is not there", "unsupported"),
        (A.Image(A.IMAGE_PRIMARY, render=64), {}, 'model input "img": the model was trained at render 64x64 but the env image is 8x8', "dim_mismatch"),
        (A.Image(A.IMAGE_PRIMARY, normalize=True), {}, 'model input "img": normalize yields fractional values that dtype "uint8" cannot hold', "unsupported"),
    ],
)  # fmt: skip
def test_image_planning_failures_ADP_71_74(
    leaf: A.Image, kw: dict[str, Any], message: str, code: str
) -> None:
    _fails(lambda: _img(leaf, **kw), message, code)


def test_fit_pad_downscales_where_stretch_would_upscale_ADP_74() -> None:
    ad = _img(A.Image(A.IMAGE_PRIMARY, height=16, width=8, fit=["crop", "pad"]))
    assert "resize 16x8" in ad.describe()


# -- states (ADP-77..80) ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("leaf", "message", "code"),
    [
        (A.Concat("proprio/extra"), 'model input "s" needs state role "proprio/extra" but the env offers ["proprio/eef_pos", "proprio/eef_rot", "proprio/gripper"]', "missing_role"),
        (A.State("proprio/extra", optional=True), 'model input "s": optional state role "proprio/extra" needs dim, index, or encoding to size its zero fill', "missing_width"),
        (A.State(A.EEF_ROT), 'state role "proprio/eef_rot": cannot convert encoding quat_xyzw to none; both sides must declare a rotation encoding', "encoding_mismatch"),
        (A.State(A.EEF_POS, encoding="rot6d"), 'state role "proprio/eef_pos": cannot convert encoding none to rot6d; both sides must declare a rotation encoding', "encoding_mismatch"),
        (A.State(A.EEF_ROT, encoding="quaternion"), 'state role "proprio/eef_rot": the model declares unrecognized rotation encoding "quaternion"; expected one of', "encoding_mismatch"),
        (A.State(A.EEF_ROT, encoding=["foo", "bar"]), 'state role "proprio/eef_rot": the model declares only unrecognized encodings', "encoding_mismatch"),
        (A.State(A.EEF_POS, index=3), 'state role "proprio/eef_pos": index 3 is out of range for the width-3 source feature "eef_pos"', "slice_out_of_range"),
        (A.State(A.EEF_POS, dim=4), 'state role "proprio/eef_pos": requested 4 dims but the source feature "eef_pos" has width 3', "slice_out_of_range"),
        (A.State(A.EEF_ROT, encoding="axis_angle", dim=4), 'requested 4 dims but the source feature "eef_quat" has width 3', "slice_out_of_range"),
        (A.State(A.EEF_POS, dtype="complex64"), 'model input "s": unknown dtype "complex64"', "unsupported"),
        (A.Concat(A.EEF_POS, A.EEF_POS, pad_to=4), 'model input "s" has 6 dims, more than pad_to=4', "dim_mismatch"),
        (A.Concat(A.EEF_POS, reshape=(2, 2)), 'model input "s": cannot reshape 3 values to [2, 2]', "dim_mismatch"),
        (A.State(A.EEF_POS, labels=("a", "b", "c")), 'state role "proprio/eef_pos": the model names labels [\'a\', \'b\', \'c\'] but the env leaf "eef_pos" is unlabeled', None),
        (A.State(A.EEF_POS, frame="tool"), 'role "proprio/eef_pos": the model expects frame "tool" but the env declares "world"', None),
        (A.State(A.EEF_POS, provenance="estimated"), 'role "proprio/eef_pos": the model expects provenance [\'estimated\'] but the env declares "sensed"', None),
        (A.Previous("action/missing"), 'model input "s": Previous("action/missing") reads the model\'s own previous action, but the model output has no actuator with that role', "missing_role"),
    ],
)  # fmt: skip
def test_state_planning_failures_ADP_77_80(leaf: Any, message: str, code: str | None) -> None:
    tags = std_tags()
    obs = dict(tags.observation)
    obs["eef_pos"] = A.StateTag(A.EEF_POS, frame="world", provenance="sensed")
    tags = A.EnvTags(obs, tags.action)
    _fails(lambda: resolve_std({"s": leaf}, tags=tags), message, code)


def test_env_declaring_only_unknown_encodings_fails_when_read_ADP_78() -> None:
    tags = A.EnvTags({"q": A.StateTag(A.EEF_ROT, encoding=["foo", "bar"])}, ACT1)
    _fails(lambda: A.resolve(tags, dict_space(q=box([4])), ACT1_SPACE, A.ModelSpec({"s": A.State(A.EEF_ROT, encoding="rot6d")}, ACT1)),
           'state role "proprio/eef_rot": the env declares only unrecognized encodings', "encoding_mismatch")  # fmt: skip


def test_gravity_xyz_cannot_be_converted_out_of_DELTA_66() -> None:
    tags = A.EnvTags({"g": A.StateTag(A.BASE_ROT, encoding="gravity_xyz")}, ACT1)
    spec = A.ModelSpec({"s": A.State(A.BASE_ROT, encoding="quat_xyzw")}, ACT1)
    _fails(
        lambda: A.resolve(tags, dict_space(g=box([3])), ACT1_SPACE, spec),
        "cannot convert encoding gravity_xyz to quat_xyzw",
    )


# -- text (ADP-82) ----------------------------------------------------------------------------------
def test_missing_text_without_fill_fails_ADP_82() -> None:
    _fails(lambda: _resolve({"p": A.StateTag("x/p")}, dict_space(p=box([1])), {"t": A.Text(A.INSTRUCTION)}),
           'model input "t" needs text role "text/instruction" but the env offers [] and no fill is set', "missing_role")  # fmt: skip


# -- actions (ADP-84..86) ---------------------------------------------------------------------------
def _act(env: A.Action, model: A.Action, width: int | None = None) -> A.Adapter:
    space = box([width if width is not None else env.dim])
    return _resolve(
        {"t": A.TextTag(A.INSTRUCTION)},
        dict_space(t=TEXT),
        TXT_IN,
        act_tags=env,
        act_space=space,
        output=model,
    )


@pytest.mark.parametrize(
    ("env", "model", "message", "code"),
    [
        (ACT1, A.Action(A.Actuator(A.ACTION_GRIPPER, 1), clip=(-1, 1)), "clip is an env-side actuator clamp; the model action declaration must leave it unset", None),
        (ACT1, A.Action(A.Actuator(A.ACTION_GRIPPER, 1), A.Actuator(A.ACTION_GRIPPER, 1)), 'duplicate model action role "action/gripper"', "duplicate"),
        (A.Action(A.Actuator(A.ACTION_GRIPPER, 1)), A.Action(A.Actuator(A.ACTION_DELTA_POS, 3)), 'env action needs role "action/gripper" but the model only outputs ["action/delta_eef_pos"]', "missing_role"),
        (A.Action(A.Actuator(A.ACTION_DELTA_POS, 3)), A.Action(A.Actuator(A.ACTION_DELTA_POS, 4)), 'action role "action/delta_eef_pos": model declares 4 dims but the role is 3-D by convention', "dim_mismatch"),
        (A.Action(A.Actuator(A.ACTION_DELTA_ROT, 3, encoding="axis_angle")), A.Action(A.Actuator(A.ACTION_DELTA_ROT, 5, encoding="rot6d")), 'action role "action/delta_eef_rot": dims 5->3 do not match encodings "rot6d"->"axis_angle"', "dim_mismatch"),
        (A.Action(A.Actuator(A.ACTION_DELTA_ROT, 3, encoding="axis_angle")), A.Action(A.Actuator(A.ACTION_DELTA_ROT, 3)), 'action role "action/delta_eef_rot": cannot convert encoding none to axis_angle; both sides must declare a rotation encoding', "encoding_mismatch"),
        (ACT1, A.Action(A.Actuator(A.ACTION_GRIPPER, 2)), 'action role "action/gripper": model outputs 2 dims but the env expects 1', "dim_mismatch"),
        (ACT1, A.Action(A.Actuator(A.ACTION_GRIPPER, 1, range=(0, 1), clip=True)), 'action role "action/gripper": clip is an env-side clamp; declare it on the env actuator', None),
        (A.Action(A.Actuator(A.ACTION_GRIPPER, 1, threshold=0.5)), A.Action(A.Actuator(A.ACTION_GRIPPER, 1)), 'action role "action/gripper": threshold requires a binary component (set binary=true)', None),
        (ACT1, A.Action(A.Actuator(A.ACTION_GRIPPER, 1, threshold=0.5)), "threshold requires a binary component", None),
        (A.Action(A.Actuator(A.ACTION_DELTA_POS, 3, part=A.RIGHT_ARM)), A.Action(A.Actuator(A.ACTION_DELTA_POS, 3)), 'env action needs role "action/delta_eef_pos" (part "right_arm") but the model only outputs ["action/delta_eef_pos"]', "missing_role"),
        (A.Action(A.Actuator(A.ACTION_DELTA_POS, 3)), A.Action(A.Actuator(A.ACTION_DELTA_POS, 3, part=A.LEFT_ARM)), 'but the model only outputs ["action/delta_eef_pos#left_arm"]', "missing_role"),
        (A.Action(A.Actuator(A.ACTION_EEF_POS, 3, frame="world")), A.Action(A.Actuator(A.ACTION_EEF_POS, 3, frame="tool")), 'role "action/eef_pos": the model expects frame "tool" but the env declares "world"', None),
        (A.Action(A.Actuator(A.ACTION_EEF_POS, 3, reference="current")), A.Action(A.Actuator(A.ACTION_EEF_POS, 3, reference="target")), 'role "action/eef_pos": the model expects reference "target" but the env declares "current"', None),
        (A.Action(A.Actuator("x/j", 2)), A.Action(A.Actuator("x/j", 2, labels=("a", "b"))), "the env actuator is unlabeled", None),
        (A.Action(A.Actuator("x/j", 2, labels=("a", "c"))), A.Action(A.Actuator("x/j", 2, labels=("a", "b"))), "do not match the env labels", None),
        (A.Action(A.Actuator("x/j", 2, range=(0, 1))), A.Action(A.Actuator("x/j", 2, range=(0, 0))), "has zero width", None),
    ],
)  # fmt: skip
def test_action_planning_failures_ADP_84_85(
    env: A.Action, model: A.Action, message: str, code: str | None
) -> None:
    _fails(lambda: _act(env, model), message, code)


def test_the_conformance_action_failures_keep_their_fragments() -> None:
    _fails(
        lambda: resolve_std(
            {"t": A.Text(A.INSTRUCTION)}, A.Action(A.Actuator(A.ACTION_DELTA_POS, 3))
        ),
        "env action needs role",
    )
    out = A.Action(*std_output().components[:2], A.Actuator(A.ACTION_GRIPPER, 2))
    _fails(lambda: resolve_std({"t": A.Text(A.INSTRUCTION)}, out), "model outputs 2 dims")


# -- parts (DELTA-60) ---------------------------------------------------------------------------------
BIMANUAL = A.EnvTags(
    {"l": A.StateTag(A.EEF_POS, part=A.LEFT_ARM), "r": A.StateTag(A.EEF_POS, part=A.RIGHT_ARM)},
    ACT1,
)
BIMANUAL_SPACE = dict_space(l=box([3]), r=box([3]))


def test_part_mismatches_fail_with_the_part_in_the_message_DELTA_60() -> None:
    spec = A.ModelSpec({"s": A.State(A.EEF_POS)}, ACT1)
    _fails(lambda: A.resolve(BIMANUAL, BIMANUAL_SPACE, ACT1_SPACE, spec),
           'model input "s" needs state role "proprio/eef_pos" but the env declares it under parts ["left_arm", "right_arm"]; declare part=')  # fmt: skip
    spec = A.ModelSpec({"s": A.State(A.EEF_POS, part=A.HEAD)}, ACT1)
    _fails(lambda: A.resolve(BIMANUAL, BIMANUAL_SPACE, ACT1_SPACE, spec),
           'model input "s" needs state role "proprio/eef_pos" (part "head") but the env offers ["proprio/eef_pos#left_arm", "proprio/eef_pos#right_arm"]')  # fmt: skip
    tags = A.EnvTags({"p": A.StateTag(A.EEF_POS)}, ACT1)
    spec = A.ModelSpec({"s": A.State(A.EEF_POS, part=A.LEFT_ARM)}, ACT1)
    _fails(
        lambda: A.resolve(tags, dict_space(p=box([3])), ACT1_SPACE, spec),
        '(part "left_arm") but the env offers ["proprio/eef_pos"]',
    )


def test_several_provenances_need_the_model_to_pin_one_DELTA_63() -> None:
    tags = A.EnvTags(
        {
            "a": A.StateTag(A.EEF_POS, provenance="sensed"),
            "b": A.StateTag(A.EEF_POS, provenance="estimated"),
        },
        ACT1,
    )
    space = dict_space(a=box([3]), b=box([3]))
    _fails(
        lambda: A.resolve(tags, space, ACT1_SPACE, A.ModelSpec({"s": A.State(A.EEF_POS)}, ACT1)),
        "declare provenance= to pin one",
    )
    ad = A.resolve(
        tags,
        space,
        ACT1_SPACE,
        A.ModelSpec({"s": A.State(A.EEF_POS, provenance="estimated")}, ACT1),
    )
    assert ad.transform_obs({"a": [1, 1, 1], "b": [2, 2, 2]})["s"].tolist() == [2, 2, 2]


# -- custom inputs and encodings (ADP-39..42, ADP-83) --------------------------------------------------
def test_untrusted_entrypoints_fail_resolve_ADP_83() -> None:
    spec_in = {"c": A.Custom(entrypoint="math:fabs")}
    err = _fails(lambda: resolve_std(spec_in), "trust_entrypoints", "untrusted_entrypoint")
    assert 'Custom(entrypoint="math:fabs")' in str(err)
    _fails(
        lambda: resolve_std(
            {"c": A.Custom(entrypoint="no_such_module_xyz:f")}, trust_entrypoints=True
        ),
        "cannot import entrypoint",
    )
    _fails(
        lambda: resolve_std({"c": A.Custom(entrypoint="math:pi")}, trust_entrypoints=True),
        "is not callable",
    )


def test_custom_encoding_guards_ADP_39_DELTA_68() -> None:
    def ident(v: Any) -> Any:
        return v

    to_only = A.CustomEncoding("quat_xyzw", to_base=ident)
    both = A.CustomEncoding("quat_xyzw", from_base=ident, to_base=ident)
    _fails(
        lambda: resolve_std({"s": A.State(A.EEF_ROT, encoding=to_only)}),
        "on the observation side needs from_base",
    )
    _fails(
        lambda: resolve_std({"s": A.State(A.EEF_ROT, encoding=both, index=1)}),
        "cannot set index or optional",
    )
    _fails(
        lambda: resolve_std({"s": A.State(A.EEF_ROT, encoding=both, dim=3)}),
        "may set dim only to restate its width 4",
    )
    _fails(
        lambda: resolve_std({"s": A.State(A.EEF_ROT, encoding=both, container="list")}),
        'container="list"',
    )
    wire = A.CustomEncoding("quat_xyzw", from_base="<local>", to_base="<local>")
    _fails(
        lambda: resolve_std({"s": A.State(A.EEF_ROT, encoding=wire)}),
        "not an in-process callable",
        "untrusted_entrypoint",
    )
    from_only = A.CustomEncoding("axis_angle", from_base=ident)
    out = A.Action(
        *std_output().components[:1],
        A.Actuator(A.ACTION_DELTA_ROT, 3, encoding=from_only),
        std_output().components[2],
    )
    _fails(lambda: resolve_std({"t": A.Text(A.INSTRUCTION)}, out), "needs to_base")
    bad = A.CustomEncoding("quat_xyzw", from_base=lambda v: v * 2, to_base=ident)
    err = _fails(
        lambda: resolve_std({"s": A.State(A.EEF_ROT, encoding=bad)}), "check_inverse=False"
    )
    assert "to_base(from_base(p)) != p" in str(err)
    resolve_std({"s": A.State(A.EEF_ROT, encoding=bad)}, check_inverse=False)  # opting out works
    boom = A.CustomEncoding("quat_xyzw", from_base=lambda v: 1 / 0, to_base=ident)
    _fails(lambda: resolve_std({"s": A.State(A.EEF_ROT, encoding=boom)}), "check_inverse=False")


def test_env_side_custom_encodings_are_refused() -> None:
    enc = A.CustomEncoding("axis_angle", from_base=abs, to_base=abs)
    env = A.Action(A.Actuator(A.ACTION_DELTA_ROT, 3, encoding=enc))
    _fails(
        lambda: _act(env, A.Action(A.Actuator(A.ACTION_DELTA_ROT, 3, encoding="axis_angle"))),
        "model-side shims",
    )


def test_the_obs_key_is_reserved_for_flat_observations_ADP_97() -> None:
    _fails(
        lambda: _resolve(
            {"<obs>": A.StateTag("x/p")}, dict_space(**{"<obs>": box([1])}), {"s": A.Concat("x/p")}
        ),
        '"<obs>" is reserved',
    )


def test_resolve_rejects_non_spec_arguments() -> None:
    _fails(lambda: A.resolve("tags", box([1]), box([1]), A.ModelSpec(TXT_IN, ACT1)), "EnvTags")
    _fails(
        lambda: A.resolve(std_tags(), object(), STD_ACTION_SPACE, A.ModelSpec(TXT_IN, ACT1)),
        "Gymnasium space",
    )
    _fails(lambda: A.resolve(std_tags(), dict_space(), STD_ACTION_SPACE, 3), "ModelSpec")
