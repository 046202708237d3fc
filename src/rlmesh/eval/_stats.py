"""Per-step timings in bounded memory: ``Timings`` (issue 28: a run's memory does not grow with steps).

A run times every predict and env step; keeping every sample cost ~80 bytes per step for
the whole run (gigabytes for a 10^8-step eval). :class:`Timings` keeps:

- the count, the sum (so ``avg`` is exact), the minimum and the maximum;
- the first :data:`EXACT_SAMPLES` samples exactly: up to that many steps the percentiles
  are exactly ``numpy.percentile``'s, as before;
- beyond that, a fixed histogram of :data:`BUCKETS` log-spaced buckets, each
  ``(1 + HIST_STEP)`` times wider than the last, from :data:`HIST_LOW` seconds up:
  a percentile is then its bucket's geometric middle, within ``HIST_STEP / 2`` (0.5 %)
  of the exact value, clamped to the observed ``[min, max]``.

Memory is at most ``EXACT_SAMPLES`` doubles plus ``BUCKETS`` counters per series
(~160 KB), whatever the number of steps.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

import numpy as np

__all__ = ["BUCKETS", "EXACT_SAMPLES", "HIST_LOW", "HIST_STEP", "Timings"]

#: Samples kept exactly before the histogram takes over (also the fold batch).
EXACT_SAMPLES = 16_384
#: Relative width of a histogram bucket.
HIST_STEP = 0.01
#: The lowest bucket's lower edge, in the samples' unit (seconds: 1 ns).
HIST_LOW = 1e-9
#: Buckets: from ``HIST_LOW`` up by ``(1 + HIST_STEP)`` each, to beyond 10^5 s (~28 h).
BUCKETS = math.ceil(math.log(1e14) / math.log1p(HIST_STEP)) + 1

_LOG_LOW = math.log(HIST_LOW)
_INV_STEP = 1.0 / math.log1p(HIST_STEP)


class Timings:
    """One timing series (seconds), aggregated in bounded memory; ``append`` per sample.

    >>> t = Timings()
    >>> for x in (0.001, 0.002, 0.003):
    ...     t.append(x)
    >>> t.count, round(t.mean() * 1e3, 6), t.percentiles([50]) == [0.002]
    (3, 2.0, True)
    """

    __slots__ = ("_below", "_buf", "_count", "_hist", "_max", "_min", "_sum")

    def __init__(self) -> None:
        self._buf = array("d")
        self._count = 0  # folded samples
        self._sum = 0.0
        self._min = math.inf
        self._max = -math.inf
        self._hist: np.ndarray[Any, Any] | None = None
        self._below = 0  # folded samples under HIST_LOW (zero or negative clock steps)

    def append(self, x: float) -> None:
        """Add one sample."""
        buf = self._buf
        buf.append(x)
        if len(buf) >= EXACT_SAMPLES + (
            self._hist is None
        ):  # the first fold: one past the exact samples
            self._fold()

    def _fold(self) -> None:
        arr = np.frombuffer(self._buf, dtype=np.float64)
        if arr.size == 0:
            return
        if self._hist is None:
            self._hist = np.zeros(BUCKETS, np.int64)
        self._count += int(arr.size)
        self._sum += math.fsum(arr.tolist())
        self._min = min(self._min, float(arr.min()))
        self._max = max(self._max, float(arr.max()))
        pos = arr[arr >= HIST_LOW]
        self._below += int(arr.size - pos.size)
        idx = np.minimum(((np.log(pos) - _LOG_LOW) * _INV_STEP).astype(np.int64), BUCKETS - 1)
        np.add.at(self._hist, idx, 1)
        self._buf = array("d")

    @property
    def count(self) -> int:
        """Number of samples."""
        return self._count + len(self._buf)

    @property
    def stored(self) -> int:
        """Numbers held in memory (exact samples plus histogram buckets): bounded."""
        return len(self._buf) + (0 if self._hist is None else BUCKETS)

    def mean(self) -> float:
        """The exact mean (``nan`` when empty)."""
        n = self.count
        if n == 0:
            return math.nan
        return (self._sum + math.fsum(self._buf)) / n

    def percentiles(self, qs: list[float]) -> list[float]:
        """The ``qs`` percentiles: exact while every sample is kept, else within 0.5 %."""
        if self._hist is None:
            arr = np.frombuffer(self._buf, dtype=np.float64)
            return [float(v) for v in np.percentile(arr, qs)] if arr.size else [math.nan] * len(qs)
        self._fold()
        hist = self._hist
        assert hist is not None
        n = self._count
        cum = np.cumsum(hist)
        out = []
        for q in qs:
            rank = q / 100.0 * (n - 1)  # 0-based rank, as numpy's linear method
            if rank < self._below:
                value = self._min
            else:
                b = int(np.searchsorted(cum, rank - self._below, side="right"))
                b = min(b, BUCKETS - 1)
                value = math.exp(_LOG_LOW + (b + 0.5) / _INV_STEP)
            out.append(min(max(value, self._min), self._max))
        return out

    def summary(self, scale: float = 1.0) -> tuple[int, float, float, float, float]:
        """``(count, avg, p50, p95, p99)`` with every time multiplied by ``scale``."""
        p50, p95, p99 = self.percentiles([50, 95, 99])
        return self.count, self.mean() * scale, p50 * scale, p95 * scale, p99 * scale
