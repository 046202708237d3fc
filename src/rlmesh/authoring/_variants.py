"""``Variant``: one named, already-bound sub-environment of an ``EnvFactory`` catalog (AUTH-11).

A factory's optional ``enumerate_variants()`` classmethod returns (or yields)
these; describe lists them (AUTH-17) so a dashboard or env hub can show and
spawn them without building anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Variant", "normalize_catalog"]


class Variant:
    """One concrete sub-environment in an ``EnvFactory`` catalog.

    Args:
        id: Non-empty, factory-unique handle (prefer a stable upstream identity,
            e.g. ``"libero_10/pick_up_the_black_bowl"``, over a positional index).
        params: ``make()`` kwargs binding only the identity-defining params; the
            free dials stay in the factory's ``ParamSpec``. Copied, so reusing
            one dict across entries in a loop is safe.
        **metadata: Open display bag. ``name`` is the title a dashboard shows;
            every other key passes through untouched (e.g. ``instruction``).

    Raises:
        ValueError: ``id`` is not a non-empty string or ``params`` is not a mapping.

    >>> v = Variant("easy", {"level": 0}, name="Easy")
    >>> v
    Variant(id='easy', params={'level': 0}, metadata={'name': 'Easy'})
    >>> v == Variant("easy", {"level": 0}, name="Easy")
    True
    """

    __slots__ = ("id", "metadata", "params")

    def __init__(self, id: str, params: Mapping[str, Any], /, **metadata: Any) -> None:
        if not isinstance(id, str) or not id:
            raise ValueError(f"Variant id must be a non-empty string, got {id!r}")
        if not isinstance(params, Mapping):
            raise ValueError(
                f"Variant params must be a mapping of make() kwargs, got {type(params).__name__} "
                f"{params!r}; write Variant({id!r}, {{'name': value}})"
            )
        self.id: str = id
        self.params: dict[str, Any] = dict(params)
        self.metadata: dict[str, Any] = dict(metadata)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Variant):
            return NotImplemented
        return (self.id, self.params, self.metadata) == (other.id, other.params, other.metadata)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Variant(id={self.id!r}, params={self.params!r}, metadata={self.metadata!r})"


def normalize_catalog(entries: Iterable[Any]) -> list[Variant]:
    """Turn an ``enumerate_variants()`` result into Variants (AUTH-17).

    Entries are :class:`Variant` objects or mappings with ``id`` and
    ``params`` (any other key, and an explicit ``metadata`` mapping, become
    metadata). The catalog is never flattened.

    Raises:
        ValueError: an entry of another type, a bad id or params, or a duplicate id.
    """
    if isinstance(entries, (str, bytes, Mapping)):
        raise ValueError(
            f"enumerate_variants() must return a list (or generator) of Variant, got "
            f"{type(entries).__name__}"
        )
    out: list[Variant] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if isinstance(entry, Variant):
            v = entry
        elif isinstance(entry, Mapping):
            extra = {k: val for k, val in entry.items() if k not in ("id", "params", "metadata")}
            meta = entry.get("metadata") or {}
            if not isinstance(meta, Mapping):
                raise ValueError(f"catalog entry {i}: metadata must be a mapping, got {meta!r}")
            params = entry.get("params", {})
            try:
                v = Variant(
                    entry.get("id"),  # type: ignore[arg-type]
                    params,
                    **{**dict(meta), **{str(k): x for k, x in extra.items()}},
                )
            except ValueError as exc:
                raise ValueError(f"catalog entry {i}: {exc}") from None
        else:
            raise ValueError(
                f"catalog entry {i} must be a Variant or a mapping, got {type(entry).__name__} {entry!r}"
            )
        if v.id in seen:
            raise ValueError(
                f"catalog entry {i}: duplicate variant id {v.id!r}; ids must be factory-unique"
            )
        seen.add(v.id)
        out.append(v)
    return out
