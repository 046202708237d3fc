"""Shared builders for adapter unit tests: space views and a standard tagged env."""

from __future__ import annotations

from typing import Any

import pytest

import rlmesh.adapters as A


def box(
    shape: list[int], dtype: str = "float32", low: float | None = None, high: float | None = None
) -> dict[str, Any]:
    """A Box space view (adapters.md section 18.2)."""
    view: dict[str, Any] = {"kind": "box", "dtype": dtype, "shape": list(shape)}
    if low is not None and high is not None:
        view["low"], view["high"] = [low], [high]
    return view


def dict_space(**children: dict[str, Any]) -> dict[str, Any]:
    """A Dict space view in keyword order."""
    return {
        "kind": "dict",
        "dtype": "unspecified",
        "keys": list(children),
        "children": list(children.values()),
    }


TEXT = {"kind": "text", "dtype": "unspecified"}


def std_obs_space(h: int = 8, w: int = 8) -> dict[str, Any]:
    return dict_space(
        cam=box([h, w, 3], "uint8"),
        eef_pos=box([3]),
        eef_quat=box([4]),
        gripper=box([2]),
        instruction=TEXT,
    )


STD_ACTION_SPACE = box([7])


def std_tags() -> A.EnvTags:
    return A.EnvTags(
        observation={
            "cam": A.ImageTag(A.IMAGE_PRIMARY),
            "eef_pos": A.StateTag(A.EEF_POS),
            "eef_quat": A.StateTag(A.EEF_ROT, encoding="quat_xyzw"),
            "gripper": A.StateTag(A.GRIPPER_POS),
            "instruction": A.TextTag(A.INSTRUCTION),
        },
        action=A.Action(
            A.Actuator(A.ACTION_DELTA_POS, dim=3),
            A.Actuator(A.ACTION_DELTA_ROT, dim=3, encoding="axis_angle"),
            A.Actuator(A.ACTION_GRIPPER, dim=1, range=(-1.0, 1.0)),
            clip=(-1.0, 1.0),
        ),
    )


def std_output() -> A.Action:
    return A.Action(
        A.Actuator(A.ACTION_DELTA_POS, dim=3),
        A.Actuator(A.ACTION_DELTA_ROT, dim=3, encoding="axis_angle"),
        A.Actuator(A.ACTION_GRIPPER, dim=1, range=(-1.0, 1.0)),
    )


def resolve_std(
    inputs: Any,
    output: A.Action | None = None,
    *,
    tags: A.EnvTags | None = None,
    obs_space: Any = None,
    action_space: Any = None,
    **kw: Any,
) -> A.Adapter:
    """Resolve ``inputs`` against the standard env."""
    return A.resolve(
        tags or std_tags(),
        obs_space or std_obs_space(),
        action_space or STD_ACTION_SPACE,
        A.ModelSpec(inputs, output or std_output()),
        **kw,
    )


@pytest.fixture
def std_obs() -> dict[str, Any]:
    import numpy as np

    return {
        "cam": np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3),
        "eef_pos": np.array([0.1, -0.2, 0.3], dtype=np.float32),
        "eef_quat": np.array([0.5, 0.5, 0.5, 0.5], dtype=np.float32),
        "gripper": np.array([0.04, -0.04], dtype=np.float32),
        "instruction": "stack the cups",
    }
