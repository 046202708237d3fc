"""A run's memory does not grow with its steps (issue 28 item 5).

``rlmesh.run`` used to keep every step's predict and env-step time until the run ended
(~80 bytes per step: gigabytes for a 10^8-step eval). The timings are now running
aggregates (``rlmesh.eval._stats.Timings``): exact up to ``EXACT_SAMPLES`` samples, a
fixed log-spaced histogram beyond. Checked by counts: the bytes a run holds between two
points 25,000 steps apart, and the numbers a ``Timings`` holds after 300,000 samples.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlmesh
from rlmesh.eval._stats import BUCKETS, EXACT_SAMPLES, HIST_STEP, Timings


class _Flat(gym.Env):  # type: ignore[misc]
    """Never ends on its own and allocates nothing that outlives a step."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self) -> None:
        self._obs = np.zeros(3, np.float32)

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        return self._obs, {}

    def step(self, action: Any) -> Any:
        return self._obs, 0.0, False, False, {}


class _Probe(rlmesh.RunHooks):
    """Reads the traced heap size at two steps of the run."""

    def __init__(self, at: tuple[int, int]) -> None:
        self.at = at
        self.heap: list[int] = []

    def on_step(self, event: Any) -> None:
        if event.step in self.at:
            self.heap.append(tracemalloc.get_traced_memory()[0])


@pytest.mark.slow  # 25,000 steps under tracemalloc: kept out of make test-fast
def test_a_run_holds_no_per_step_state() -> None:
    first, last = 5_000, 30_000
    probe = _Probe((first, last))
    tracemalloc.start()
    try:
        result = rlmesh.run(
            rlmesh.RANDOM_SAMPLE, _Flat(), seeds=[0], max_episode_steps=last + 1, hooks=probe
        )
    finally:
        tracemalloc.stop()
    assert result.total_steps == last + 1
    grown = probe.heap[1] - probe.heap[0]
    # Per-step lists would hold 25,000 x 2 x (8-byte slot + 24-byte float) = 1.6 MB more here;
    # the aggregates hold at most 2 x (16,384 doubles + a 26 KB histogram) ~ 0.32 MB.
    assert grown < 700_000, f"the run's heap grew {grown} bytes over {last - first} steps"
    (step_row,) = [r for r in result.telemetry if r.op == "env.step"]
    assert step_row.count == last + 1 and 0 < step_row.p50 <= step_row.p95 <= step_row.p99


def test_timings_hold_a_bounded_number_of_values_and_stay_close_to_exact() -> None:
    rng = np.random.default_rng(7)
    samples = rng.lognormal(-7.0, 1.2, 300_000)
    t = Timings()
    for x in samples.tolist():
        t.append(x)
    assert t.count == samples.size
    assert t.stored <= EXACT_SAMPLES + 1 + BUCKETS
    assert t.mean() == pytest.approx(float(samples.mean()), rel=1e-12)
    exact = np.percentile(samples, [50, 95, 99])
    for got, want in zip(t.percentiles([50, 95, 99]), exact, strict=True):
        assert abs(got - want) <= HIST_STEP * want  # documented: within half a bucket (0.5 %)


def test_timings_are_exact_up_to_the_exact_sample_count() -> None:
    rng = np.random.default_rng(3)
    samples = rng.exponential(0.002, EXACT_SAMPLES)
    t = Timings()
    for x in samples.tolist():
        t.append(x)
    assert t.percentiles([50, 95, 99]) == [float(v) for v in np.percentile(samples, [50, 95, 99])]
    count, avg, p50, _, _ = t.summary(1e3)
    assert count == EXACT_SAMPLES and avg == pytest.approx(float(samples.mean()) * 1e3)
    assert p50 == pytest.approx(float(np.percentile(samples, 50)) * 1e3)


def test_timings_count_zero_and_negative_clock_steps() -> None:
    t = Timings()
    for x in [0.0] * (EXACT_SAMPLES + 10) + [0.001] * 10:
        t.append(x)
    assert t.percentiles([50])[0] == 0.0 and t.percentiles([100])[0] == pytest.approx(
        0.001, rel=HIST_STEP
    )
