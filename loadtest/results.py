"""The load-test report's shape, typed: one set of pydantic models for report.json.

    Report ─ settings: Settings        steps: [Step] ─ arms: {name: ArmStep} ─ windows: [Window]
           ─ slo: SloResult ─ gates    │               ratios: {"a/b": Ratio}
           ─ calibration, workers      └ ArmStep ─ latency_ms, ci95_ms, generator, server, open_loop

`write_report` validates every report.json against these models before writing it, so a report
on disk always has this shape; docs/report.schema.json is their JSON schema (a test keeps the
committed file equal to `report_json_schema()`). `load_report` reads a report.json: this version
and the previous one ("graphserve.loadtest/2", the same keys, untyped) load; any other fails
naming the version it found and those it reads.

Only the standard library, pydantic and graphserve.core are imported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from graphserve.core.errors import LoadTestError

__all__ = [
    "READABLE_SCHEMAS",
    "REPORT_SCHEMA",
    "ArmStep",
    "Calibration",
    "GeneratorLoad",
    "Ratio",
    "Report",
    "ServerBreakdown",
    "SloResult",
    "Step",
    "Window",
    "WorkerNode",
    "Workers",
    "load_report",
    "report_json_schema",
]

REPORT_SCHEMA = "graphserve.loadtest/3"
READABLE_SCHEMAS = ("graphserve.loadtest/2", REPORT_SCHEMA)  # /2: the same keys, untyped

Ms = float | None  # a latency in milliseconds; None where nothing was measured
Interval = tuple[float, float] | None  # a 95% confidence interval, [low, high]


class _Model(BaseModel):
    """Every key known: a report with one more or one less is not this version's."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Percentiles(_Model):
    p50: Ms
    p90: Ms
    p95: Ms
    p99: Ms
    p99_9: Ms = Field(alias="p99.9")
    mean: Ms
    min: Ms
    max: Ms


class PercentileCIs(_Model):
    p50: Interval
    p90: Interval
    p95: Interval
    p99: Interval
    p99_9: Interval = Field(alias="p99.9")


class Window(_Model):
    """One measurement window of one arm."""

    index: int
    requests: int
    failures: int
    throughput_rps: float | None
    p50_ms: Ms
    p99_ms: Ms
    mean_ms: Ms
    start: float
    end: float
    generator_cpu_pct: float | None  # the busiest locust process
    machine_cpu_pct: float | None = None  # the busiest generator machine (older /2: absent)


class Stability(_Model):
    last_windows: int
    spread_pct: dict[str, float | None] | None


class GeneratorLoad(_Model):
    """Whether the load generator may have been the limit (loadtest.analysis.generator_load)."""

    cpu_pct: float | None
    machine_cpu_pct: float | None = None  # older /2 reports did not measure it
    bound: bool
    reason: str | None


class ServerBreakdown(_Model):
    """Server-side time from the arm's Prometheus metrics; parts are differences of means."""

    requests: int | None
    client_requests: int
    request_mean_ms: Ms
    runtime_mean_ms: Ms
    statistic: str
    client_mean_ms: Ms
    breakdown_ms: dict[str, float | None]
    clamped_ms: dict[str, float]


class OpenLoop(_Model):
    target_rps: float
    achieved_rps: float | None
    late_pct: float | None


class ArmStep(_Model):
    """One arm at one load."""

    requests: int
    warmup_requests: int
    measured_requests: int
    failures: int
    errors: dict[str, int]
    duration_s: float
    throughput_rps: float | None
    latency_ms: Percentiles
    ci95_ms: PercentileCIs
    windows: list[Window]
    stable: bool
    stability: Stability
    generator: GeneratorLoad
    server: ServerBreakdown | None
    open_loop: OpenLoop | None


class RatioValue(_Model):
    value: float | None
    ci95: Interval


class Ratio(_Model):
    """One arm over the baseline: latency statistics (with bootstrap CIs) and throughput."""

    p50: RatioValue
    p90: RatioValue
    p95: RatioValue
    p99: RatioValue
    p99_9: RatioValue = Field(alias="p99.9")
    mean: RatioValue
    throughput: RatioValue


