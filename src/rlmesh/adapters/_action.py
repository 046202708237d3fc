"""Action layouts (shared by env tags and model specs), custom encodings, fixed rotations.

``Action(*actuators, clip=None)`` is an ordered list of :class:`Actuator` slices
(ADP-28); the same class describes what an env consumes and what a model
emits, each side in its own conventions (ADP-30).

>>> act = Action(Actuator(ACTION_DELTA_POS, dim=3), Actuator(ACTION_GRIPPER, dim=1), clip=(-1, 1))
>>> act.dim, act.clip
(4, (-1.0, 1.0))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import numpy as np

from ._check import (
    check_choice,
    check_labels,
    check_number,
    check_optional_str,
    check_pair,
    check_role,
    check_scale,
    check_width,
)
from ._ops_rotation import to_matrix
from ._roles import (
    ACTION_DELTA_POS,
    ACTION_GRIPPER,
    FRAMES,
    OBS_ONLY_ENCODINGS,
    REFERENCES,
    ROTATION_DIMS,
)

__all__ = ["Action", "Actuator", "CustomEncoding", "Rotation", "RotationTransform"]

#: A custom-encoding arm: maps one flat rotation vector to another of the same width.
RotationTransform = Callable[[Any], Any]

_LOCAL_ARM = "<local>"


def _check_arm(arm: Any, name: str) -> Any:
    if arm is None or callable(arm):
        return arm
    if isinstance(arm, str):
        if arm != _LOCAL_ARM and (":" not in arm or arm.startswith(":") or arm.endswith(":")):
            raise ValueError(
                f"CustomEncoding {name} must be a callable or a 'module:callable' string, got {arm!r}"
            )
        return arm
    raise TypeError(
        f"CustomEncoding {name} must be a callable or a 'module:callable' string, got {arm!r}"
    )


def custom_arm_message(name: str, arm: Any) -> str:
    """Why a non-callable CustomEncoding arm cannot run (CNF2-B3).

    ``"<local>"`` marks a callable that stayed in the publishing process (it did not
    travel over the wire); a ``module:callable`` string is an entrypoint arm, which
    resolution does not import yet, trusted or not.
    """
    if arm == "<local>":
        return (
            f'custom encoding "{name}" arm is the "<local>" marker, not an in-process callable: the callable did not '
            "travel with the spec; resolve in the process that defines the CustomEncoding"
        )
    return (
        f'custom encoding "{name}" arm {arm!r} is an entrypoint string, not an in-process callable; entrypoint '
        "arms are not supported yet (trusted or not) -- pass the callable itself"
    )


@dataclass(frozen=True)
class CustomEncoding:
    """A host-side rotation repack around a native ``base`` encoding (ADP-37).

    ``from_base`` maps a ``base`` vector to the custom packing (observation
    side); ``to_base`` maps it back (action side). The packing is
    width-preserving: ``width == ROTATION_DIMS[base]``.

    >>> enc = CustomEncoding("quat_xyzw", from_base=lambda q: q[[3, 0, 1, 2]], name="wxyz_mine")
    >>> enc.width
    4
    """

    base: str
    from_base: Any = None
    to_base: Any = None
    name: str = "custom"

    def __post_init__(self) -> None:
        if not isinstance(self.base, str) or self.base not in ROTATION_DIMS:
            raise ValueError(
                f"CustomEncoding base must be a native encoding {sorted(ROTATION_DIMS)}, got {self.base!r}"
            )
        fb = _check_arm(self.from_base, "from_base")
        tb = _check_arm(self.to_base, "to_base")
        if fb is None and tb is None:
            raise ValueError("CustomEncoding needs at least one of from_base or to_base")
        if fb is not None and tb is not None and callable(fb) != callable(tb):
            raise ValueError(
                "CustomEncoding arms must both be callables or both be 'module:callable' strings, not a mix"
            )
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"CustomEncoding name must be a non-empty string, got {self.name!r}")

    @property
    def width(self) -> int:
        """The width of both the base and the custom packing."""
        return ROTATION_DIMS[self.base]


def _matrix_is_rotation(m: np.ndarray[Any, Any]) -> bool:
    if not np.all(np.isfinite(m)):
        return False
    if abs(float(np.linalg.det(m)) - 1.0) > 1e-4:
        return False
    return bool(np.allclose(m @ m.T, np.eye(3), atol=1e-4))


@dataclass(frozen=True)
class Rotation:
    """A fixed rotation literal, e.g. for ``State(post_rotate=...)`` (DELTA-66).

    >>> r = Rotation.from_matrix([[0, -1, 0], [1, 0, 0], [0, 0, 1]])
    >>> r.encoding, r.value
    ('rot6d', (0.0, 1.0, 0.0, -1.0, 0.0, 0.0))
    """

    _: KW_ONLY
    encoding: str
    value: tuple[float, ...]

    def __post_init__(self) -> None:
        enc = self.encoding
        if enc in OBS_ONLY_ENCODINGS:
            raise ValueError(
                f"Rotation encoding {enc!r} is observation-only; it cannot describe a rotation"
            )
        if not isinstance(enc, str) or enc not in ROTATION_DIMS:
            raise ValueError(
                f"Rotation encoding must be one of {sorted(ROTATION_DIMS)}, got {enc!r}"
            )
        vals = tuple(
            check_number(x, "Rotation value")
            for x in np.asarray(self.value, dtype=object).reshape(-1)
        )
        if len(vals) != ROTATION_DIMS[enc]:
            raise ValueError(f"Rotation {enc} needs {ROTATION_DIMS[enc]} values, got {len(vals)}")
        object.__setattr__(self, "value", vals)
        if not _matrix_is_rotation(self._raw_matrix()):
            raise ValueError(
                f"Rotation {enc} {list(vals)} is not a rotation (|det-1| > 1e-4 or not orthonormal)"
            )

    def _raw_matrix(self) -> np.ndarray[Any, Any]:
        v = self.value
        if self.encoding in ("rot6d", "rot6d_rowmajor"):
            a1, a2 = (
                (v[0:3], v[3:6])
                if self.encoding == "rot6d"
                else ((v[0], v[2], v[4]), (v[1], v[3], v[5]))
            )
            c1, c2 = np.asarray(a1, float), np.asarray(a2, float)
            return np.stack([c1, c2, np.cross(c1, c2)], axis=1)
        if self.encoding in ("quat_xyzw", "quat_wxyz") and abs(math.hypot(*v) - 1.0) > 1e-4:
            return np.full((3, 3), np.nan)
        return np.asarray(to_matrix(list(v), self.encoding), dtype=float)

    def matrix(self) -> list[list[float]]:
        """The 3x3 rotation matrix (row-major lists)."""
        return to_matrix(list(self.value), self.encoding)

    @classmethod
    def from_matrix(cls, rows: Sequence[Sequence[float]]) -> Rotation:
        """The exact ``rot6d`` literal (first two columns) of a 3x3 matrix."""
        m = np.asarray(rows, dtype=float)
        if m.shape != (3, 3):
            raise ValueError(f"Rotation.from_matrix needs a 3x3 matrix, got shape {m.shape}")
        return cls(
            encoding="rot6d",
            value=tuple(float(x) for x in (m[0, 0], m[1, 0], m[2, 0], m[0, 1], m[1, 1], m[2, 1])),
        )


def _check_action_encoding(enc: Any, role: str | None) -> str | CustomEncoding | None:
    if enc is None or isinstance(enc, CustomEncoding):
        return enc
    if isinstance(enc, str):
        if enc in OBS_ONLY_ENCODINGS:
            raise ValueError(
                f"actuator {role!r}: encoding {enc!r} is observation-only; an action cannot use it"
            )
        return enc
    raise ValueError(
        f"actuator {role!r}: encoding must be one encoding name or a CustomEncoding, not a list "
        f"(an action slice has exactly one format), got {enc!r}"
    )


@dataclass(frozen=True)
class Actuator:
    """One slice of an action vector (ADP-29, DELTA-60/63/64/65).

    Args:
        role: The semantic role, or ``None`` for an opaque slice (env: a constant
            ``fill``; model: dims the env ignores).
        dim: The slice width.
        encoding: Rotation encoding name or :class:`CustomEncoding`.
        range: The value range of this side, ``(low, high)``.
        binary: Snap to +-1 (either side enables it).
        scale: Multiply (scalar or per-axis); ``offset`` adds (keyword-only).
        invert: Negate (sugar for an extra ``scale=-1``).
        threshold: Subtract before the binary snap.
        clip: Env side only: clamp to ``range``.
        fill: Env side: the constant for an opaque or absent optional slice.
        optional: Env side: use ``fill`` when the model does not output this role.
    """

    role: str | None = None
    dim: int | None = None
    encoding: str | CustomEncoding | None = None
    range: tuple[float, float] | None = None
    binary: bool = False
    scale: float | tuple[float, ...] | None = None
    invert: bool = False
    threshold: float | None = None
    clip: bool = False
    fill: float = 0.0
    optional: bool = False
    _: KW_ONLY
    frame: str | None = None
    reference: str | None = None
    part: str | None = None
    offset: float | tuple[float, ...] | None = None
    labels: tuple[str, ...] | None = field(default=None)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        role = None if self.role is None else check_role(self.role, "Actuator role")
        labels = check_labels(self.labels, f"actuator {role!r} labels")
        set_(self, "labels", labels)
        where = f"actuator {role!r}"
        d = check_width(self.dim, labels, where, too_small=f"{where}: dim must be >= 1")
        set_(self, "dim", d)
        if isinstance(self.fill, (bool, np.bool_)):
            raise ValueError(f"actuator {role!r}: fill must be a single number, got {self.fill!r}")
        try:
            set_(self, "fill", check_number(self.fill, f"actuator {role!r}: fill"))
        except ValueError:
            raise ValueError(
                f"actuator {role!r}: fill must be a single number, got {self.fill!r}"
            ) from None
        if role is None:
            extra = [
                n
                for n, v in (
                    ("encoding", self.encoding),
                    ("range", self.range),
                    ("binary", self.binary or None),
                    ("scale", self.scale),
                    ("invert", self.invert or None),
                    ("threshold", self.threshold),
                    ("clip", self.clip or None),
                    ("optional", self.optional or None),
                    ("frame", self.frame),
                    ("reference", self.reference),
                    ("part", self.part),
                    ("offset", self.offset),
                    ("labels", labels),
                )
                if v is not None
            ]
            if extra:
                raise ValueError(
                    f"a role-less (opaque) actuator may only set dim and fill; it also sets {extra}"
                )
            return
        set_(self, "encoding", _check_action_encoding(self.encoding, role))
        if isinstance(self.encoding, CustomEncoding) and d != self.encoding.width:
            raise ValueError(
                f"actuator {role!r}: custom encoding {self.encoding.name!r} over {self.encoding.base} "
                f"dim must be {self.encoding.width}, the {self.encoding.base} width, got {d}"
            )
        if self.range is not None:
            set_(self, "range", check_pair(self.range, f"actuator {role!r}: range"))
        for name in ("scale", "offset"):
            v = getattr(self, name)
            if v is not None:
                v = check_scale(v, f"actuator {role!r}: {name}")
                if isinstance(v, tuple) and len(v) != d:
                    raise ValueError(
                        f"actuator {role!r}: per-axis {name} has {len(v)} values but dim is {d}"
                    )
                set_(self, name, v)
        if self.threshold is not None:
            set_(self, "threshold", check_number(self.threshold, f"actuator {role!r}: threshold"))
        for name in ("binary", "invert", "clip", "optional"):
            set_(self, name, bool(getattr(self, name)))
        if self.fill != 0.0 and not self.optional:
            raise ValueError(
                f"actuator {role!r}: fill applies only to an optional actuator (or a role-less one); "
                "set optional=True or drop fill"
            )
        if self.clip and self.range is None:
            raise ValueError(f"actuator {role!r}: clip=True clamps to range, so it requires range")
        set_(self, "frame", check_optional_str(self.frame, FRAMES, f"actuator {role!r}: frame"))
        set_(
            self,
            "reference",
            check_optional_str(self.reference, REFERENCES, f"actuator {role!r}: reference"),
        )
        if self.part is not None:
            set_(self, "part", check_role(self.part, f"actuator {role!r}: part"))


@dataclass(frozen=True, init=False)
class Action:
    """An ordered action layout: ``Action(*actuators, clip=None)`` (ADP-28).

    Attributes:
        components: The actuators, in order (also ``actuators``).
        clip: Env side: clamp the whole env action to ``(low, high)``.
    """

    components: tuple[Actuator, ...]
    clip: tuple[float, float] | None

    def __init__(self, *components: Actuator, clip: Sequence[float] | None = None) -> None:
        if len(components) == 1 and isinstance(components[0], (list, tuple)):
            components = tuple(components[0])
        if not components:
            raise ValueError("Action needs at least one Actuator")
        for i, c in enumerate(components):
            if not isinstance(c, Actuator):
                raise TypeError(
                    f"Action component[{i}] must be an Actuator, got {type(c).__name__}"
                )
        object.__setattr__(self, "components", tuple(components))
        object.__setattr__(self, "clip", None if clip is None else check_pair(clip, "Action clip"))

    @classmethod
    def _unchecked(cls, components: Sequence[Actuator], clip: tuple[float, float] | None) -> Action:
        """Build from wire data, which may carry zero actuators (ADP-28)."""
        self = object.__new__(cls)
        object.__setattr__(self, "components", tuple(components))
        object.__setattr__(self, "clip", clip)
        return self

    @property
    def actuators(self) -> tuple[Actuator, ...]:
        """Alias of :attr:`components`."""
        return self.components

    @property
    def dim(self) -> int:
        """The total action width (sum of actuator dims)."""
        return sum(int(c.dim or 0) for c in self.components)

    def __iter__(self) -> Any:
        return iter(self.components)

    def __len__(self) -> int:
        return len(self.components)


_ = (ACTION_DELTA_POS, ACTION_GRIPPER, check_choice)  # doctest namespace
