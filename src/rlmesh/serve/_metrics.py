"""Prometheus metrics of an endpoint: plain counters in the loop, the text format on a port.

The serve loop bumps plain integer attributes of a :class:`Meter` (no lock, no call, one
C ``bisect`` for a histogram bucket); nothing is counted when metrics are off (the loop's
meter is ``None``). A scrape reads them through a collector and ``prometheus-client``
writes the text format, on a port of the endpoint's own (``--metrics ADDR``,
``ServeOptions(metrics_address=...)``), loopback unless told otherwise.

The names (docs/serving.md, "Metrics"): ``rlmesh_env_steps_total`` (lane steps),
``rlmesh_env_resets_total``, ``rlmesh_env_episodes_total``,
``rlmesh_env_step_duration_seconds`` (the endpoint's time per step request: the env's own
step plus decoding the action and checking the observation), ``rlmesh_sessions_active``,
``rlmesh_sessions_rejected_total``, ``rlmesh_auth_failures_total``,
``rlmesh_wire_bytes_total{direction="received"|"sent"}``; a model endpoint
``rlmesh_model_predict_duration_seconds`` and ``rlmesh_model_batch_size``.

A multi-session endpoint's workers count in their own processes and report to their
supervisor (:class:`Reports`) about once a second and when they end: one scrape per
endpoint, the workers' counts summed.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .._meter import (
    BATCH_BOUNDS as BATCH_BOUNDS,
    DURATION_BOUNDS_NS as DURATION_BOUNDS_NS,
    Meter as Meter,
    add_counts as add_counts,
    observe_predict as observe_predict,
)
from ..errors import BindFailed, DependencyMissing
from ..transport.address import parse_bind_address
from ..transport.busypoll import quiet_threads
from ..wire import messages as m

__all__ = [
    "BATCH_BOUNDS",
    "DURATION_BOUNDS_NS",
    "Meter",
    "MetricsServer",
    "Reports",
    "add_counts",
    "load_prometheus",
    "observe_predict",
    "observe_reply",
    "start_reports",
]


def observe_reply(meter: Meter, msg: Any, nbytes: int) -> None:
    """A reply of ``nbytes`` frame bytes went out (the serve loop's general path)."""
    meter.tx += nbytes
    kind = type(msg)
    if kind is m.ResetReply:
        meter.resets += 1
    elif kind is m.Busy:
        meter.rejected += 1
    elif kind is m.StepReply:  # a step the straight road did not take
        meter.steps += meter.lanes
        meter.step_buckets[bisect_left(DURATION_BOUNDS_NS, msg.endpoint_ns)] += 1
        meter.step_ns += msg.endpoint_ns
        meter.episodes += len(msg.completed)


class Reports:
    """A supervisor's books on its workers' counts: the latest report of each live worker,
    plus everything finished workers counted (so totals never go down)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, dict[str, Any]] = {}
        self._retired: dict[str, Any] = {}

    def update(self, worker: int, counts: Mapping[str, Any]) -> None:
        with self._lock:
            self._live[worker] = dict(counts)

    def retire(self, worker: int) -> None:
        """A worker ended: its last report joins the retired totals."""
        with self._lock:
            last = self._live.pop(worker, None)
            if last is not None:
                add_counts(self._retired, last)

    def total(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = {}
            add_counts(out, self._retired)
            for counts in self._live.values():
                add_counts(out, counts)
            return out


#: How often a session worker reports its counts to its supervisor.
REPORT_SECONDS = 1.0


def start_reports(
    meter: Meter | None, send: Callable[[dict[str, Any]], None]
) -> Callable[[], None]:
    """Report ``meter``'s counts through ``send`` every :data:`REPORT_SECONDS` on a daemon
    thread; returns the function that stops it and sends the last report (a no-op without a meter)."""
    if meter is None:
        return lambda: None
    stop = threading.Event()

    def report() -> None:
        try:
            send(meter.snapshot())
        except OSError:
            pass  # the supervisor is busy or gone: the next report (or the last) carries it

    def run() -> None:
        while not stop.wait(REPORT_SECONDS):
            report()

    thread = threading.Thread(target=run, name="rlmesh-metrics-report", daemon=True)
    quiet_threads(+1)  # it sleeps between reports: the session's polling stays on
    thread.start()

    def end() -> None:
        stop.set()
        thread.join(REPORT_SECONDS + 1.0)
        quiet_threads(-1)
        report()

    return end


def load_prometheus() -> Any:
    """``prometheus_client``, or :class:`DependencyMissing` naming the ``metrics`` extra."""
    try:
        import prometheus_client
        import prometheus_client.core
    except ImportError:
        raise DependencyMissing(
            "metrics need prometheus-client: pip install 'rlmesh-py[metrics]' (or pip install "
            "prometheus-client), or serve without --metrics / metrics_address",
            name="prometheus_client",
        ) from None
    return prometheus_client


def _cumulative(
    buckets: list[int], bounds: tuple[int, ...], scale: float
) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(bounds, buckets):
        running += count
        out.append((repr(bound * scale) if scale != 1 else str(bound), float(running)))
    running += buckets[len(bounds)] if len(buckets) > len(bounds) else 0
    out.append(("+Inf", float(running)))
    return out


def families(values: Mapping[str, Any], service: str) -> Iterator[Any]:
    """The metric families of one endpoint's values (``prometheus_client`` objects)."""
    core = load_prometheus().core
    counter, gauge, hist = (
        core.CounterMetricFamily,
        core.GaugeMetricFamily,
        core.HistogramMetricFamily,
    )
    empty_d = [0] * (len(DURATION_BOUNDS_NS) + 1)
    if service == "env":
        yield counter(
            "rlmesh_env_steps",
            "Env steps served (every lane of a vector step counts)",
            value=values.get("steps", 0),
        )
        yield counter("rlmesh_env_resets", "Reset requests served", value=values.get("resets", 0))
        yield counter(
            "rlmesh_env_episodes",
            "Episodes that ended (terminated, truncated or cut short by a reset)",
            value=values.get("episodes", 0),
        )
        yield hist(
            "rlmesh_env_step_duration_seconds",
            "The endpoint's time per step request: the env's step plus decoding the action and checking the observation",
            buckets=_cumulative(values.get("step_buckets") or empty_d, DURATION_BOUNDS_NS, 1e-9),
            sum_value=values.get("step_ns", 0) / 1e9,
        )
    else:
        yield hist(
            "rlmesh_model_predict_duration_seconds",
            "Time per model forward (one predict, or one fused batch)",
            buckets=_cumulative(values.get("predict_buckets") or empty_d, DURATION_BOUNDS_NS, 1e-9),
            sum_value=values.get("predict_ns", 0) / 1e9,
        )
        yield hist(
            "rlmesh_model_batch_size",
            "Observations per model forward (sessions fused into one predict_batch call)",
            buckets=_cumulative(
                values.get("batch_buckets") or [0] * (len(BATCH_BOUNDS) + 1), BATCH_BOUNDS, 1
            ),
            sum_value=float(values.get("batch_sum", 0)),
        )
    yield gauge(
        "rlmesh_sessions_active",
        "Client sessions being served now",
        value=values.get("sessions_active", 0),
    )
    yield counter(
        "rlmesh_sessions_rejected",
        "Clients refused because every session was in use (EndpointBusy)",
        value=values.get("rejected", 0),
    )
    yield counter(
        "rlmesh_auth_failures",
        "Handshakes, probes and shutdowns refused for a missing or wrong token",
        value=values.get("auth_failures", 0),
    )
    wire = counter(
        "rlmesh_wire_bytes",
        "Bytes of frames received and sent (prefix, header and payload)",
        labels=["direction"],
    )
    wire.add_metric(["received"], values.get("rx", 0))
    wire.add_metric(["sent"], values.get("tx", 0))
    yield wire


class _Collector:
    def __init__(self, read: Callable[[], Mapping[str, Any]], service: str) -> None:
        self._read = read
        self._service = service

    def collect(self) -> Iterator[Any]:
        yield from families(self._read(), self._service)


class MetricsServer:
    """The Prometheus text format of one endpoint, on ``address`` (its own HTTP port).

    Args:
        address: ``host:port`` or a bare port (127.0.0.1); port 0 picks a free one.
        read: Returns the endpoint's values (counts, ``sessions_active``, ``auth_failures``).
        service: ``"env"`` or ``"model"``.

    Raises:
        DependencyMissing: ``prometheus-client`` is not installed (the ``metrics`` extra).
        BindFailed: the port cannot be bound.
    """

    def __init__(self, address: str, read: Callable[[], Mapping[str, Any]], service: str) -> None:
        prom = load_prometheus()
        addr = parse_bind_address(address)
        if addr.transport != "tcp" or addr.tls:
            raise ValueError(f"metrics_address must be host:port or a port, got {address!r}")
        registry = prom.CollectorRegistry(auto_describe=False)
        registry.register(_Collector(read, service))
        try:
            self._server, self._thread = prom.start_http_server(
                addr.port, addr=addr.host, registry=registry
            )
        except OSError as exc:
            raise BindFailed(f"failed to bind the metrics port {addr.url}: {exc}") from exc
        quiet_threads(+1)  # it waits in select(): serving threads may still busy-poll
        port = self._server.server_port
        host = f"[{addr.host}]" if ":" in addr.host else addr.host
        self.address = f"http://{host}:{port}/metrics"

    def close(self) -> None:
        """Stop serving metrics (idempotent)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        self._thread.join(5.0)
        quiet_threads(-1)
