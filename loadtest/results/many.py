"""The result of `graphserve loadtest many`, typed: many.json is `ManyReport.to_json()`.

    ManyReport ─ settings: ManySettings ─ payloads: [PayloadGroup]   environment
               ─ totals: Totals          latency_ms: {all, warm, cold: Percentiles}
               ─ models: [ModelRow]  (every model, most requested first)   tail: ModelRow
               ─ server: ServerCounters  (the server's counters, deltas over the run)
               ─ memory: [MemorySample]  timeline: [Tick]   errors   slo: ManySlo ─ [ManyGate]

A request is *cold* when the server marked it as one that waited for its model to load
(`x-graphserve-cold-load`: a REST header, gRPC trailing metadata), *warm* when it was answered
without that mark; the hit ratio is warm / requests. Times are seconds since the first request
was scheduled (t = 0), latencies ms. A number that was not measured or not reported (a server
without the counter) is None, never 0 and never absent.

Only pydantic and the comparison's result types are imported (no TensorFlow, no locust).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from graphserve.loadtest.results.run import (
    Environment,
    PayloadInput,
    Percentiles,
    StrictModel,
    load_versioned,
)

__all__ = [
    "CLASSES",
    "MANY_SCHEMA",
    "ManyGate",
    "ManyReport",
    "ManySettings",
    "ManySlo",
    "MemorySample",
    "ModelRow",
    "PayloadGroup",
    "ServerCounters",
    "Tick",
    "Totals",
    "load_many",
]

MANY_SCHEMA = "graphserve.many/1"
# The requests a latency or gate is about: every one, the warm ones, the cold ones. A gate names
# one (`warm.p99<50ms`), or none: all.
CLASSES = ("all", "warm", "cold")

Ms = float | None


class PayloadGroup(StrictModel):
    """One distinct input signature among the models, and the one payload built for it."""

    models: int  # how many models take it
    source: str  # where the signature was read: "SavedModel PATH" or "metadata of NAME"
    file: str  # payload-N.npz
    inputs: dict[str, PayloadInput]
    # --traffic: the traffic file's requests that fit the signature, sent in place of the one
    # payload, in order, cycling (the file's record numbers; their shapes and counts)
    traffic_requests: int | None = None
    traffic_shapes: dict[str, int] | None = None


class ManySettings(StrictModel):
    target: str
    protocol: str  # "grpc" | "rest"
    models_from: str | None  # the model config file the names came from
    weights_file: str | None  # --weights; None: Zipf over the config's order
    zipf_s: float | None  # None with --weights
    models: int  # models with a weight above 0
    signature_name: str
    batch_size: int
    mode: str  # "open" (rate, req/s over all models) | "closed" (users)
    rate: float | None
    users: int
    duration_s: float | None
    max_requests: int | None
    seed: int
    scrape_every_s: float
    metrics_url: str | None
    payloads: list[PayloadGroup]
    latency: str  # what the percentiles measure


class Totals(StrictModel):
    requests: int
    answered: int
    failures: int
    failure_ratio: float | None  # failures / requests
    cold: int  # requests the server marked cold (answered or not)
    warm: int  # answered without the mark
    hit_ratio: float | None  # warm / requests
    duration_s: float  # from t = 0 to the last answer
    throughput_rps: float | None  # answered per second
    models_requested: int
    models_cold: int  # models with at least one cold request


class ModelRow(StrictModel):
    """One model (or, as the report's tail, the models after the top rows taken together)."""

    name: str
    rank: int | None  # 1: the most popular by weight; None for the tail
    weight: float  # its share of the requests asked for (all the weights add up to 1)
    requests: int
    failures: int
    cold: int
    warm_p50_ms: Ms
    warm_p99_ms: Ms
    cold_p50_ms: Ms
    cold_p99_ms: Ms
    loads: int | None  # the server's loads of it over the run (ok and failed); None: not reported
    evictions: int | None


class ServerCounters(StrictModel):
    """The server's own counters over the run: last scrape minus first. `reported` names the
    series the server exposed; a counter it did not expose is None."""

    reported: list[str]
    loads_ok: int | None
    loads_failed: int | None
    evictions: dict[str, int] | None  # reason ("bytes", "models", "idle") -> evictions
    cold_requests: int | None  # the server's count of requests that waited for a load
    rss_bytes_max: float | None
    resident_bytes_max: float | None
    resident_versions_max: float | None


class MemorySample(StrictModel):
    """One scrape: the gauges as they were, and loads and evictions since the first scrape."""

    t_s: float
    rss_bytes: float | None
    resident_bytes: float | None
    resident_versions: float | None
    loads: float | None
    evictions: float | None
    scrape_ms: float | None  # how long the server took to answer the scrape


class Tick(StrictModel):
    """One second of the run (requests by the second they were sent in)."""

    t_s: float
    requests: int
    cold: int
    failures: int
    warm_p50_ms: Ms
    warm_p99_ms: Ms
    cold_p50_ms: Ms
    cold_max_ms: Ms


class ManyGate(StrictModel):
    expression: str
    requests: str  # which requests it judged: one of CLASSES
    value: float | None
    threshold: float
    passed: bool


class ManySlo(StrictModel):
    gates: list[ManyGate]
    passed: bool


class ManyReport(StrictModel):
    """many.json: one `loadtest many` run, as `many` returns it and `load_many` reads it."""

    schema_version: str = Field(alias="schema")
    title: str
    settings: ManySettings
    environment: Environment
    totals: Totals
    latency_ms: dict[str, Percentiles]  # CLASSES -> percentiles of the answered requests
    load_wait_ms: Percentiles  # the cold requests' waits for their loads, as the server marked
    models: list[ModelRow]  # every model of the popularity, most requested first
    top: int  # how many of `models` the pages show one by one
    tail: ModelRow | None  # the models after the first `top`, taken together
    server: ServerCounters | None  # None: no metrics endpoint answered
    memory: list[MemorySample]
    timeline: list[Tick]
    errors: dict[str, int]  # status -> failed requests
    slo: ManySlo | None
    files: list[str]


def load_many(path: Path) -> ManyReport:
    """Read a many.json of this version (`MANY_SCHEMA`). Raises LoadTestError naming the file
    when it cannot be read, does not have the report's shape, or is of another version."""
    return load_versioned(path, ManyReport, MANY_SCHEMA, "many-models")
