"""One catalog of spaces; every generic property test runs over all of it (STYLE).

Each entry exercises something a codec or converter could get wrong: rank-0 Box,
every dtype, exact int64/uint64 extremes, one-sided and element-wise bounds,
Discrete dtype/start, MultiBinary dtypes, MultiDiscrete ``start`` and rank 2,
``Text(min_length=0)`` and Unicode charsets, Dict keys in non-sorted declared
order, nesting.
"""

from __future__ import annotations

import numpy as np

from rlmesh.spaces import (
    Box,
    Dict,
    Discrete,
    MultiBinary,
    MultiDiscrete,
    Space,
    SpaceSpec,
    Text,
    Tuple,
    space_from_spec,
)

I64 = np.iinfo(np.int64)

CATALOG: list[tuple[str, Space]] = [
    ("box-f32", Box(-1.0, 1.0, (3,))),
    ("box-rank0", Box(-2.5, 2.5, ())),
    ("box-f64-unbounded", Box("-inf", "inf", (2, 2), "float64")),
    ("box-f16", Box(-1.0, 1.0, (4,), "float16")),
    ("box-lower-only", Box(0.0, "inf", (3,))),
    ("box-upper-only", Box("-inf", 0.0, (3,))),
    ("box-elementwise", Box(np.array([-1.0, 0.0, -np.inf]), np.array([1.0, 5.0, 3.0]))),
    ("box-uint8-image", Box(0, 255, (4, 4, 3), "uint8")),
    ("box-int64-extremes", Box(int(I64.min), int(I64.max), (2,), "int64")),
    ("box-uint64-max", Box(0, 2**64 - 1, (2,), "uint64")),
    ("box-int16-elementwise", Box(np.array([-5, 0]), np.array([5, 9]), dtype="int16")),
    ("box-bool", Box(0, 1, (3,), "bool")),
    ("box-int8-rank0", Box(-3, 7, (), "int8")),
    ("discrete", Discrete(4)),
    ("discrete-start", Discrete(5, start=-2)),
    ("discrete-int32", Discrete(3, start=10, dtype="int32")),
    ("discrete-uint8-full", Discrete(256, dtype="uint8")),
    ("multibinary", MultiBinary(5)),
    ("multibinary-2d-bool", MultiBinary((2, 3), dtype="bool")),
    ("multibinary-int8", MultiBinary(3, dtype="int8")),
    ("multidiscrete", MultiDiscrete([2, 3, 4])),
    ("multidiscrete-start", MultiDiscrete([3, 4], "int32", start=[1, -2])),
    ("multidiscrete-2d", MultiDiscrete([[2, 3], [4, 5]], "uint16")),
    ("text", Text(8)),
    ("text-min0", Text(5, min_length=0, charset="ab")),
    ("text-unicode", Text(4, min_length=2, charset="αβγ✓")),
    (
        "dict-declared-order",
        Dict({"zeta": Discrete(2), "alpha": Box(0.0, 1.0, (2,)), "mid": Text(3, min_length=0)}),
    ),
    ("dict-empty", Dict({})),
    ("tuple", Tuple([Discrete(3), Box(-1.0, 1.0, (2,), "float64")])),
    (
        "nested",
        Dict(
            {
                "obs": Dict(
                    {"image": Box(0, 255, (2, 2, 3), "uint8"), "state": Box(-1.0, 1.0, (4,))}
                ),
                "extra": Tuple([MultiBinary(2), MultiDiscrete([2, 2], start=[5, 5]), Text(2)]),
            }
        ),
    ),
]

IDS = [name for name, _ in CATALOG]
SPACES = [space for _, space in CATALOG]


def rebuilt(space: Space, bridge: str | None = None) -> Space:
    """The same space rebuilt from its spec (optionally on another bridge)."""
    return space_from_spec(SpaceSpec._from_dict(space.spec._to_dict()), bridge=bridge)
