"""Per-episode predict context: ids, seeds, predict counters and state (MOD-18..21, DELTA-30..33).

A corner that declares a ``context`` parameter receives a :class:`PredictContext`
on every forward. The :class:`EpisodeStore` behind it is keyed by episode id and
bounded (65,536 live episodes, ``RLMESH_EPISODE_CAPACITY`` overrides): a *new*
episode past the bound fails that predict with ``RuntimeError``; live episodes
are never evicted. A model whose corners declare no context never touches the
store (P-3: the hot path pays nothing).
"""

from __future__ import annotations

import operator
import os
from typing import Any

from ..types import PredictContext

__all__ = [
    "DEFAULT_EPISODE_CAPACITY",
    "EpisodeStore",
    "PredictContext",
    "predict_seed",
]

DEFAULT_EPISODE_CAPACITY = 65_536
_CAPACITY_ENV = "RLMESH_EPISODE_CAPACITY"

_M64 = (1 << 64) - 1
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1


# PredictContext lives in rlmesh.types (one definition, re-exported here).


def _mix64(z: int) -> int:
    # SplitMix64 finalizer (Steele, Lea & Flood 2014): a bijective avalanche on 64 bits.
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def predict_seed(episode_seed: int, predict_index: int) -> int:
    """A deterministic per-predict seed in ``[0, 2**32)`` (DELTA-33).

    The value the SDK puts in ``context["predict_seed"]``: a model that draws its
    own randomness can call this to reproduce it. The law (ours, stable across
    releases; see DEC-D1): SplitMix64 over the seed, then over the index, high
    32 bits.

    Args:
        episode_seed: The episode's reset seed; must fit a signed 64-bit int.
        predict_index: The 0-based predict count within the episode; must fit an
            unsigned 64-bit int. ``bool`` is accepted as an int.

    Raises:
        TypeError: an argument is not an int (floats and strings are refused).
        OverflowError: an argument is outside its 64-bit range.

    >>> predict_seed(7, 0) == predict_seed(7, 0)
    True
    >>> 0 <= predict_seed(-5, 3) < 2**32
    True
    """
    seed = _as_int(episode_seed, "episode_seed")
    index = _as_int(predict_index, "predict_index")
    if not _I64_MIN <= seed <= _I64_MAX:
        raise OverflowError(f"episode_seed {seed} does not fit a signed 64-bit int")
    if not 0 <= index <= _M64:
        raise OverflowError(f"predict_index {index} does not fit an unsigned 64-bit int")
    z = _mix64(((seed & _M64) + 0x9E3779B97F4A7C15) & _M64)
    z = _mix64(((z ^ index) + 0x9E3779B97F4A7C15) & _M64)
    return z >> 32


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, (float, str, bytes)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None


def _capacity() -> int:
    raw = os.environ.get(_CAPACITY_ENV, "").strip()
    if raw.isdigit() and int(raw) >= 1:
        return int(raw)
    return DEFAULT_EPISODE_CAPACITY


class EpisodeStore:
    """Live per-episode context entries, bounded (DELTA-30)."""

    __slots__ = ("_capacity", "_entries")

    def __init__(self, capacity: int | None = None) -> None:
        self._capacity = _capacity() if capacity is None else capacity
        # episode id -> [episode_seed, next predict_index, state]
        self._entries: dict[str, list[Any]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def begin(self, episode_id: str, episode_seed: int | None) -> None:
        """Record a new episode's seed (no entry is made for an anonymous id)."""
        if not episode_id:
            return
        if episode_id not in self._entries and len(self._entries) >= self._capacity:
            raise RuntimeError(
                f"too many live episodes: the predict-context store holds {self._capacity} "
                f"(set {_CAPACITY_ENV} to raise the bound, or end episodes you no longer drive)"
            )
        self._entries[episode_id] = [episode_seed, 0, {}]

    def next(self, episode_id: str) -> PredictContext:
        """The context for the next predict of ``episode_id`` (advances its counter)."""
        if not episode_id:
            return {
                "episode_id": "",
                "episode_seed": None,
                "predict_index": 0,
                "predict_seed": None,
                "state": {},
            }
        entry = self._entries.get(episode_id)
        if entry is None:
            self.begin(episode_id, None)
            entry = self._entries[episode_id]
        seed, index, state = entry
        entry[1] = index + 1
        return {
            "episode_id": episode_id,
            "episode_seed": seed,
            "predict_index": index,
            "predict_seed": None if seed is None else predict_seed(seed, index),
            "state": state,
        }

    def end(self, episode_id: str) -> None:
        """Drop an episode's entry (its end edge)."""
        self._entries.pop(episode_id, None)

    def clear(self) -> None:
        self._entries.clear()
