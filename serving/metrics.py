"""Prometheus metrics, served where TF Serving serves them: GET /monitoring/prometheus/metrics.

Enabled with TF Serving's `--monitoring_config_file` (text proto, below) or `--metrics`:

    prometheus_config { enable: true, path: "/monitoring/prometheus/metrics" }

Every request is counted and timed with labels model, version, signature, runner (graph or an
eager mode), protocol (grpc/rest) and status (the gRPC code name); the model's own run time is a
separate histogram, so a load test can split server-side latency into model time and the rest.
A request whose client stopped waiting before its answer (a cancelled gRPC call, a closed REST
connection) has status CANCELLED, and is counted again by where it was then, in
`graphserve_cancelled_requests_total{protocol, stage}` (graphserve.serving.deadline's stages).
Requests naming a model the server does not have share the model label "(unknown)", so clients
cannot grow the metrics without bound. Version states come from the registry at scrape time, and
so do a batched version's batcher counters (batches run, the requests and rows in them, padding
rows, rejections, requests dropped from the queue unrun as their client left or their deadline
passed: requests / batches is the batch size it forms, TF Serving's processed_batch_size).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import text_format
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.samples import Sample

from graphserve.core.defaults import DEFAULT_METRICS_PATH
from graphserve.core.errors import MonitoringConfigError, ServingError
from graphserve.core.textproto import message_class
from graphserve.serving.deadline import (
    RUNNING,
    current_cancellation,
    current_deadline,
    ended_by_deadline,
)

if TYPE_CHECKING:
    from graphserve.serving.ondemand import OnDemandManager
    from graphserve.serving.registry import ModelRegistry, Servable

__all__ = [
    "DEFAULT_METRICS_PATH",
    "Measure",
    "MonitoringConfigError",
    "ServingMetrics",
    "Timed",
    "load_monitoring_config",
    "merge_families",
]

# Serving latencies live between 100 µs and seconds; Prometheus' defaults start at 5 ms.
_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01,
    0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

_REQUEST_LABELS = ("model", "version", "signature", "runner", "protocol")
UNKNOWN_MODEL = "(unknown)"  # the model label of requests naming a model this server lacks


def load_monitoring_config(path: Path) -> str | None:
    """The metrics path a TF Serving monitoring config file enables, or None if disabled."""
    config_class = message_class(
        "tensorflow.serving",
        {
            "MonitoringConfig": {"prometheus_config": (1, "PrometheusConfig")},
            "PrometheusConfig": {"enable": (1, "bool"), "path": (2, "string")},
        },
        "MonitoringConfig",
    )
    config = config_class()
    try:
        text_format.Parse(Path(path).read_text(), config)
    except (OSError, text_format.ParseError) as exc:
        raise MonitoringConfigError(f"monitoring config file {path}: {exc}") from None
    prometheus = config.prometheus_config
    if not prometheus.enable:
        return None
    return prometheus.path or DEFAULT_METRICS_PATH


@dataclass
class Measure:
    """What a front end learns while it handles one request; observed when it ends."""

    model: str
    protocol: str
    servable: Servable | None = None
    signature: str = ""
    cold_load: float | None = None  # s the request waited for its version to load on demand
    arrived_ns: int = field(default_factory=time.time_ns)  # when it came (the request log's)


class Timed:
    """ServingMetrics.measure's scope: a class rather than a generator, as every request enters
    one."""

    __slots__ = ("_metrics", "_started", "measure")

    def __init__(self, metrics: ServingMetrics, measure: Measure) -> None:
        self._metrics = metrics
        self.measure = measure
        self._started = 0.0

    def __enter__(self) -> Measure:
        self._started = time.perf_counter()
        return self.measure

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object
    ) -> None:
        if exc is None:
            status = "OK"
        elif isinstance(exc, ServingError):
            status = exc.grpc_status
        elif isinstance(exc, asyncio.CancelledError):  # asyncio's front end cancels a call
            status = _left_status()
        elif isinstance(exc, Exception):
            status = "INTERNAL"
        else:  # KeyboardInterrupt, SystemExit: not the request's doing
            status = "OK"
        self._metrics.finish(self.measure, status, self._started)


class ServingMetrics:
    def __init__(
        self,
        registry: ModelRegistry,
        path: str = DEFAULT_METRICS_PATH,
        on_demand: OnDemandManager | None = None,
    ) -> None:
        self.path = path
        self.registry = registry
        # No `_created` series: TF Serving has none, and a server with many models renders one
        # per model and metric (10 % of the page with 200 models resident)
        disable_created_metrics()
        self.prometheus = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "graphserve_requests",
            "Predict requests, by outcome (status is the gRPC code name).",
            (*_REQUEST_LABELS, "status"),
            registry=self.prometheus,
        )
        self.latency = Histogram(
            "graphserve_request_latency_seconds",
            "Server-side request latency: decoding, validation, the model, encoding.",
            _REQUEST_LABELS,
            buckets=_BUCKETS,
            registry=self.prometheus,
        )
        self.cancelled = Counter(
            "graphserve_cancelled_requests",
            "Requests whose client stopped waiting (a cancelled gRPC call, a closed REST "
            "connection) before their answer, by where they were: pool (waiting for a thread; "
            "not run), queue (the server had started, the model had not: the batch queue, "
            "mostly; not run), running (the model had started: its answer was dropped).",
            ("protocol", "stage"),
            registry=self.prometheus,
        )
        self.runtime = Histogram(
            "graphserve_runtime_latency_seconds",
            "Time inside the model (the runner) alone.",
            ("model", "version", "signature", "runner"),
            buckets=_BUCKETS,
            registry=self.prometheus,
        )
        self.prometheus.register(_VersionStates(registry))
        ProcessCollector(registry=self.prometheus)  # process_resident_memory_bytes, CPU, fds
        self.cold: Counter | None = None
        if on_demand is not None:
            self.prometheus.register(_Residency(on_demand))
            self.cold = Counter(
                "graphserve_cold_requests",
                "Requests that waited for their model to load on demand (once per request).",
                ("model",),
                registry=self.prometheus,
            )

    def measure(self, model: str, protocol: str) -> Timed:
        """One request's scope (`with metrics.measure(model, protocol) as measure:`): counted
        by how it ended, timed when it answered."""
        return Timed(self, Measure(model, protocol))

    def finish(self, measure: Measure, status: str, started: float) -> None:
        """Count a request that ended with `status` (a gRPC code name; an answer whose client
        had left counts as that), timed from `started` (time.perf_counter()) if it answered."""
        cancellation = current_cancellation()
        if status == "OK" and cancellation is not None and cancellation.cancelled:
            status = _left_status()  # answered, but its client had left: the answer is dropped
        labels = self._labels(measure)
        self.requests.labels(*labels, status).inc()
        if status == "CANCELLED":
            stage = cancellation.stage if cancellation is not None else RUNNING
            self.cancelled.labels(measure.protocol, stage).inc()
        if measure.cold_load is not None and self.cold is not None:
            self.cold.labels(labels[0]).inc()
        if status == "OK":
            self.latency.labels(*labels).observe(time.perf_counter() - started)

    def observe_runtime(self, servable: Servable, signature: str, seconds: float) -> None:
        self.runtime.labels(
            servable.name, str(servable.version), signature, servable.runner.kind
        ).observe(seconds)

    def _labels(self, m: Measure) -> tuple[str, ...]:
        version = str(m.servable.version) if m.servable else ""
        runner = m.servable.runner.kind if m.servable else ""
        # Names clients make up get one label value, not a series each (memory without bound).
        known = m.servable is not None or self.registry.knows(m.model)
        return (m.model if known else UNKNOWN_MODEL, version, m.signature, runner, m.protocol)

    # With `serve --workers N`: every worker's families and the supervisor's, by who they are
    # (serving.workers sets it in each worker). A scrape then renders the server's page.
    gather: Callable[[], list[tuple[str, list[Metric]]]] | None = None

    def families(self) -> list[Metric]:
        """What this process counts, as Prometheus families (what a worker hands the others)."""
        return list(self.prometheus.collect())

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type: this process's, or with `gather` the
        server's, every worker's summed (merge_families)."""
        if self.gather is None:
            return generate_latest(self.prometheus), CONTENT_TYPE_LATEST
        merged = merge_families(self.gather(), self.families())
        return generate_latest(_Families(merged)), CONTENT_TYPE_LATEST


