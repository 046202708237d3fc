"""Vocabularies: role constants, parts, rotation encodings and other closed sets.

Roles are an open vocabulary of strings matched verbatim (ADP-16); this module
holds the well-known ones, their dimension laws (ADP-17, DELTA-59) and the
small helpers the codec and resolver share.

Bimanual spellings (seed 003 vs release 0.1.0, DELTA-60): the seed's ``*_2``
constants stay registered here ("both spellings work"). For matching, a ``*_2``
role with no ``part`` is the same leaf identity as its base role with
``part="right_arm"`` (the seed's "second arm"), so ``State(EEF_POS_2)``
binds ``StateTag(EEF_POS, part=RIGHT_ARM)`` and vice versa. Rendering keeps
whatever spelling each side declared.

>>> ROTATION_DIMS["rot6d"]
6
>>> identity(EEF_POS_2, None)
('proprio/eef_pos', 'right_arm')
>>> is_sanctioned("x/my_sensor"), is_sanctioned("my_sensor")
(True, False)
"""

from __future__ import annotations

import math
from typing import Literal

from .. import _keys

# -- role constants (ADP-15, DELTA-59) --------------------------------------------
IMAGE_PRIMARY = "image/primary"
IMAGE_SECONDARY = "image/secondary"
IMAGE_WRIST = "image/wrist"
INSTRUCTION = "text/instruction"
JOINT_POS = "proprio/joint_pos"
JOINT_VEL = "proprio/joint_vel"
EEF_POS = "proprio/eef_pos"
EEF_ROT = "proprio/eef_rot"
GRIPPER_POS = "proprio/gripper"
EEF_WRENCH = "proprio/eef_wrench"
BASE_ANG_VEL = "proprio/base_ang_vel"
BASE_ROT = "proprio/base_rot"
COMMAND_BASE_VEL = "command/base_vel"
ACTION_JOINT_POS = "action/joint_pos"
ACTION_JOINT_VEL = "action/joint_vel"
ACTION_DELTA_POS = "action/delta_eef_pos"
ACTION_DELTA_ROT = "action/delta_eef_rot"
ACTION_GRIPPER = "action/gripper"
ACTION_EEF_POS = "action/eef_pos"
ACTION_EEF_ROT = "action/eef_rot"
# Seed 003 bimanual spellings (removed by the 0.1.0 release; kept, see module doc).
EEF_POS_2 = "proprio/eef_pos_2"
EEF_ROT_2 = "proprio/eef_rot_2"
GRIPPER_POS_2 = "proprio/gripper_2"
ACTION_DELTA_POS_2 = "action/delta_eef_pos_2"
ACTION_DELTA_ROT_2 = "action/delta_eef_rot_2"
ACTION_GRIPPER_2 = "action/gripper_2"

# -- parts (DELTA-60) -------------------------------------------------------------
LEFT_ARM = "left_arm"
RIGHT_ARM = "right_arm"
HEAD = "head"
TORSO = "torso"
BASE = "base"
LEFT_LEG = "left_leg"
RIGHT_LEG = "right_leg"
PARTS = [LEFT_ARM, RIGHT_ARM, HEAD, TORSO, BASE, LEFT_LEG, RIGHT_LEG]

# -- metadata keys (ADP-49, DELTA-71) ---------------------------------------------
ENV_METADATA_KEY = _keys.ENV_TAGS_KEY
MODEL_METADATA_KEY = _keys.MODEL_SPEC_KEY
ENV_BRANCH_METADATA_KEY = _keys.ENV_BRANCH_KEY

# -- closed vocabularies ----------------------------------------------------------
#: Rotation encodings and their widths (ADP-7, DELTA-66 ``gravity_xyz``).
ROTATION_DIMS: dict[str, int] = {
    "quat_xyzw": 4,
    "quat_wxyz": 4,
    "axis_angle": 3,
    "rot6d": 6,
    "rot6d_rowmajor": 6,
    "euler_xyz": 3,
    "gravity_xyz": 3,
}
OBS_ONLY_ENCODINGS = frozenset({"gravity_xyz"})
IMAGE_LAYOUTS = ["hwc", "chw"]  # ADP-8
FIT_MODES = ("stretch", "crop", "pad")  # ADP-9
RESAMPLES = ("bilinear", "bilinear_aa", "bicubic_aa", "lanczos3_aa", "area")  # ADP-10, DELTA-67
CROP_MODES = ("zoom", "slice")
CHANNEL_ORDERS = ("rgb", "bgr")
STACK_PADS = ("first", "black")
FRAMES = ("world", "robot_base", "tool")  # DELTA-63
PROVENANCES = ("sensed", "estimated", "privileged")
REFERENCES = ("current", "target")
#: Output dtype names for image/state leaves (ADP-11).
DTYPES = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
)

