"""transform_action: slicing, conversion, range maps, gripper conventions, clipping (ADP-110..112, DELTA-64/65)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlmesh.adapters as A

from ._helpers import TEXT, box, dict_space

OBS = {"t": A.TextTag(A.INSTRUCTION)}
OBS_SPACE = dict_space(t=TEXT)
IN = A.Text(A.INSTRUCTION, fill="x")


def _adapter(env: A.Action, model: A.Action, space: Any = None) -> A.Adapter:
    return A.resolve(
        A.EnvTags(OBS, env), OBS_SPACE, space or box([env.dim]), A.ModelSpec(IN, model)
    )


def _act(env: A.Action, model: A.Action, out: Any, space: Any = None) -> list[float]:
    result = _adapter(env, model, space).transform_action(out)
    assert result.dtype == np.float32 and result.ndim == 1
    return [float(x) for x in result]


G = A.ACTION_GRIPPER


@pytest.mark.parametrize(
    ("env", "model", "value", "expect"),
    [
        (A.Actuator(G, 1, scale=2), A.Actuator(G, 1), 0.3, 0.6),
        (A.Actuator(G, 1, binary=True, invert=True), A.Actuator(G, 1), 0.8, -1.0),
        (A.Actuator(G, 1, range=(-1, 1)), A.Actuator(G, 1, range=(0, 1), binary=True), 1.2, 1.0),
        (
            A.Actuator(G, 1, scale=2, invert=True, threshold=0.5, binary=True),
            A.Actuator(G, 1),
            0.3,
            -1.0,
        ),
        (A.Actuator(G, 1, binary=True, threshold=0.25), A.Actuator(G, 1), 0.25, 1.0),
        (A.Actuator(G, 1, binary=True), A.Actuator(G, 1), 0.0, 0.0),
        (A.Actuator(G, 1, invert=True), A.Actuator(G, 1, scale=2, invert=True), 0.3, 0.6),
        (A.Actuator(G, 1, range=(-1, 1)), A.Actuator(G, 1, range=(0, 1)), 0.25, -0.5),
        (A.Actuator(G, 1, range=(0, 1), clip=True), A.Actuator(G, 1), 1.7, 1.0),
        (A.Actuator(G, 1, offset=1.0), A.Actuator(G, 1, scale=2, offset=0.1), 0.1, 1.3),
    ],
)
def test_gripper_conventions_follow_the_worked_checks_ADP_112(
    env: A.Actuator, model: A.Actuator, value: float, expect: float
) -> None:
    assert _act(A.Action(env), A.Action(model), [value]) == pytest.approx([expect], abs=1e-6)


def test_opaque_env_slices_are_filled_after_mapped_ones_ADP_112() -> None:
    env = A.Action(A.Actuator(G, 1), A.Actuator(dim=3, fill=0.5))
    assert _act(env, A.Action(A.Actuator(G, 1)), [0.7]) == pytest.approx([0.7, 0.5, 0.5, 0.5])
    assert "(opaque 3d) <- fill 0.5" in _adapter(env, A.Action(A.Actuator(G, 1))).describe()


def test_optional_env_roles_fall_back_to_their_fill_ADP_85() -> None:
    env = A.Action(A.Actuator(G, 1), A.Actuator(A.ACTION_GRIPPER_2, 1, optional=True, fill=-1.0))
    ad = _adapter(env, A.Action(A.Actuator(G, 1)))
    assert ad.transform_action([0.2]).tolist() == pytest.approx([0.2, -1.0])
    assert (
        '"action/gripper_2" <- fill -1 (1d; model did not output this optional role)'
        in ad.describe()
    )


def test_unrequested_and_opaque_model_slices_are_dropped_ADP_30_85() -> None:
    model = A.Action(A.Actuator(dim=2), A.Actuator(A.ACTION_DELTA_POS, 3), A.Actuator(G, 1))
    assert _act(A.Action(A.Actuator(G, 1)), model, [9, 9, 8, 8, 8, 0.5]) == [0.5]


def test_rotation_conversion_then_global_clip_ADP_111() -> None:
    env = A.Action(A.Actuator(A.ACTION_DELTA_ROT, 3, encoding="axis_angle"), clip=(-1, 1))
    model = A.Action(A.Actuator(A.ACTION_DELTA_ROT, 4, encoding="quat_xyzw"))
    out = _act(env, model, [0.5, 0.5, 0.5, 0.5])
    assert out == pytest.approx([1.0, 1.0, 1.0])
    unclipped = _act(
        A.Action(A.Actuator(A.ACTION_DELTA_ROT, 3, encoding="axis_angle")),
        model,
        [0.5, 0.5, 0.5, 0.5],
    )
    assert unclipped == pytest.approx([1.2091995] * 3, abs=1e-6)


def test_env_actuator_ranges_derive_from_the_action_space_bounds_ADP_64() -> None:
    env = A.Action(A.Actuator(G, 1))
    model = A.Action(A.Actuator(G, 1, range=(0, 1)))
    assert _act(env, model, [1.0], box([1], low=-1.0, high=1.0)) == [1.0]
    assert _act(env, model, [0.0], box([1], low=-1.0, high=1.0)) == [-1.0]


def test_equal_ranges_do_not_map_and_are_not_rendered_ADP_85() -> None:
    env = A.Action(A.Actuator(G, 1, range=(-1, 1)))
    ad = _adapter(env, A.Action(A.Actuator(G, 1, range=(-1, 1))))
    assert ad.transform_action([0.3]).tolist() == pytest.approx([0.3])
    assert "range" not in ad.describe()


def test_a_one_sided_model_range_is_a_no_op_with_an_info_note_ADP_95() -> None:
    ad = _adapter(A.Action(A.Actuator(G, 1)), A.Action(A.Actuator(G, 1, range=(0, 1))))
    assert ad.transform_action([0.3]).tolist() == pytest.approx([0.3])
    assert any(a.severity == "info" and "no-op" in a.message for a in ad.advisories())


def test_model_output_shapes_flatten_row_major_and_must_match_the_width_ADP_110() -> None:
    ad = _adapter(A.Action(A.Actuator("x/a", 4)), A.Action(A.Actuator("x/a", 4)))
    assert ad.transform_action(np.arange(4).reshape(2, 2)).tolist() == [0, 1, 2, 3]
    assert ad.transform_action({"data": [1, 2, 3, 4]}).tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match=r"expected 4-dim model action, got shape \(3,\)"):
        ad.transform_action([1, 2, 3])
    scalar = _adapter(A.Action(A.Actuator("x/a", 1)), A.Action(A.Actuator("x/a", 1)))
    assert scalar.transform_action(0.25).tolist() == [0.25]


def test_labels_permute_the_model_action_into_env_order_DELTA_64() -> None:
    env = A.Action(A.Actuator("x/j", 2, labels=("a", "b")))
    ad = _adapter(env, A.Action(A.Actuator("x/j", 2, labels=("b", "a"))))
    assert ad.transform_action([0.3, 0.4]).tolist() == pytest.approx([0.4, 0.3])
    assert "perm[1,0]" in ad.describe()


def test_parts_route_each_arm_to_its_env_slice_DELTA_60() -> None:
    P = A.ACTION_DELTA_POS
    env = A.Action(A.Actuator(P, 3, part=A.LEFT_ARM), A.Actuator(P, 3, part=A.RIGHT_ARM))
    model = A.Action(A.Actuator(P, 3, part=A.RIGHT_ARM), A.Actuator(P, 3, part=A.LEFT_ARM))
    ad = _adapter(env, model)
    assert ad.transform_action([1, 1, 1, 2, 2, 2]).tolist() == [2, 2, 2, 1, 1, 1]
    assert '"action/delta_eef_pos" <- model[3:6]#left_arm' in ad.describe()


def test_seed_second_arm_roles_pair_with_right_arm_parts() -> None:
    env = A.Action(
        A.Actuator(A.ACTION_DELTA_POS, 3), A.Actuator(A.ACTION_DELTA_POS, 3, part=A.RIGHT_ARM)
    )
    model = A.Action(A.Actuator(A.ACTION_DELTA_POS_2, 3), A.Actuator(A.ACTION_DELTA_POS, 3))
    assert _act(env, model, [2, 2, 2, 1, 1, 1]) == [1, 1, 1, 2, 2, 2]
    seed_only = A.Action(A.Actuator(A.ACTION_GRIPPER, 1), A.Actuator(A.ACTION_GRIPPER_2, 1))
    assert _act(seed_only, seed_only, [0.1, 0.2]) == pytest.approx([0.1, 0.2])


def test_model_second_arm_outputs_are_dropped_on_a_single_arm_env_ADP_16() -> None:
    model = A.Action(A.Actuator(G, 1), A.Actuator(A.ACTION_GRIPPER_2, 1))
    ad = _adapter(A.Action(A.Actuator(G, 1)), model)
    assert ad.transform_action([0.5, 0.9]).tolist() == [0.5]
    assert ad.advisories() == []  # a registered role draws no ad-hoc advisory


def test_ad_hoc_model_roles_draw_an_advisory_outside_describe_DELTA_61() -> None:
    ad = _adapter(A.Action(A.Actuator(G, 1)), A.Action(A.Actuator(G, 1), A.Actuator("my/extra", 1)))
    (adv,) = ad.advisories()
    assert adv.severity == "info" and adv.message.startswith(
        'model declares ad-hoc role "my/extra" that this env does not'
    )
    assert "dropped:" not in ad.describe()  # DEC-D2


def test_action_custom_encoding_runs_to_base_before_conversion_ADP_38() -> None:
    enc = A.CustomEncoding(
        "quat_xyzw",
        from_base=lambda v: v[[3, 0, 1, 2]],
        to_base=lambda v: v[[1, 2, 3, 0]],
        name="wxyz",
    )
    env = A.Action(A.Actuator(A.ACTION_DELTA_ROT, 4, encoding="quat_xyzw"))
    ad = _adapter(env, A.Action(A.Actuator(A.ACTION_DELTA_ROT, 4, encoding=enc)))
    out = np.array([1, 0, 0, 0], np.float32)
    assert ad.transform_action(out).tolist() == [0, 0, 0, 1]
    assert out.tolist() == [1, 0, 0, 0]  # the caller's array is not mutated (ADP-40)
    assert "host-side encodings:\n  action [0:4]: wxyz -> quat_xyzw" in ad.describe()
    with pytest.raises(TypeError, match="flat array"):
        ad.transform_action({"data": [1, 0, 0, 0]})