# What each worker of a server has of its own, labelled with the worker: its process (memory, CPU,
# file descriptors), and the traces of its own copy of each model.
_PER_WORKER = ("process_", "graphserve_function_traces")
# The server's state, the same in every worker that has caught up: the asking worker's, as its
# GetModelStatus would say.
_THE_ASKERS = ("graphserve_model_version_state",)


def merge_families(
    parts: Sequence[tuple[str, Iterable[Metric]]], asker: Iterable[Metric]
) -> list[Metric]:
    """One server's families from its workers' (`parts`: who, their families): counters,
    histograms and the other gauges summed sample by sample; each worker's process and trace
    families kept apart under a `worker` label; the version states the `asker`'s own."""
    merged: dict[str, Metric] = {}
    sums: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for family in asker:
        if family.name in _THE_ASKERS:
            merged[family.name] = family
    for who, families in parts:
        for family in families:
            if family.name in _THE_ASKERS:
                continue
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = Metric(family.name, family.documentation, family.type)
                into.samples = []
                sums[family.name] = {}
            if family.name.startswith(_PER_WORKER):
                into.samples.extend(
                    s._replace(labels={**s.labels, "worker": who}) for s in family.samples
                )
                continue
            totals = sums[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                totals[key] = totals.get(key, 0.0) + sample.value
    for name, totals in sums.items():
        merged[name].samples.extend(
            Sample(sample, dict(labels), value) for (sample, labels), value in totals.items()
        )
    return list(merged.values())


class _Families:
    """Ready families, as generate_latest reads a registry."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def _left_status() -> str:
    """The status of a request whose client stopped waiting: for its deadline, or not."""
    return "DEADLINE_EXCEEDED" if ended_by_deadline(current_deadline()) else "CANCELLED"


class _VersionStates:
    """graphserve_model_version_state{model,version,state} = 1, read from the registry."""

    def __init__(self, registry: ModelRegistry) -> None:
        self.registry = registry

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        from graphserve.serving.batching import BatchingRunner

        batching = {
            field: CounterMetricFamily(
                f"graphserve_{name}", f"Batched versions: {what}.", labels=("model", "version")
            )
            for field, name, what in _BATCHING_COUNTERS
        }
        family = GaugeMetricFamily(
            "graphserve_model_version_state",
            "1 for each model version's current state (AVAILABLE, LOADING, END, ...).",
            labels=("model", "version", "state"),
        )
        traces = GaugeMetricFamily(
            "graphserve_function_traces",
            "Traces of each signature's tf.function in the eager server's function mode: "
            "more than one means the model retraced on new shapes.",
            labels=("model", "version", "signature"),
        )
        for name in self.registry.names():
            for status in self.registry.known(name).values():
                family.add_metric((name, str(status.version), status.state), 1.0)
            for servable in self.registry.available(name):
                counts = servable.runner.trace_counts()
                for signature, count in counts.items():
                    traces.add_metric((name, str(servable.version), signature), float(count))
                if isinstance(servable.runner, BatchingRunner):
                    stats = servable.runner.stats
                    for field, counter in batching.items():
                        counter.add_metric((name, str(servable.version)), getattr(stats, field))
        yield family
        yield traces
        yield from batching.values()


class _Residency:
    """Loads on demand, evictions, cold requests and resident bytes (serving.ondemand), read
    from the manager at scrape time."""

    def __init__(self, manager: OnDemandManager) -> None:
        self.manager = manager

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self.manager.stats
        loads = CounterMetricFamily(
            "graphserve_model_loads",
            "Versions loaded on demand (outcome ok or failed).",
            labels=("model", "outcome"),
        )
        for (model, outcome), count in list(stats.loads.items()):
            loads.add_metric((model, outcome), count)
        evictions = CounterMetricFamily(
            "graphserve_model_evictions",
            "Versions unloaded to stay within the budget (reason bytes, models) or idle.",
            labels=("model", "reason"),
        )
        for (model, reason), count in list(stats.evictions.items()):
            evictions.add_metric((model, reason), count)
        resident = self.manager.resident()
        per_version = GaugeMetricFamily(
            "graphserve_model_resident_bytes",
            "Each resident version's memory, measured when it loaded (malloc's bytes in use).",
            labels=("model", "version"),
        )
        for (model, version), held in resident.items():
            per_version.add_metric((model, str(version)), held)
        yield loads
        yield evictions
        yield per_version
        yield GaugeMetricFamily(
            "graphserve_resident_bytes",
            "The resident versions' measured bytes, together (what --max-resident-bytes bounds).",
            value=sum(resident.values()),
        )
        yield GaugeMetricFamily(
            "graphserve_resident_versions",
            "Versions resident now (what --max-resident-models bounds).",
            value=len(resident),
        )
        yield CounterMetricFamily(
            "graphserve_model_load_seconds",
            "Seconds spent loading versions on demand, all models together.",
            value=stats.load_seconds,
        )


_BATCHING_COUNTERS = (
    ("batches", "batches", "runs of the model on a merged batch"),
    ("requests", "batched_requests", "requests (pieces of split requests) in those batches"),
    ("rows", "batched_rows", "rows the requests brought"),
    ("padding_rows", "batch_padding_rows", "rows added to reach an allowed batch size"),
    ("rejected", "batch_rejected_requests", "requests turned away, the queue full"),
    ("cancelled", "batch_cancelled_requests", "requests whose client left while they were queued"),
    ("expired", "batch_expired_requests", "requests whose deadline passed while they were queued"),
)