class Step(_Model):
    index: int
    load: float
    arms: dict[str, ArmStep]
    ratios: dict[str, Ratio]


class Gate(_Model):
    expression: str
    arm: str | None
    step: int
    load: float | None
    value: float | None
    threshold: float
    passed: bool


class SloResult(_Model):
    gates: list[Gate]
    max_failures: int | None
    failures: int
    passed: bool


class CalibrationStep(_Model):
    load: float
    throughput_rps: float | None
    p50_ms: Ms


class Calibration(_Model):
    null_endpoint: str
    arm: str
    steps: list[CalibrationStep]


class WindowRef(_Model):
    step: int
    arm: str
    window: int


class LostAt(WindowRef):
    kind: str


class CpuSpread(_Model):
    mean: float | None
    max: float | None


class WorkerNode(_Model):
    """One locust worker: who and where, how busy, and what it missed if it was lost."""

    id: str
    host: str | None
    pid: int | None
    cpus: int | None
    platform: str | None
    graphserve: str | None
    joined_s: float | None  # from the first phase's start; negative: before it
    lost_s: float | None  # last heard from, likewise
    lost_at: LostAt | None
    missed_windows: list[WindowRef]
    cpu_pct: CpuSpread
    machine_cpu_pct: CpuSpread


class Workers(_Model):
    expected: int
    mode: str  # "local": started by the comparison; "remote": some joined from elsewhere
    nodes: list[WorkerNode]


class Settings(BaseModel):
    """How the run was asked for. Typed where every run has the key; more may follow."""

    model_config = ConfigDict(extra="allow")

    protocol: str
    rest_format: str
    mode: str
    arrivals: str
    max_in_flight: int
    warmup_s: float
    window_s: float
    min_windows: int
    max_windows: int
    stability_pct: float
    loads: list[float]
    model_name: str
    signature_name: str
    batch_size: int
    seed: int
    workers: int
    expect_workers: int = 0
    max_requests: int | None
    baseline: str
    arm_order: list[str]
    payload: dict[str, Any]
    locust: dict[str, Any]


class Report(_Model):
    """report.json."""

    schema_version: str = Field(alias="schema")
    title: str
    headline: list[str]
    settings: Settings
    environment: dict[str, Any]  # time, host, platform, CPUs, versions, command
    arms: dict[str, dict[str, Any]]  # address, protocol, metrics_url and the server's details
    steps: list[Step]
    truncated: str | None
    workers: Workers | None = None
    elapsed_s: float | None
    cold_start: dict[str, Any] | None
    manifest: dict[str, Any] | None
    calibration: Calibration | None
    slo: SloResult | None
    files: dict[str, Any] | None = None


def report_json_schema() -> dict[str, Any]:
    """The JSON schema of report.json (committed as docs/report.schema.json)."""
    schema = Report.model_json_schema(by_alias=True)
    schema["$id"] = f"https://graphserve.dev/schemas/{REPORT_SCHEMA}.json"
    return schema


def check_report(document: dict[str, Any]) -> Report:
    """The report as a model; LoadTestError naming the first fields that do not fit."""
    version = document.get("schema")
    if version not in READABLE_SCHEMAS:
        raise LoadTestError(
            f"report schema {version!r} is not one this graphserve reads "
            f"({', '.join(READABLE_SCHEMAS)}): render it with the graphserve that wrote it"
        )
    try:
        return Report.model_validate({**document, "schema": REPORT_SCHEMA})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise LoadTestError(
            f"a {version} report that does not have its shape ({exc.error_count()} problem(s)): "
            f"{problems}"
        ) from None


def load_report(path: Path) -> Report:
    """Read a report.json (this version or "graphserve.loadtest/2"); LoadTestError otherwise."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LoadTestError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, dict):
        raise LoadTestError(f"{path} is not a report: expected a JSON object")
    return check_report(document)
