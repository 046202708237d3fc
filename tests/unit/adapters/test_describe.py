"""describe()/explain() grammar and advisories ordering (ADP-5, ADP-43, ADP-87..96)."""

from __future__ import annotations

import rlmesh.adapters as A
from rlmesh.adapters._roles import fmt_pair, fmt_scalar

from ._helpers import TEXT, box, dict_space, resolve_std, std_output

ACT1 = A.Action(A.Actuator("x/a", 1))


def test_float_rendering_styles_ADP_88() -> None:
    assert fmt_pair((-1, 1)) == "(-1.0, 1.0)" and fmt_pair((0.5, 0.25)) == "(0.5, 0.25)"
    assert [fmt_scalar(x) for x in (2.0, 0.5, -1.0, 0.0, 1e20)] == ["2", "0.5", "-1", "0", "1e+20"]


def test_full_image_step_list_ADP_93() -> None:
    tags = A.EnvTags(
        {"obs": {"cam": A.ImageTag(A.IMAGE_PRIMARY, layout="chw", upside_down=True)}}, ACT1
    )
    space = dict_space(obs=dict_space(cam=box([3, 224, 224], "uint8")))
    leaf = A.Image(
        A.IMAGE_PRIMARY, size=112, normalize=(-1, 1), dtype="float32", layout="chw", lead_dims=1
    )
    ad = A.resolve(tags, space, box([1]), A.ModelSpec({"pixels": leaf}, ACT1))
    assert ad.describe().splitlines()[1] == (
        '  "pixels" <- image "obs.cam" (chw->hwc, flip 180, resize 112x112 (bilinear), normalize [-1, 1], '
        "float32, hwc->chw, +1 lead dims)"
    )


def test_describe_and_explain_are_the_same_text_without_a_trailing_newline_ADP_5_87() -> None:
    ad = resolve_std({"t": A.Text(A.INSTRUCTION)})
    assert ad.describe() == ad.explain() == str(ad)
    assert not ad.describe().endswith("\n")
    assert ad.describe() == "\n".join([
        "observation:",
        '  "t" <- text "instruction"',
        "action:",
        '  "action/delta_eef_pos" <- model[0:3]',
        '  "action/delta_eef_rot" <- model[3:6]',
        '  "action/gripper" <- model[6:7]',
        "  clip to (-1.0, 1.0)",
    ])  # fmt: skip


def test_env_side_corrections_render_in_order_but_model_side_ones_do_not_ADP_92() -> None:
    env = A.Action(
        A.Actuator(
            A.ACTION_GRIPPER,
            1,
            scale=2,
            invert=True,
            threshold=0.5,
            binary=True,
            range=(-1, 1),
            clip=True,
        )
    )
    model = A.Action(A.Actuator(A.ACTION_GRIPPER, 1, scale=3, invert=True, range=(0, 1)))
    ad = A.resolve(
        A.EnvTags({"t": A.TextTag("x/t")}, env),
        dict_space(t=TEXT),
        box([1]),
        A.ModelSpec(A.Text("x/t"), model),
    )
    assert ad.describe().splitlines()[3] == (
        '  "action/gripper" <- model[0:1] (range (0.0, 1.0)->(-1.0, 1.0)) (*2) (invert) (-0.5) (sign)'
    )


def test_state_pieces_render_slices_conversions_and_ranges_ADP_90() -> None:
    tags = A.EnvTags(
        {"flat": A.Split(A.Field(A.EEF_POS, 3), A.Field(dim=1), A.Field(A.EEF_ROT, 4, encoding="quat_xyzw")),
         "g": A.StateTag(A.GRIPPER_POS, range=(0, 0.08))},
        ACT1,
    )  # fmt: skip
    spec = A.ModelSpec({"s": A.Concat(A.State(A.EEF_POS, dim=3), A.State(A.EEF_POS, dim=2),
                                      A.State(A.EEF_ROT, encoding="axis_angle", index=0),
                                      A.State(A.GRIPPER_POS, range=(-1, 1)), A.State("x/z", dim=2, optional=True),
                                      pad_to=16)}, ACT1)  # fmt: skip
    ad = A.resolve(tags, dict_space(flat=box([8]), g=box([1])), box([1]), spec)
    assert ad.describe().splitlines()[1] == (
        '  "s" <- concat(flat[0:3], flat[0:3][:2], flat[4:8] (quat_xyzw->axis_angle)[0], '
        "g (range (0.0, 0.08)->(-1.0, 1.0)), zeros(2)), pad to 16"
    )


def test_custom_inputs_and_text_fill_render_ADP_91() -> None:
    ad = resolve_std({"c": A.Custom(transform=lambda obs: 1), "t": A.Text("x/none", fill="hi")})
    lines = ad.describe().splitlines()
    assert lines[1:3] == ['  "c" <- custom transform', '  "t" <- text fill "hi"']


def test_placements_render_dotted_keys_and_indices_in_sorted_key_order_ADP_67() -> None:
    ad = resolve_std(
        {"z": A.Text(A.INSTRUCTION), "a": {"b": (A.Text(A.INSTRUCTION), A.Text(A.INSTRUCTION))}}
    )
    lines = ad.describe().splitlines()
    assert lines[1:4] == [
        '  "a.b[0]" <- text "instruction"',
        '  "a.b[1]" <- text "instruction"',
        '  "z" <- text "instruction"',
    ]


