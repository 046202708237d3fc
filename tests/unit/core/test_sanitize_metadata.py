"""rlmesh.sanitize_metadata (MET-2): lossy, never fails on exotic values, cycles named."""

from __future__ import annotations

import enum
from collections import namedtuple

import numpy as np
import pytest

import rlmesh
from rlmesh.wire.meta import normalize


class Pose:
    def __str__(self) -> str:
        return "Pose(p=[0, 0, 1])"


class Mode(enum.Enum):
    FAST = "fast"
    OBJ = object()


def test_accepted_values_pass_through_unchanged() -> None:
    info = {"a": None, "b": True, "c": 3, "d": 2.5, "e": "s", "f": b"x", "g": {"h": [1, 2]}}
    assert rlmesh.sanitize_metadata(info) == info


def test_rich_values_become_their_str_and_the_codec_accepts_the_result() -> None:
    P = namedtuple("P", "x y")
    out = rlmesh.sanitize_metadata(
        {
            "pose": Pose(),
            7: np.arange(3),
            "s": np.float32(1.5),
            "t": (1, 2),
            "nt": P(1, 2),
            "m": Mode.FAST,
            "o": Mode.OBJ,
        }
    )
    assert out == {
        "pose": "Pose(p=[0, 0, 1])",
        "7": [0, 1, 2],
        "s": 1.5,
        "t": [1, 2],
        "nt": {"x": 1, "y": 2},
        "m": "fast",
        "o": "OBJ",
    }
    normalize(out)  # travels verbatim


def test_non_mapping_input_is_a_TypeError() -> None:
    with pytest.raises(TypeError, match="expects a mapping"):
        rlmesh.sanitize_metadata([1, 2])  # type: ignore[arg-type]


def test_a_reference_cycle_names_the_key_path() -> None:
    inner: dict[str, object] = {}
    info = {"a": {"b": [0, 1, inner]}}
    inner["loop"] = info
    with pytest.raises(ValueError, match=r"cycle at a\.b\.\[2\]\.loop"):
        rlmesh.sanitize_metadata(info)