RotationEncoding = Literal[
    "quat_xyzw", "quat_wxyz", "axis_angle", "rot6d", "rot6d_rowmajor", "euler_xyz", "gravity_xyz"
]
ImageLayout = Literal["hwc", "chw"]
FitMode = Literal["stretch", "crop", "pad"]
Resample = Literal["bilinear", "bilinear_aa", "bicubic_aa", "lanczos3_aa", "area"]
Frame = Literal["world", "robot_base", "tool"]
Provenance = Literal["sensed", "estimated", "privileged"]
Reference = Literal["current", "target"]
StackPad = Literal["first", "black"]
StackSpec = tuple[int, ...]

# -- registry: role -> dim law (int = fixed width, "encoding" = by encoding, None = variable)
_BY_ENCODING = "encoding"
_REGISTRY: dict[str, int | str | None] = {
    IMAGE_PRIMARY: None,
    IMAGE_SECONDARY: None,
    IMAGE_WRIST: None,
    INSTRUCTION: None,
    JOINT_POS: None,
    JOINT_VEL: None,
    ACTION_JOINT_POS: None,
    ACTION_JOINT_VEL: None,
    EEF_POS: 3,
    EEF_ROT: _BY_ENCODING,
    GRIPPER_POS: None,
    ACTION_DELTA_POS: 3,
    ACTION_DELTA_ROT: _BY_ENCODING,
    ACTION_GRIPPER: None,
    EEF_WRENCH: 6,
    BASE_ANG_VEL: 3,
    BASE_ROT: _BY_ENCODING,
    COMMAND_BASE_VEL: 3,
    ACTION_EEF_POS: 3,
    ACTION_EEF_ROT: _BY_ENCODING,
    EEF_POS_2: 3,
    EEF_ROT_2: _BY_ENCODING,
    GRIPPER_POS_2: None,
    ACTION_DELTA_POS_2: 3,
    ACTION_DELTA_ROT_2: _BY_ENCODING,
    ACTION_GRIPPER_2: None,
}
#: Seed ``*_2`` role -> (base role, part) identity (see module doc).
_SECOND_ARM: dict[str, str] = {
    EEF_POS_2: EEF_POS,
    EEF_ROT_2: EEF_ROT,
    GRIPPER_POS_2: GRIPPER_POS,
    ACTION_DELTA_POS_2: ACTION_DELTA_POS,
    ACTION_DELTA_ROT_2: ACTION_DELTA_ROT,
    ACTION_GRIPPER_2: ACTION_GRIPPER,
}


def is_registered(role: str) -> bool:
    """Whether ``role`` is in the well-known registry (ADP-18)."""
    return role in _REGISTRY


def is_sanctioned(role: str) -> bool:
    """Registered, or intentionally non-standard under the ``x/`` namespace (ADP-18)."""
    return role in _REGISTRY or role.startswith("x/")


def dim_law(role: str) -> int | None:
    """The fixed width a registered role must have, or ``None`` (ADP-17)."""
    law = _REGISTRY.get(role)
    return law if isinstance(law, int) else None


def identity(role: str, part: str | None) -> tuple[str, str | None]:
    """The matching identity of a (role, part) pair; folds seed ``*_2`` roles (DELTA-60)."""
    if part is None:
        base = _SECOND_ARM.get(role)
        if base is not None:
            return base, RIGHT_ARM
    return role, part


def render_identity(role: str, part: str | None) -> str:
    """``role`` or ``role#part`` as role lists in error messages show it (DELTA-60)."""
    return role if part is None else f"{role}#{part}"


# -- float rendering (ADP-88) -----------------------------------------------------
def fmt_pair_float(x: float) -> str:
    """Shortest round-trip form that always shows a fraction: ``-1.0``, ``0.5``."""
    return repr(float(x))


def fmt_scalar(x: float) -> str:
    """Shortest round-trip form without a trailing ``.0``: ``2``, ``0.5``, ``-1``."""
    x = float(x)
    if math.isfinite(x) and x == int(x) and abs(x) < 1e16:
        return str(int(x))
    return repr(x)


def fmt_pair(pair: tuple[float, float]) -> str:
    """``(a, b)`` in pair style (ranges, clips)."""
    return f"({fmt_pair_float(pair[0])}, {fmt_pair_float(pair[1])})"


def quote(s: str) -> str:
    """A string rendered in double quotes with JSON-style escaping."""
    import json

    return json.dumps(s, ensure_ascii=False)
