"""Metadata key names are defined once, in ``rlmesh._keys`` (issue 10 item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlmesh
from rlmesh import _keys

SRC = Path(rlmesh.__file__).parent
NAMESPACED = sorted(
    v for k, v in vars(_keys).items() if k.endswith("_KEY") and v.startswith("rlmesh.")
)


def test_every_namespaced_key_lives_in_the_rlmesh_namespace() -> None:
    assert NAMESPACED, "rlmesh._keys defines the namespaced metadata keys"
    assert len(set(NAMESPACED)) == len(NAMESPACED)


@pytest.mark.parametrize("key", NAMESPACED)
def test_no_module_spells_a_key_out_again(key: str) -> None:
    """Every other module imports the name; a second string literal could drift (the three env-tags copies did)."""
    offenders = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if path.name != "_keys.py"
        and (f'"{key}"' in path.read_text() or f"'{key}'" in path.read_text())
    ]
    assert offenders == []
