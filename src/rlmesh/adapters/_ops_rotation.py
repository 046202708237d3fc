"""Rotation encoding conversions (ADP-113..123, DELTA-66 ``gravity_xyz``).

One vector at a time in float64 Python arithmetic (a handful of scalar ops is
far cheaper than numpy dispatch for 3..6 numbers), cast to float32 by the
caller. Quaternion -> axis_angle takes the direct path; every other pair goes
through a 3x3 matrix. ``EPS = 1e-8``.

>>> [round(x, 7) for x in convert([0.5, 0.5, 0.5, 0.5], "quat_xyzw", "axis_angle")]
[1.2091996, 1.2091996, 1.2091996]
>>> [round(x, 12) + 0.0 for x in convert([0.5, 0.5, 0.5, 0.5], "quat_xyzw", "rot6d")]
[0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
>>> convert([0.0, 0.0, 0.0, 1.0], "quat_xyzw", "gravity_xyz")
[-0.0, -0.0, -1.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._roles import ROTATION_DIMS

__all__ = ["EPS", "Matrix", "convert", "from_matrix", "matmul", "to_matrix"]

EPS = 1e-8
Matrix = list[list[float]]
_IDENTITY: Matrix = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]


def _xyzw(v: Sequence[float], enc: str) -> tuple[float, float, float, float]:
    if enc == "quat_wxyz":  # ADP-113
        return float(v[1]), float(v[2]), float(v[3]), float(v[0])
    return float(v[0]), float(v[1]), float(v[2]), float(v[3])


def _quat_to_axis_angle(x: float, y: float, z: float, w: float) -> list[float]:
    n = math.sqrt(x * x + y * y + z * z + w * w)  # ADP-114
    if n <= EPS:
        return [0.0, 0.0, 0.0]
    x, y, z, w = x / n, y / n, z / n, w / n
    s = math.sqrt(x * x + y * y + z * z)
    if s <= EPS:
        return [0.0, 0.0, 0.0]
    k = 2.0 * math.atan2(s, w) / s
    return [x * k, y * k, z * k]


def _quat_to_matrix(x: float, y: float, z: float, w: float) -> Matrix:
    n = math.sqrt(x * x + y * y + z * z + w * w)  # ADP-115
    if n <= EPS:
        return [row[:] for row in _IDENTITY]
    x, y, z, w = x / n, y / n, z / n, w / n
    return [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]


def _axis_angle_to_matrix(v: Sequence[float]) -> Matrix:
    a, b, c = float(v[0]), float(v[1]), float(v[2])
    theta = math.sqrt(a * a + b * b + c * c)  # ADP-116
    if theta <= EPS:
        return [row[:] for row in _IDENTITY]
    kx, ky, kz = a / theta, b / theta, c / theta
    s, c1 = math.sin(theta), 1.0 - math.cos(theta)
    K = [[0.0, -kz, ky], [kz, 0.0, -kx], [-ky, kx, 0.0]]
    K2 = matmul(K, K)
    return [[_IDENTITY[i][j] + s * K[i][j] + c1 * K2[i][j] for j in range(3)] for i in range(3)]


def _rot6d_to_matrix(v: Sequence[float], rowmajor: bool) -> Matrix:
    if rowmajor:  # ADP-117
        a1 = [float(v[0]), float(v[2]), float(v[4])]
        a2 = [float(v[1]), float(v[3]), float(v[5])]
    else:
        a1 = [float(v[0]), float(v[1]), float(v[2])]
        a2 = [float(v[3]), float(v[4]), float(v[5])]
    n1 = math.sqrt(sum(x * x for x in a1)) + EPS
    b1 = [x / n1 for x in a1]
    d = sum(p * q for p, q in zip(b1, a2, strict=True))
    b2 = [q - d * p for p, q in zip(b1, a2, strict=True)]
    n2 = math.sqrt(sum(x * x for x in b2)) + EPS
    b2 = [x / n2 for x in b2]
    b3 = [
        b1[1] * b2[2] - b1[2] * b2[1],
        b1[2] * b2[0] - b1[0] * b2[2],
        b1[0] * b2[1] - b1[1] * b2[0],
    ]
    return [[b1[i], b2[i], b3[i]] for i in range(3)]


def _euler_to_matrix(v: Sequence[float]) -> Matrix:
    r, p, y = float(v[0]), float(v[1]), float(v[2])  # ADP-118
    sr, cr, sp, cp, sy, cy = (
        math.sin(r),
        math.cos(r),
        math.sin(p),
        math.cos(p),
        math.sin(y),
        math.cos(y),
    )
    return [
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr],
    ]


def to_matrix(v: Sequence[float], enc: str) -> Matrix:
    """The 3x3 rotation matrix (row-major) of ``v`` in encoding ``enc``."""
    if enc in ("quat_xyzw", "quat_wxyz"):
        return _quat_to_matrix(*_xyzw(v, enc))
    if enc == "axis_angle":
        return _axis_angle_to_matrix(v)
    if enc in ("rot6d", "rot6d_rowmajor"):
        return _rot6d_to_matrix(v, enc == "rot6d_rowmajor")
    if enc == "euler_xyz":
        return _euler_to_matrix(v)
    raise ValueError(f"cannot convert out of encoding {enc!r}")


def _matrix_to_quat(R: Matrix) -> tuple[float, float, float, float]:
    t = R[0][0] + R[1][1] + R[2][2]  # ADP-120 (Shepperd), returns x, y, z, w
    if t > 0:
        s = 2.0 * math.sqrt(t + 1.0)
        return (R[2][1] - R[1][2]) / s, (R[0][2] - R[2][0]) / s, (R[1][0] - R[0][1]) / s, s / 4
    if R[0][0] > R[1][1] and R[0][0] > R[2][2]:
        s = 2.0 * math.sqrt(1.0 + R[0][0] - R[1][1] - R[2][2])
        return s / 4, (R[0][1] + R[1][0]) / s, (R[0][2] + R[2][0]) / s, (R[2][1] - R[1][2]) / s
    if R[1][1] > R[2][2]:
        s = 2.0 * math.sqrt(1.0 + R[1][1] - R[0][0] - R[2][2])
        return (R[0][1] + R[1][0]) / s, s / 4, (R[1][2] + R[2][1]) / s, (R[0][2] - R[2][0]) / s
    s = 2.0 * math.sqrt(1.0 + R[2][2] - R[0][0] - R[1][1])
    return (R[0][2] + R[2][0]) / s, (R[1][2] + R[2][1]) / s, s / 4, (R[1][0] - R[0][1]) / s


def _matrix_to_axis_angle(R: Matrix) -> list[float]:
    c = max(-1.0, min(1.0, (R[0][0] + R[1][1] + R[2][2] - 1.0) / 2.0))  # ADP-119
    theta = math.acos(c)
    if abs(theta) < EPS:
        return [0.0, 0.0, 0.0]
    s = math.sin(theta)
    # ADP-119 takes the quaternion path when |sin| < EPS (theta ~ pi). We widen that to
    # |sin| < 1e-2 near pi: same rotation, but the antisymmetric-part formula loses
    # precision as theta -> pi (pi - 2e-8 would give a zero vector, as would the
    # slightly shrunken matrix rot6d's +EPS normalization builds for a half turn), and its
    # spec'd "+ EPS" costs theta * EPS / (2 sin) of the angle: 1.6e-5 at sin = 1e-3,
    # under 2e-6 from 1e-2 on.
    if abs(s) < EPS or (theta > math.pi / 2 and abs(s) < 1e-2):
        return _quat_to_axis_angle(*_matrix_to_quat(R))
    k = theta / (2.0 * s + EPS)
    return [(R[2][1] - R[1][2]) * k, (R[0][2] - R[2][0]) * k, (R[1][0] - R[0][1]) * k]


def _matrix_to_euler(R: Matrix) -> list[float]:
    sp = max(-1.0, min(1.0, -R[2][0]))  # ADP-122
    cp = math.sqrt(max(0.0, 1.0 - sp * sp))
    pitch = math.asin(sp)
    if cp > EPS:
        return [math.atan2(R[2][1], R[2][2]), pitch, math.atan2(R[1][0], R[0][0])]
    return [math.atan2(sp * R[0][1], R[1][1]), pitch, 0.0]


def from_matrix(R: Matrix, enc: str) -> list[float]:
    """Encode a rotation matrix in ``enc`` (ADP-119..122; ``gravity_xyz`` = ``R^T (0, 0, -1)``)."""
    if enc == "axis_angle":
        return _matrix_to_axis_angle(R)
    if enc in ("quat_xyzw", "quat_wxyz"):
        x, y, z, w = _matrix_to_quat(R)
        return [x, y, z, w] if enc == "quat_xyzw" else [w, x, y, z]
    if enc == "rot6d":
        return [R[0][0], R[1][0], R[2][0], R[0][1], R[1][1], R[2][1]]
    if enc == "rot6d_rowmajor":
        return [R[0][0], R[0][1], R[1][0], R[1][1], R[2][0], R[2][1]]
    if enc == "euler_xyz":
        return _matrix_to_euler(R)
    if enc == "gravity_xyz":
        return [-R[2][0], -R[2][1], -R[2][2]]
    raise ValueError(f"unknown rotation encoding {enc!r}")


def matmul(A: Matrix, B: Matrix) -> Matrix:
    """3x3 product ``A @ B``."""
    return [
        [A[i][0] * B[0][j] + A[i][1] * B[1][j] + A[i][2] * B[2][j] for j in range(3)]
        for i in range(3)
    ]


def convert(v: Sequence[float], src: str, dst: str, post: Matrix | None = None) -> list[float]:
    """Convert one rotation vector from ``src`` to ``dst`` encoding.

    ``post`` (DELTA-66 ``post_rotate``) right-multiplies the source rotation:
    ``R_out = R_in @ post``.

    Raises:
        ValueError: ``v`` has the wrong width, or ``src`` is ``gravity_xyz``.
    """
    n = ROTATION_DIMS[src]
    if len(v) != n:
        raise ValueError(f"expected {n}-element {src} rotation, got shape ({len(v)},)")
    if post is None:
        if src == dst:
            return [float(x) for x in v]
        if src in ("quat_xyzw", "quat_wxyz") and dst == "axis_angle":
            return _quat_to_axis_angle(*_xyzw(v, src))
    R = to_matrix(v, src)
    if post is not None:
        R = matmul(R, post)
    return from_matrix(R, dst)
