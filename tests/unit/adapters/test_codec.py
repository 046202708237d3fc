"""Wire format: canonical to_dict/from_dict/to_json/from_json, strict and tolerant doors (ADP-44..54)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

import rlmesh.adapters as A
from rlmesh.adapters._codec_parse import unknown_fields
from rlmesh.adapters._env_tags import env_tags_from_dict
from rlmesh.adapters._model_spec import model_spec_from_dict

ACT = A.Action(A.Actuator(A.ACTION_GRIPPER, dim=1))


def env_doc(obs: Any, action: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "observation": obs,
        "action": action or {"components": [{"role": "action/gripper", "dim": 1}], "clip": None},
    }


def model_doc(inp: Any) -> dict[str, Any]:
    return {
        "input": inp,
        "output": {"components": [{"role": "action/gripper", "dim": 1}], "clip": None},
    }


def test_env_tags_canonical_form_emits_the_always_keys() -> None:
    tags = A.EnvTags(
        {
            "cam": A.ImageTag(A.IMAGE_PRIMARY),
            "q": A.StateTag(A.EEF_ROT, encoding="quat_xyzw"),
            "t": A.TextTag(A.INSTRUCTION),
        },
        A.Action(A.Actuator(A.ACTION_GRIPPER, dim=1, range=(-1, 1)), clip=(-1, 1)),
    )
    assert tags.to_dict() == {
        "observation": {
            "cam": {
                "type": "image",
                "role": "image/primary",
                "layout": "hwc",
                "upside_down": False,
            },
            "q": {
                "type": "state",
                "role": "proprio/eef_rot",
                "encoding": "quat_xyzw",
                "range": None,
            },
            "t": {"type": "text", "role": "text/instruction"},
        },
        "action": {
            "components": [
                {
                    "role": "action/gripper",
                    "dim": 1,
                    "encoding": None,
                    "range": [-1.0, 1.0],
                    "binary": False,
                }
            ],
            "clip": [-1.0, 1.0],
        },
    }


def test_actuator_optional_keys_appear_only_when_set_ADP_46() -> None:
    a = A.Actuator("x/a", 2, scale=2, invert=True, threshold=0.1, binary=True, range=(0, 1), clip=True,
                   fill=0.5, optional=True, offset=(0.1, 0.2), frame="world", reference="target", part="left_arm",
                   labels=("u", "v"))  # fmt: skip
    d = A.EnvTags({}, A.Action(a)).to_dict()["action"]["components"][0]
    assert d == {
        "role": "x/a", "dim": 2, "encoding": None, "range": [0.0, 1.0], "binary": True, "scale": 2.0,
        "axis_offset": [0.1, 0.2], "fill": 0.5, "invert": True, "threshold": 0.1, "clip": True, "optional": True,
        "frame": "world", "reference": "target", "part": "left_arm", "labels": ["u", "v"],
    }  # fmt: skip
    opaque = A.EnvTags({}, A.Action(A.Actuator(dim=3, fill=0.5))).to_dict()["action"]["components"][
        0
    ]
    assert opaque == {"dim": 3, "encoding": None, "range": None, "binary": False, "fill": 0.5}


def test_model_image_canonical_form_ADP_46() -> None:
    spec = A.ModelSpec(A.Image(A.IMAGE_PRIMARY), ACT)
    assert spec.to_dict()["input"] == {
        "type": "image", "role": "image/primary", "height": None, "width": None, "layout": "hwc", "dtype": "uint8",
        "normalize": False, "lead_dims": 0, "upside_down": False, "resample": "bilinear",
    }  # fmt: skip
    full = A.Image(A.IMAGE_PRIMARY, size=4, channels=3, allow_upscale=True, fit=["crop", "pad"], optional=True,
                   fill=7, stack=2, normalize=(-1, 1), crop=0.9, crop_mode="slice", jpeg_quality=90,
                   channel_order="bgr", render=64, stack_pad="black", part="head")  # fmt: skip
    d = A.ModelSpec(full, ACT).to_dict()["input"]
    for k, v in {"channels": 3, "allow_upscale": True, "fit": ["crop", "pad"], "optional": True, "fill": 7, "stack": 2,
                 "normalize": [-1.0, 1.0], "crop": 0.9, "crop_mode": "slice", "jpeg_quality": 90,
                 "channel_order": "bgr", "render": [64, 64], "stack_pad": "black", "part": "head"}.items():  # fmt: skip
        assert d[k] == v


def test_state_parts_render_as_bare_role_strings_unless_parameterized_ADP_46() -> None:
    spec = A.ModelSpec(
        A.Concat(
            A.EEF_POS, A.State(A.EEF_ROT, encoding="rot6d"), A.Constant(dim=2, fill=1.0), pad_to=12
        ),
        ACT,
    )
    assert spec.to_dict()["input"] == {
        "type": "state",
        "components": [
            "proprio/eef_pos",
            {"role": "proprio/eef_rot", "encoding": "rot6d"},
            {"dim": 2, "fill": 1.0},
        ],
        "dtype": "float32",
        "pad_to": 12,
    }


def test_state_and_single_part_concat_share_one_wire_form_ADP_34() -> None:
    s = A.ModelSpec(A.State(A.EEF_POS, dim=2), ACT)
    back = A.ModelSpec.from_dict(s.to_dict())
    assert isinstance(back.input, A.State) and back == s
    c = A.ModelSpec(A.Concat(A.EEF_POS), ACT)
    assert isinstance(A.ModelSpec.from_dict(c.to_dict()).input, A.Concat)
    assert A.ModelSpec(A.State(A.EEF_POS), ACT) == c


def test_text_and_previous_and_post_rotate_round_trip() -> None:
    rot = A.Rotation.from_matrix([[0, -1, 0], [1, 0, 0], [0, 0, 1]])
    spec = A.ModelSpec(
        {
            "t": A.Text(A.INSTRUCTION, container="list", fill="go"),
            "s": A.Concat(A.State(A.EEF_ROT, encoding=["rot6d", "quat_xyzw"], post_rotate=rot, scale=(1, 2, 3, 4, 5, 6),
                                  offset=0.5, frame="world", provenance=["sensed", "estimated"], part="left_arm"),
                          A.Previous(A.ACTION_GRIPPER, fill=-1.0), clip=(-2, 2), reshape=(-1,), container="list"),
        },
        A.Action(A.Actuator(A.ACTION_GRIPPER, dim=1)),
    )  # fmt: skip
    doc = spec.to_dict()
    assert doc["input"]["t"] == {
        "type": "text",
        "role": "text/instruction",
        "container": "list",
        "fill": "go",
    }
    assert doc["input"]["s"]["components"][1] == {
        "role": "action/gripper",
        "source": "action",
        "fill": -1.0,
    }
    assert A.ModelSpec.from_dict(doc) == spec
    assert A.ModelSpec.from_dict(doc).to_dict() == doc


def test_split_and_fields_round_trip_with_skips() -> None:
    tags = A.EnvTags(
        A.Split(
            A.Field(A.EEF_POS, 3, frame="world"),
            A.Field(dim=2),
            A.Field(A.JOINT_POS, 2, labels=("a", "b")),
        ),
        ACT,
    )
    doc = tags.to_dict()
    assert doc["observation"]["fields"][1] == {
        "role": None,
        "dim": 2,
        "encoding": None,
        "range": None,
    }
    assert A.EnvTags.from_dict(doc) == tags


def test_to_json_sorts_keys_and_from_json_inverts_it_ADP_47() -> None:
    tags = A.EnvTags({"b": A.TextTag("x/b"), "a": A.TextTag("x/a")}, ACT)
    text = tags.to_json()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    assert A.EnvTags.from_json(text) == tags


def test_dict_node_key_order_is_ignored_by_equality_and_hash_ADP_27() -> None:
    t1 = A.EnvTags({"a": A.TextTag("x/a"), "b": A.TextTag("x/b")}, ACT)
    t2 = A.EnvTags({"b": A.TextTag("x/b"), "a": A.TextTag("x/a")}, ACT)
    assert t1 == t2 and hash(t1) == hash(t2)
    s1 = A.ModelSpec({"a": A.Text("x/a"), "b": A.Text("x/b")}, ACT)
    s2 = A.ModelSpec({"b": A.Text("x/b"), "a": A.Text("x/a")}, ACT)
    assert s1 == s2 and hash(s1) == hash(s2)


def test_tuple_nodes_travel_as_json_arrays_ADP_44() -> None:
    spec = A.ModelSpec((A.Text("x/a"), {"n": A.Text("x/b")}), ACT)
    doc = spec.to_dict()
    assert isinstance(doc["input"], list)
    assert A.ModelSpec.from_dict(doc).input[1]["n"] == A.Text("x/b")


def test_metadata_keys_and_from_metadata_ADP_49() -> None:
    tags = A.EnvTags({"t": A.TextTag(A.INSTRUCTION)}, ACT)
    md = tags.to_metadata()
    assert list(md) == ["rlmesh.adapters.v1.env_tags"] == [A.ENV_METADATA_KEY]
    assert A.EnvTags.from_metadata(md) == tags
    assert A.EnvTags.from_metadata({}) is None
    with pytest.raises(A.AdapterResolutionError, match="mapping"):
        A.EnvTags.from_metadata({A.ENV_METADATA_KEY: "nope"})
    spec = A.ModelSpec(A.Text(A.INSTRUCTION), ACT)
    assert A.ModelSpec.from_metadata(spec.to_metadata()) == spec
    assert A.MODEL_METADATA_KEY == "rlmesh.adapters.v1.model_spec"


def test_custom_inputs_refuse_serialization_ADP_48() -> None:
    with pytest.raises(ValueError, match="cannot be serialized"):
        A.ModelSpec(A.Custom(transform=lambda o: 1), ACT).to_json()
    with pytest.raises(ValueError, match="cannot be published"):
        A.ModelSpec({"x": A.Custom(entrypoint="math:sqrt")}, ACT).to_metadata()
    with pytest.raises(A.AdapterResolutionError, match="placeholder"):
        A.ModelSpec.from_dict(model_doc({"type": "custom", "transform": "host:1"}))
    assert A.ModelSpec.from_dict(
        model_doc({"type": "custom", "transform": "math:sqrt"})
    ).input == A.Custom(entrypoint="math:sqrt")


def test_custom_encoding_wire_form_marks_local_arms_ADP_42() -> None:
    enc = A.CustomEncoding("quat_xyzw", from_base=lambda v: v, to_base=lambda v: v, name="mine")
    doc = A.ModelSpec(
        A.State(A.EEF_ROT, encoding=enc), A.Action(A.Actuator(A.ACTION_DELTA_ROT, 4, encoding=enc))
    ).to_dict()
    assert doc["input"]["components"][0]["encoding"] == {
        "base": "quat_xyzw",
        "name": "mine",
        "from_base": "<local>",
        "to_base": "<local>",
    }
    back = A.ModelSpec.from_dict(doc)
    assert back.output.components[0].encoding == A.CustomEncoding(
        "quat_xyzw", "<local>", "<local>", "mine"
    )


def test_to_json_refuses_nan_ADP_47() -> None:
    from rlmesh.adapters._codec import dumps

    with pytest.raises(ValueError, match="NaN"):
        dumps({"x": float("nan")})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("dim", -1, "must be a non-negative integer, got -1"),
        ("dim", 3.0, "non-negative integer"),
        ("dim", "3", "non-negative integer"),
        ("dim", 16777217, "no larger than"),
        ("range", [0.0], "range must be a pair of numbers [min, max], got 1"),
        ("range", [0.0, "a"], "expected a number"),
        ("range", [1.0, 0.0], "must have min <= max"),
        ("scale", "big", "expected a number"),
        ("threshold", [1], "expected a number"),
        ("encoding", ["axis_angle"], "not a list"),
    ],
)
def test_actuator_parse_errors_name_the_problem_ADP_50_51(
    field: str, value: Any, message: str
) -> None:
    comp = {"role": "action/gripper", "dim": 1, field: value}
    with pytest.raises(A.AdapterResolutionError, match=_re(message)):
        A.EnvTags.from_dict(env_doc({}, {"components": [comp], "clip": None}))


def _re(s: str) -> str:
    import re

    return re.escape(s)


@pytest.mark.parametrize(
    ("leaf", "message"),
    [
        (
            {"type": "image", "role": "image/primary", "stack": 65},
            "stack must be between 1 and 64, got 65",
        ),
        (
            {"type": "image", "role": "image/primary", "stack": 0},
            "stack must be between 1 and 64, got 0",
        ),
        (
            {"type": "image", "role": "image/primary", "height": -1},
            "must be a non-negative integer, got -1",
        ),
        ({"type": "image", "role": "image/primary", "optional": True, "fill": 300}, "0..255"),
        ({"type": "image", "role": "image/primary", "fill": 3}, "fill only applies"),
        ({"type": "image", "role": "image/primary", "layout": "whc"}, "layout"),
        ({"type": "state", "components": []}, "at least one component"),
        (
            {"type": "state", "components": [{"role": "a", "dim": 1, "index": 0}]},
            "both dim and index",
        ),
        ({"type": "state", "components": ["a"], "reshape": [1.5]}, "a whole number"),
        ({"type": "state", "components": ["a"], "reshape": [-1, -1]}, "at most one -1"),
        ({"type": "state", "components": ["a"], "reshape": [-2]}, "infer"),
        (
            {"type": "state", "components": [{"role": "a", "bogus": 1}]},
            'unrecognized field "bogus"',
        ),
        (
            {"type": "state", "components": [{"role": "a", "encoding": {"base": "rot6d"}}]},
            "at least one of from_base",
        ),
        (
            {
                "type": "state",
                "components": [
                    {"role": "a", "encoding": {"base": "rot6d", "from_base": "m:f", "x": 1}}
                ],
            },
            'unrecognized field "x"',
        ),
        ({"type": "state", "components": [{"dim": 2, "fill": 1.0}]}, "only Constant"),
        ({"type": "text", "role": "t", "container": "tuple"}, "container"),
        (
            {"type": "mystery", "role": "t"},
            'declares unrecognized kind "mystery"; this core cannot build it',
        ),
        ({"type": "text", "role": "t", "bogus": 1}, 'declares unrecognized field "bogus"'),
        ({"type": 3, "role": "t"}, '"type" must be a string'),
    ],
)
def test_model_leaf_parse_errors_ADP_50_53(leaf: dict[str, Any], message: str) -> None:
    with pytest.raises(A.AdapterResolutionError, match=_re(message)):
        A.ModelSpec.from_dict(model_doc({"x": leaf}))


@pytest.mark.parametrize(
    ("obs", "message"),
    [
        ({"type": "split", "fields": []}, "at least one field"),
        (
            {"type": "split", "fields": [{"role": "a", "dim": 1}, {"role": "a", "dim": 1}]},
            "more than once",
        ),
        ({"type": "split", "fields": [{"role": "a", "dim": 0}]}, "state field dim must be >= 1"),
        ({"type": "split", "fields": [{"role": None, "dim": 1, "encoding": "rot6d"}]}, "role-less"),
        (
            {"type": "split", "fields": [{"role": "a", "dim": 1, "oops": 1}]},
            'unrecognized field "oops"',
        ),
        (
            {"type": "split", "fields": [{"role": "a", "dim": 1}], "extra": 1},
            'unrecognized field "extra"',
        ),
        ({"type": "state", "role": "r", "encoding": []}, "at least one encoding"),
        ({"type": "image", "role": "r", "upside_down": "yes"}, "true or false"),
    ],
)
def test_env_leaf_parse_errors_ADP_53(obs: dict[str, Any], message: str) -> None:
    with pytest.raises(A.AdapterResolutionError, match=_re(message)):
        A.EnvTags.from_dict(env_doc(obs))


def test_action_envelope_is_strict_and_roles_must_be_unique_ADP_28_53() -> None:
    dup = {"components": [{"role": "a", "dim": 1}, {"role": "a", "dim": 1}], "clip": None}
    with pytest.raises(A.AdapterResolutionError, match="more than once"):
        A.EnvTags.from_dict(env_doc({}, dup))
    with pytest.raises(A.AdapterResolutionError, match='unrecognized field "extra"'):
        A.EnvTags.from_dict(env_doc({}, {"components": [], "clip": None, "extra": 1}))
    with pytest.raises(A.AdapterResolutionError, match="dim"):
        A.EnvTags.from_dict(env_doc({}, {"components": [{"role": "a"}], "clip": None}))
    assert (
        A.EnvTags.from_dict(env_doc({}, {"components": [], "clip": None})).action.components == ()
    )


def test_extension_prefixed_fields_are_ignored_by_the_strict_door_ADP_6() -> None:
    for key in ("x-note", "ext.vendor", "ext-old"):
        tags = A.EnvTags.from_dict(env_doc({"t": {"type": "text", "role": "x/t", key: 1}}))
        assert tags.observation["t"] == A.TextTag("x/t")


def test_tolerant_door_keeps_unknown_kinds_and_taints_unknown_fields_ADP_54() -> None:
    doc = env_doc(
        {
            "d": {"type": "depth", "role": "x/depth"},
            "t": {"type": "text", "role": "x/t", "bogus": 1},
        }
    )
    tags = env_tags_from_dict(doc, strict=False)
    assert tags.observation["d"].kind == "depth" and tags.observation["d"].role == "x/depth"
    assert unknown_fields(tags.observation["t"]) == ("bogus",)
    spec = model_spec_from_dict(model_doc({"v": {"type": "voxels"}}), strict=False)
    assert spec.input["v"].kind == "voxels"


def test_type_key_is_reserved_in_dict_nodes_ADP_44() -> None:
    with pytest.raises(ValueError, match="reserved"):
        A.EnvTags({"type": A.TextTag("x/t")}, ACT)
    with pytest.raises(ValueError, match="reserved"):
        A.ModelSpec({"type": A.Text("x/t")}, ACT)


# -- hypothesis round trips ------------------------------------------------------------------
roles = st.sampled_from([A.EEF_POS, A.GRIPPER_POS, A.JOINT_POS, "x/custom", A.EEF_ROT])
rng = st.one_of(st.none(), st.tuples(st.floats(-5, 0), st.floats(0, 5)))
encs = st.one_of(
    st.none(), st.sampled_from(["quat_xyzw", "rot6d"]), st.just(("rot6d", "axis_angle"))
)


@st.composite
def actuators(draw: st.DrawFn) -> A.Actuator:
    if draw(st.booleans()):
        return A.Actuator(dim=draw(st.integers(1, 4)), fill=draw(st.floats(-1, 1)))
    optional = draw(st.booleans())
    binary = draw(st.booleans())
    return A.Actuator(
        f"action/{draw(st.sampled_from(['a', 'b', 'c']))}{draw(st.integers(0, 99))}",
        draw(st.integers(1, 4)),
        range=draw(rng),
        binary=binary,
        scale=draw(st.one_of(st.none(), st.floats(-3, 3))),
        invert=draw(st.booleans()),
        threshold=draw(st.one_of(st.none(), st.floats(-1, 1))) if binary else None,
        fill=draw(st.floats(-1, 1)) if optional else 0.0,
        optional=optional,
        part=draw(st.one_of(st.none(), st.sampled_from(A.PARTS))),
    )


@st.composite
def env_tags(draw: st.DrawFn) -> A.EnvTags:
    obs: dict[str, Any] = {}
    if draw(st.booleans()):
        obs["cam"] = A.ImageTag(
            A.IMAGE_PRIMARY, draw(st.sampled_from(["hwc", "chw"])), draw(st.booleans())
        )
    if draw(st.booleans()):
        obs["s"] = A.StateTag(
            draw(roles), range=draw(rng), part=draw(st.one_of(st.none(), st.just("left_arm")))
        )
    if draw(st.booleans()):
        obs["t"] = A.TextTag(A.INSTRUCTION)
    if draw(st.booleans()):
        obs["flat"] = A.Split(
            A.Field("x/a", draw(st.integers(1, 3)), range=draw(rng)), A.Field(dim=2)
        )
    acts = draw(st.lists(actuators(), min_size=1, max_size=3, unique_by=lambda a: a.role or id(a)))
    return A.EnvTags(obs, A.Action(*acts, clip=draw(rng)))


@st.composite
def model_specs(draw: st.DrawFn) -> A.ModelSpec:
    inp: dict[str, Any] = {}
    if draw(st.booleans()):
        inp["img"] = A.Image(A.IMAGE_PRIMARY, height=draw(st.one_of(st.none(), st.integers(1, 64))),
                             normalize=draw(st.one_of(st.booleans(), st.just((-1.0, 1.0)))),
                             stack=draw(st.integers(1, 4)), fit=draw(st.one_of(st.none(), st.just("crop"))))  # fmt: skip
    parts = draw(st.lists(st.one_of(roles, st.builds(lambda r, d: A.State(r, dim=d), roles, st.integers(1, 3))),
                          min_size=1, max_size=3))  # fmt: skip
    inp["state"] = A.Concat(*parts, pad_to=draw(st.one_of(st.none(), st.integers(10, 20))))
    inp["txt"] = A.Text(A.INSTRUCTION, fill=draw(st.one_of(st.none(), st.text(max_size=5))))
    acts = draw(st.lists(actuators(), min_size=1, max_size=3, unique_by=lambda a: a.role or id(a)))
    return A.ModelSpec(inp, A.Action(*acts))


@settings(max_examples=60, deadline=None)
@given(env_tags())
def test_env_tags_round_trip_through_dict_and_json(tags: A.EnvTags) -> None:
    doc = tags.to_dict()
    assert A.EnvTags.from_dict(doc) == tags
    assert A.EnvTags.from_dict(doc).to_dict() == doc  # fixed point (ADP-47)
    assert A.EnvTags.from_json(tags.to_json()) == tags


@settings(max_examples=60, deadline=None)
@given(model_specs())
def test_model_specs_round_trip_through_dict_and_json(spec: A.ModelSpec) -> None:
    doc = spec.to_dict()
    assert A.ModelSpec.from_dict(doc) == spec
    assert A.ModelSpec.from_dict(doc).to_dict() == doc
    assert A.ModelSpec.from_json(spec.to_json()) == spec


def test_tags_and_specs_pickle_and_copy_by_value() -> None:
    import copy
    import pickle

    tags = A.EnvTags({"cam": A.ImageTag(A.IMAGE_PRIMARY), "s": A.Split(A.Field(A.EEF_POS, 3))}, ACT)
    spec = A.ModelSpec(
        {"i": A.Image(A.IMAGE_PRIMARY, size=4, stack=2, stride=1), "s": A.Concat(A.EEF_POS)}, ACT
    )
    for obj in (tags, spec):
        assert pickle.loads(pickle.dumps(obj)) == obj
        assert copy.deepcopy(obj) == obj
