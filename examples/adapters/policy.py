"""A VLA-style policy written in its own conventions, knowing nothing about ReachEnv.

It reads a 224x224 image, a proprio vector [eef_pos(3), eef_rot as rot6d(6), gripper(1)]
and the instruction, and emits [delta_pos(3), delta_rot as rot6d(6), gripper(1)].
``SPEC`` declares exactly that; rlmesh derives the glue from the env's tags.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import rlmesh.adapters as adapt

SPEC = adapt.ModelSpec(
    input={
        "image": adapt.Image(adapt.IMAGE_PRIMARY, size=224, fit="crop"),
        "proprio": adapt.Concat(
            adapt.EEF_POS,
            adapt.State(adapt.EEF_ROT, encoding="rot6d"),
            adapt.GRIPPER_POS,
        ),
        "task": adapt.Text(adapt.INSTRUCTION),
    },
    output=adapt.Action(
        adapt.Actuator(adapt.ACTION_DELTA_POS, dim=3),
        adapt.Actuator(adapt.ACTION_DELTA_ROT, dim=6, encoding="rot6d"),
        adapt.Actuator(adapt.ACTION_GRIPPER, dim=1, range=(-1.0, 1.0)),
    ),
)

IDENTITY_ROT6D = np.array([1, 0, 0, 0, 1, 0], np.float32)  # no rotation


def predict(payload: dict[str, Any]) -> np.ndarray:
    """Find the red cube in the image, move the gripper over it, then close."""
    image, proprio, task = payload["image"], payload["proprio"], payload["task"]
    assert image.shape == (224, 224, 3) and proprio.shape == (10,) and isinstance(task, str)
    red = (image[..., 0] > 180) & (image[..., 1] < 60)
    action = np.zeros(10, np.float32)
    action[3:9] = IDENTITY_ROT6D
    if red.any():
        rows, cols = np.nonzero(red)
        # the camera is center-cropped to 480x480, then resized: pixel -> table coordinates
        target_x = (cols.mean() / 223.0 * 480 + 80) / 639.0 - 0.5
        target_y = rows.mean() / 223.0 - 0.5
        delta = np.array([target_x, target_y]) - proprio[:2]
        action[:2] = np.clip(delta / 0.05, -1.0, 1.0)
        action[9] = 1.0 if np.linalg.norm(delta) < 0.015 else -1.0  # close when over the cube
    return action