def test_resolve_time_advisories_appear_under_dropped_sorted_ADP_87_95() -> None:
    tags = A.EnvTags({"cam": A.ImageTag(A.IMAGE_PRIMARY), "g": A.StateTag(A.GRIPPER_POS)}, ACT1)
    spec = A.ModelSpec(
        {"i": A.Image(A.IMAGE_WRIST), "s": A.State(A.GRIPPER_POS, range=(0, 1))}, ACT1
    )
    ad = A.resolve(tags, dict_space(cam=box([2, 2, 3], "uint8"), g=box([1])), box([1]), spec)
    text = ad.describe()
    dropped = text.split("dropped:\n")[1].splitlines()
    assert len(dropped) == 2 and dropped == sorted(dropped)
    assert all(line.startswith("  ") for line in dropped)


def test_join_and_data_loss_advisories_never_appear_in_describe_ADP_66_94() -> None:
    tags = A.EnvTags(
        {"cam": A.ImageTag(A.IMAGE_PRIMARY), "s": A.StateTag("unregistered/role")}, ACT1
    )
    spec = A.ModelSpec(
        {
            "i": A.Image(A.IMAGE_PRIMARY, height=4, width=2, fit="crop"),
            "o": A.State("x/o", dim=1, optional=True),
        },
        ACT1,
    )
    ad = A.resolve(tags, dict_space(cam=box([4, 4, 3], "uint8"), s=box([1])), box([1]), spec)
    assert "dropped:" not in ad.describe()
    kinds = [(a.severity, a.message) for a in ad.advisories()]
    assert (
        kinds[0][0] == "info" and "role registry" in kinds[0][1]
    )  # join advisories come before data-loss notes
    assert any("aspect crop drops edge pixels" in m for _, m in kinds)
    assert any("zero-filled" in m for _, m in kinds)


def test_layout_hint_advisory_for_a_channel_first_looking_image_ADP_66() -> None:
    tags = A.EnvTags({"cam": A.ImageTag(A.IMAGE_PRIMARY)}, ACT1)
    ad = A.resolve(
        tags,
        dict_space(cam=box([3, 32, 32], "uint8")),
        box([1]),
        A.ModelSpec({"i": A.Image(A.IMAGE_PRIMARY)}, ACT1),
    )
    (hint,) = ad.advisories()
    assert hint.message == (
        'image "image/primary": shape implies 32 channels under layout=hwc; this looks like chw -- declare layout="chw" if so'
    )


def test_advisory_value_semantics_ADP_94() -> None:
    a = A.Advisory("info", "hello")
    assert str(a) == "hello" and a == A.Advisory("info", "hello") and a.severity == "info"
    import pytest

    with pytest.raises(ValueError, match="severity"):
        A.Advisory("warning", "x")


def test_part_markers_follow_bound_pieces_DELTA_60() -> None:
    tags = A.EnvTags(
        {"r": A.StateTag(A.EEF_POS, part=A.RIGHT_ARM), "l": A.StateTag(A.EEF_POS, part=A.LEFT_ARM)},
        ACT1,
    )
    spec = A.ModelSpec({"s": A.Concat(A.State(A.EEF_POS, part=A.RIGHT_ARM), A.State(A.EEF_POS, part=A.LEFT_ARM),
                                      A.State(A.GRIPPER_POS, part=A.LEFT_ARM, dim=3, optional=True))}, ACT1)  # fmt: skip
    ad = A.resolve(tags, dict_space(r=box([3]), l=box([3])), box([1]), spec)
    assert (
        ad.describe().splitlines()[1]
        == '  "s" <- concat(r#right_arm, l#left_arm, zeros(3)#left_arm)'
    )
    assert ad.transform_obs({"r": [1, 1, 1], "l": [2, 2, 2]})["s"].tolist() == [
        1,
        1,
        1,
        2,
        2,
        2,
        0,
        0,
        0,
    ]


def test_the_conformance_pairing_renders_exactly() -> None:
    spec_in = {
        "image": A.Image(A.IMAGE_PRIMARY, layout="chw", dtype="float32", normalize=True),
        "state": A.Concat(
            A.State(A.EEF_POS, dim=3),
            A.State(A.EEF_ROT, encoding="rot6d"),
            A.State(A.GRIPPER_POS, dim=1),
        ),
    }
    out = A.Action(
        *std_output().components[:1],
        A.Actuator(A.ACTION_DELTA_ROT, 6, encoding="rot6d"),
        std_output().components[2],
    )
    lines = resolve_std(spec_in, out).describe().splitlines()
    assert lines[1] == '  "image" <- image "cam" (normalize /255, float32, hwc->chw)'
    assert lines[2] == '  "state" <- concat(eef_pos[:3], eef_quat (quat_xyzw->rot6d), gripper[:1])'
    assert lines[5] == '  "action/delta_eef_rot" <- model[3:9] (rot6d->axis_angle)'
