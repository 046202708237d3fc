"""An endpoint's counts for its Prometheus metrics: plain integers, no lock, no call per step.

The serve loops (rlmesh's own, and the openpi bridge's) bump a :class:`Meter`'s attributes in
the frame that already handles a request; a scrape reads them (``rlmesh.serve._metrics``
writes the text format). Nothing here imports anything: it sits at the bottom of the layers
so every serving path can count.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from typing import Any

__all__ = ["BATCH_BOUNDS", "DURATION_BOUNDS_NS", "Meter", "add_counts", "observe_predict"]

#: Histogram bucket upper bounds of the durations, in nanoseconds (10 µs to 10 s).
DURATION_BOUNDS_NS: tuple[int, ...] = tuple(
    int(s * 1e9)
    for s in (
        1e-5,
        2.5e-5,
        5e-5,
        1e-4,
        2.5e-4,
        5e-4,
        1e-3,
        2.5e-3,
        5e-3,
        1e-2,
        2.5e-2,
        5e-2,
        0.1,
        0.25,
        0.5,
        1.0,
        2.5,
        5.0,
        10.0,
    )
)
#: Histogram bucket upper bounds of a served model's batch sizes.
BATCH_BOUNDS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)

_COUNTS = (
    "steps",
    "resets",
    "episodes",
    "step_ns",
    "rx",
    "tx",
    "rejected",
    "predict_ns",
    "predicts",
    "batch_sum",
    "batches",
)
_BUCKETS = ("step_buckets", "predict_buckets", "batch_buckets")


class Meter:
    """One process's counts for an endpoint (the loop's thread writes, a scrape reads).

    Attributes:
        service: ``"env"`` or ``"model"``: which families a scrape shows.
        lanes: Lanes per step request (a vector endpoint's steps count every lane).
    """

    __slots__ = (*_COUNTS, *_BUCKETS, "lanes", "service")

    def __init__(self, service: str, lanes: int = 1) -> None:
        self.service = service
        self.lanes = lanes
        self.steps = 0  # lane steps
        self.resets = 0
        self.episodes = 0
        self.step_ns = 0
        self.rx = 0  # frame bytes received
        self.tx = 0  # frame bytes sent
        self.rejected = 0  # Busy refusals
        self.predict_ns = 0
        self.predicts = 0
        self.batch_sum = 0
        self.batches = 0
        self.step_buckets = [0] * (len(DURATION_BOUNDS_NS) + 1)
        self.predict_buckets = [0] * (len(DURATION_BOUNDS_NS) + 1)
        self.batch_buckets = [0] * (len(BATCH_BOUNDS) + 1)

    def snapshot(self) -> dict[str, Any]:
        """The counts as plain values (what a worker reports to its supervisor)."""
        out: dict[str, Any] = {name: getattr(self, name) for name in _COUNTS}
        for name in _BUCKETS:
            out[name] = list(getattr(self, name))
        return out


def observe_predict(meter: Meter, ns: int, batch: int) -> None:
    """One model forward of ``batch`` observations that took ``ns`` nanoseconds."""
    meter.predict_buckets[bisect_left(DURATION_BOUNDS_NS, ns)] += 1
    meter.predict_ns += ns
    meter.predicts += 1
    meter.batch_buckets[bisect_left(BATCH_BOUNDS, batch)] += 1
    meter.batch_sum += batch
    meter.batches += 1


def add_counts(total: dict[str, Any], part: Mapping[str, Any]) -> None:
    """Add ``part``'s counts into ``total`` (buckets element by element)."""
    for name in _COUNTS:
        total[name] = total.get(name, 0) + int(part.get(name, 0))
    for name in _BUCKETS:
        got = list(part.get(name, ()))
        have = total.setdefault(name, [0] * len(got))
        if len(have) < len(got):
            have.extend([0] * (len(got) - len(have)))
        for i, v in enumerate(got):
            have[i] += int(v)
