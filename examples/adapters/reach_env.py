"""A tagged manipulation-style env: a gripper must reach a red cube on a table.

Observation (a Dict, like a LIBERO / SimplerEnv camera + proprio stack):

* ``wrist_rgb``: uint8 480x640x3 camera (a top-down view of the table),
* ``ee_pos``: float32[3] end-effector position,
* ``ee_quat``: float32[4] end-effector orientation, quaternion x, y, z, w,
* ``grip``: float32[1] gripper opening,
* ``goal``: the language instruction.

Action: float32[7] = delta position (3) + delta rotation as an axis-angle (3) + gripper
command in [-1, 1]. The env says which entry means what through ``TAGS``; it knows nothing
about any model.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import rlmesh.adapters as adapt

TAGS = adapt.EnvTags(
    observation={
        "wrist_rgb": adapt.ImageTag(adapt.IMAGE_PRIMARY),
        "ee_pos": adapt.StateTag(adapt.EEF_POS),
        "ee_quat": adapt.StateTag(adapt.EEF_ROT, encoding="quat_xyzw"),
        "grip": adapt.StateTag(adapt.GRIPPER_POS),
        "goal": adapt.TextTag(adapt.INSTRUCTION),
    },
    action=adapt.Action(
        adapt.Actuator(adapt.ACTION_DELTA_POS, dim=3),
        adapt.Actuator(adapt.ACTION_DELTA_ROT, dim=3, encoding="axis_angle"),
        adapt.Actuator(adapt.ACTION_GRIPPER, dim=1, range=(-1.0, 1.0)),
        clip=(-1.0, 1.0),
    ),
)

H, W = 480, 640
TABLE = 0.5  # the table spans [-0.5, 0.5] in x and y


class ReachEnv(gym.Env):  # type: ignore[misc]
    """Reach the red cube; success when the gripper is within 2 cm and closed."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"]}

    def __init__(self, max_steps: int = 60) -> None:
        self.observation_space = spaces.Dict(
            {
                "wrist_rgb": spaces.Box(0, 255, (H, W, 3), dtype=np.uint8),
                "ee_pos": spaces.Box(-1.0, 1.0, (3,), dtype=np.float32),
                "ee_quat": spaces.Box(-1.0, 1.0, (4,), dtype=np.float32),
                "grip": spaces.Box(0.0, 1.0, (1,), dtype=np.float32),
                "goal": spaces.Text(64, min_length=1, charset="abcdefghijklmnopqrstuvwxyz "),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (7,), dtype=np.float32)
        self.render_mode = "rgb_array"
        self.max_steps = max_steps
        self._canvas = np.zeros((H, W, 3), dtype=np.uint8)

    def _pixel(self, xy: np.ndarray) -> tuple[int, int]:
        col = int((xy[0] + TABLE) / (2 * TABLE) * (W - 1))
        row = int((xy[1] + TABLE) / (2 * TABLE) * (H - 1))
        return row, col

    def _obs(self) -> dict[str, Any]:
        img = self._canvas
        img[:] = (90, 70, 50)  # the table
        r, c = self._pixel(self.cube)
        img[max(r - 8, 0) : r + 8, max(c - 8, 0) : c + 8] = (220, 20, 20)  # the red cube
        r, c = self._pixel(self.ee[:2])
        img[max(r - 3, 0) : r + 3, max(c - 3, 0) : c + 3] = (240, 240, 240)  # the gripper
        return {
            "wrist_rgb": img,
            "ee_pos": self.ee.astype(np.float32),
            "ee_quat": np.array([0.0, 0.0, 0.0, 1.0], np.float32),
            "grip": np.array([self.opening], np.float32),
            "goal": "reach the red cube",
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.cube = self.np_random.uniform(-0.4, 0.4, size=2)
        self.ee = np.array([0.0, 0.0, 0.3])
        self.opening = 1.0
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        a = np.asarray(action, dtype=np.float64)
        self.t += 1
        self.ee = np.clip(self.ee + 0.05 * a[:3], -0.5, 0.5)
        self.opening = float(np.clip(self.opening - 0.5 * a[6], 0.0, 1.0))
        dist = float(np.linalg.norm(self.ee[:2] - self.cube))
        success = dist < 0.02 and self.opening < 0.5
        return self._obs(), -dist, success, self.t >= self.max_steps, {"is_success": success}

    def render(self) -> np.ndarray:
        return self._obs()["wrist_rgb"]


def make_env() -> ReachEnv:
    """The tagged env, ready to serve: ``rlmesh serve reach_env:make_env``."""
    return adapt.tag(ReachEnv(), TAGS)
