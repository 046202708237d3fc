"""Variant and catalog normalization (AUTH-11, AUTH-17)."""

from __future__ import annotations

from typing import Any

import pytest

from rlmesh.authoring import Variant
from rlmesh.authoring._variants import normalize_catalog


def test_Variant_takes_id_and_params_positionally_and_metadata_by_keyword() -> None:
    v = Variant("libero_10/pick", {"task": 3}, name="Pick", instruction="pick it up")
    assert v.id == "libero_10/pick"
    assert v.params == {"task": 3}
    assert v.metadata == {"name": "Pick", "instruction": "pick it up"}
    with pytest.raises(TypeError):
        Variant(id="x", params={})  # type: ignore[misc]


def test_Variant_copies_params_so_a_reused_dict_is_safe() -> None:
    shared: dict[str, Any] = {"level": 0}
    catalog = []
    for level in range(3):
        shared["level"] = level
        catalog.append(Variant(f"l{level}", shared))
    assert [v.params["level"] for v in catalog] == [0, 1, 2]


def test_Variant_params_must_be_a_mapping() -> None:
    with pytest.raises(ValueError, match="Variant params must be a mapping"):
        Variant("x", [("a", 1)])  # type: ignore[arg-type]


@pytest.mark.parametrize("bad_id", ["", None, 3])
def test_Variant_id_must_be_a_non_empty_string(bad_id: Any) -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        Variant(bad_id, {})


def test_Variant_has_value_equality_and_a_readable_repr() -> None:
    a = Variant("a", {"x": 1}, name="A")
    assert a == Variant("a", {"x": 1}, name="A")
    assert a != Variant("a", {"x": 2}, name="A")
    assert repr(a) == "Variant(id='a', params={'x': 1}, metadata={'name': 'A'})"
    assert not hasattr(a, "__dict__")  # __slots__ id/params/metadata


def test_normalize_catalog_accepts_variants_mappings_and_generators() -> None:
    def gen() -> Any:
        yield Variant("a", {"x": 1})
        yield {"id": "b", "params": {"x": 2}, "name": "Bee", "metadata": {"k": 1}}

    out = normalize_catalog(gen())
    assert out == [Variant("a", {"x": 1}), Variant("b", {"x": 2}, k=1, name="Bee")]


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        ([Variant("a", {}), Variant("a", {})], "duplicate variant id 'a'"),
        ([("a", {})], "must be a Variant or a mapping"),
        ([{"id": "", "params": {}}], "non-empty string"),
        ([{"id": "a", "params": 3}], "params must be a mapping"),
        ({"id": "a"}, "must return a list"),
    ],
)
def test_normalize_catalog_rejects_bad_entries(entries: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        normalize_catalog(entries)
