"""The metrics' books: plain counters, histogram buckets, a supervisor's sums (issue 36)."""

from __future__ import annotations

from conftest import require
from rlmesh.serve._metrics import (
    BATCH_BOUNDS,
    DURATION_BOUNDS_NS,
    Meter,
    Reports,
    families,
    observe_predict,
)


def test_a_forward_lands_in_its_buckets() -> None:
    meter = Meter("model")
    observe_predict(meter, DURATION_BOUNDS_NS[0], 1)  # exactly on a bound: that bucket (le)
    observe_predict(meter, DURATION_BOUNDS_NS[-1] + 1, 3)  # past the last bound: +Inf
    assert meter.predict_buckets[0] == 1 and meter.predict_buckets[-1] == 1
    assert meter.batch_buckets[BATCH_BOUNDS.index(1)] == 1
    assert meter.batch_buckets[BATCH_BOUNDS.index(4)] == 1  # 3 observations: the le=4 bucket
    assert (meter.predicts, meter.batches, meter.batch_sum) == (2, 2, 4)


def test_a_supervisor_keeps_the_counts_of_workers_that_ended() -> None:
    reports = Reports()
    a, b = Meter("env"), Meter("env")
    a.steps, b.steps = 30, 20
    a.step_buckets[2] = 30
    reports.update(1, a.snapshot())
    reports.update(2, b.snapshot())
    assert reports.total()["steps"] == 50
    a.steps = 35
    reports.update(1, a.snapshot())  # a later report replaces the earlier one
    reports.retire(1)  # the worker ended: its last count stays in the totals
    reports.retire(1)  # twice is harmless
    total = reports.total()
    assert total["steps"] == 55 and total["step_buckets"][2] == 30


def test_the_families_parse_as_prometheus_reads_them() -> None:
    prometheus_client = require("prometheus_client", "the metrics extra")
    from prometheus_client.parser import text_string_to_metric_families

    meter = Meter("env", lanes=4)
    meter.steps, meter.step_ns = 8, 2_000_000
    meter.step_buckets[5] = 2
    values = {**meter.snapshot(), "sessions_active": 1, "auth_failures": 3}
    registry = prometheus_client.CollectorRegistry(auto_describe=False)

    class C:
        def collect(self) -> object:
            return families(values, "env")

    registry.register(C())  # type: ignore[arg-type]
    text = prometheus_client.generate_latest(registry).decode()
    got = {
        s.name + str(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert got["rlmesh_env_steps_total[]"] == 8
    assert got["rlmesh_auth_failures_total[]"] == 3
    assert got["rlmesh_sessions_active[]"] == 1
    assert got["rlmesh_env_step_duration_seconds_sum[]"] == 0.002
    assert got["rlmesh_env_step_duration_seconds_count[]"] == 2
    assert got["rlmesh_wire_bytes_total[('direction', 'received')]"] == 0
