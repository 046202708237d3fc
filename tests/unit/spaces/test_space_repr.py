"""Gymnasium-style text for specs and wrappers (SPC-6)."""

from __future__ import annotations

import numpy as np
import pytest

from rlmesh.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Text, Tuple

CASES = [
    (Box(-1.0, 1.0, (3,)), "Box(-1.0, 1.0, (3,), float32)"),
    (Box(-1, 1, ()), "Box(-1.0, 1.0, (), float32)"),
    (Box("-inf", "inf", (2, 3), "float64"), "Box(-inf, inf, (2, 3), float64)"),
    (Box(0.0, "inf", (2,)), "Box(0.0, inf, (2,), float32)"),
    (Box(np.array([0.0, 1.0]), np.array([2.0, 3.0])), "Box([…], […], (2,), float32)"),
    (Box(0, 255, (84, 84), "uint8"), "Box(0, 255, (84, 84), uint8)"),
    (Box(0, 1, (2,), "bool"), "Box(False, True, (2,), bool)"),
    (Discrete(4), "Discrete(4)"),
    (Discrete(4, start=-1), "Discrete(4, start=-1)"),
    (Discrete(4, dtype="int32"), "Discrete(4, dtype=int32)"),
    (MultiBinary((2, 3)), "MultiBinary((2, 3))"),
    (MultiBinary(4, dtype="bool"), "MultiBinary((4,), dtype=bool)"),
    (MultiDiscrete([2, 3]), "MultiDiscrete([2, 3])"),
    (
        MultiDiscrete([2, 3], "int32", start=[1, 0]),
        "MultiDiscrete([2, 3], start=[1, 0], dtype=int32)",
    ),
    (Text(8), "Text(1, 8)"),
    (Text(8, charset="ab"), 'Text(1, 8, charset="ab")'),
    (Text(8, min_length=0, charset='a"'), 'Text(0, 8, charset="a\\"")'),
    (
        Dict({"obs": Box(-1.0, 1.0, (3,)), "flag": Discrete(2)}),
        'Dict("obs": Box(-1.0, 1.0, (3,), float32), "flag": Discrete(2))',
    ),
    (
        Tuple([Discrete(2), Box(-1.0, 1.0, (3,))]),
        "Tuple(Discrete(2), Box(-1.0, 1.0, (3,), float32))",
    ),
    (Dict({}), "Dict()"),
]


@pytest.mark.parametrize(("space", "text"), CASES, ids=[t for _, t in CASES])
def test_repr_matches_gymnasium_style_text(space, text: str) -> None:  # SPC-6
    assert repr(space) == text
    assert repr(space.spec) == text
