"""The load-test run, typed: one set of pydantic models, produced by the analysis (loadtest/
analysis.py, workers.py, slo.py, compare.py) and read by everything after it (report, plots, SLO
gates, the CLI, `graphserve demo`, the bench's environment).

    Report ─ settings: Settings        steps: [Step] ─ arms: {name: ArmStep} ─ windows: [Window]
      (the run) environment, arms      │               ratios: {"a/b": Ratio} ─ p50 ... : RatioValue
           ─ slo: SloResult ─ gates    └ ArmStep ─ latency_ms: Percentiles, ci95_ms, generator:
           ─ calibration, workers,       GeneratorLoad, server: ServerBreakdown, open_loop
             cold_start, files

A report.json is `Report.model_dump(mode="json", by_alias=True)`; `write_report` checks what it
wrote against these models, so a report on disk always has this shape, and docs/report.schema.json
is their JSON schema (a test keeps the committed file equal to `report_json_schema()`).
`load_report` reads a report.json: this version and the previous ones ("graphserve.loadtest/3",
without find-max, and /2, the same keys untyped) load; any other fails naming the version it
found and those it reads.

A number that was not measured is None, never absent: readers need no `.get`. Percentile keys
are written as the report names them ("p99.9"); `of("p99.9")` reads one by that name.

Only the standard library, pydantic and graphserve.core are imported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from graphserve.core.errors import LoadTestError

__all__ = [
    "READABLE_SCHEMAS",
    "REPORT_SCHEMA",
    "AnswersCheck",
    "ArmInfo",
    "ArmSearch",
    "ArmStep",
    "Breakdown",
    "Calibration",
    "CalibrationStep",
    "ColdStartRun",
    "ColdStarts",
    "Environment",
    "FindMax",
    "GateCheck",
    "GeneratorLoad",
    "OpenLoop",
    "Payload",
    "PayloadInput",
    "PercentileCIs",
    "Percentiles",
    "Probe",
    "Ratio",
    "RatioValue",
    "Report",
    "ReportFiles",
    "ServerBreakdown",
    "Settings",
    "SloResult",
    "Stability",
    "Step",
    "StrictModel",
    "TrafficPayload",
    "Window",
    "WorkerNode",
    "Workers",
    "check_report",
    "load_report",
    "load_versioned",
    "report_json_schema",
]

REPORT_SCHEMA = "graphserve.loadtest/4"
# /2: the same keys, untyped; /3: typed, before find-max (/4 adds find_max, None there)
READABLE_SCHEMAS = ("graphserve.loadtest/2", "graphserve.loadtest/3", REPORT_SCHEMA)

_M = TypeVar("_M", bound="StrictModel")

Ms = float | None  # a latency in milliseconds; None where nothing was measured
Interval = tuple[float, float] | None  # a 95% confidence interval, [low, high]


class StrictModel(BaseModel):
    """Every key known: a report with one more or one less is not this version's."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        """The JSON document, keys as the report names them ("p99.9", "schema")."""
        return self.model_dump(mode="json", by_alias=True)


class _ByName(StrictModel):
    """Fields read by the report's own names too: `of("p99.9")` is the field p99_9."""

    def of(self, name: str) -> Any:
        return getattr(self, name.replace(".", "_"))


class Percentiles(_ByName):
    p50: Ms
    p90: Ms
    p95: Ms
    p99: Ms
    p99_9: Ms = Field(alias="p99.9")
    mean: Ms
    min: Ms
    max: Ms


class PercentileCIs(_ByName):
    p50: Interval
    p90: Interval
    p95: Interval
    p99: Interval
    p99_9: Interval = Field(alias="p99.9")


class Window(StrictModel):
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


class Stability(StrictModel):
    last_windows: int
    spread_pct: dict[str, float | None] | None


class GeneratorLoad(StrictModel):
    """Whether the load generator may have been the limit (loadtest.analysis.generator_load)."""

    cpu_pct: float | None
    machine_cpu_pct: float | None = None  # older /2 reports did not measure it
    bound: bool
    reason: str | None
    # The generator's own CPU per request (every locust process), median over the windows: what
    # sending, timing and recording one request cost the client side (older reports: absent).
    cpu_us_per_request: float | None = None


class Breakdown(StrictModel):
    """The client's mean latency split into model, rest of the server and client + network:
    differences of means (`statistic`), a negative part shown as 0 and kept in `clamped_ms`."""

    statistic: str
    client_mean_ms: Ms
    breakdown_ms: dict[str, float | None]
    clamped_ms: dict[str, float]


class ServerBreakdown(Breakdown):
    """Server-side time from the arm's Prometheus metrics, and its request count for the step."""

    requests: int | None
    client_requests: int
    request_mean_ms: Ms
    runtime_mean_ms: Ms


class OpenLoop(StrictModel):
    target_rps: float
    achieved_rps: float | None
    late_pct: float | None


class ArmStep(StrictModel):
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


class RatioValue(StrictModel):
    value: float | None
    ci95: Interval


class Ratio(_ByName):
    """One arm over the baseline: latency statistics (with bootstrap CIs) and throughput."""

    p50: RatioValue
    p90: RatioValue
    p95: RatioValue
    p99: RatioValue
    p99_9: RatioValue = Field(alias="p99.9")
    mean: RatioValue
    throughput: RatioValue


class Step(StrictModel):
    index: int
    load: float
    arms: dict[str, ArmStep]
    ratios: dict[str, Ratio]


class GateCheck(StrictModel):
    """One `--slo` gate checked at one step (loadtest.slo.evaluate)."""

    expression: str
    arm: str | None
    step: int
    load: float | None
    value: float | None
    threshold: float
    passed: bool


class SloResult(StrictModel):
    gates: list[GateCheck]
    max_failures: int | None
    failures: int
    passed: bool


class CalibrationStep(StrictModel):
    load: float
    throughput_rps: float | None
    p50_ms: Ms


class Calibration(StrictModel):
    null_endpoint: str
    arm: str
    steps: list[CalibrationStep]


class WindowRef(StrictModel):
    step: int
    arm: str
    window: int


class LostAt(WindowRef):
    kind: str


class CpuSpread(StrictModel):
    mean: float | None
    max: float | None


class WorkerNode(StrictModel):
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


class Workers(StrictModel):
    expected: int
    mode: str  # "local": started by the comparison; "remote": some joined from elsewhere
    nodes: list[WorkerNode]


class Probe(StrictModel):
    """One probe of a find-max search: one arm at one load, and whether it held."""

    step: int  # the report's step that measured it
    load: float
    held: bool
    why: str | None  # why it did not hold: the gates missed, failures, the rate not reached
    value: float | None  # the first gate's measured value
    throughput_rps: float | None
    generator_bound: bool


class ArmSearch(StrictModel):
    """One arm's search: its probes in order, the most load it held and the least it missed."""

    probes: list[Probe]
    max_load: float | None  # None: not even the lowest load tried held
    first_miss: float | None  # None: it held every load up to the cap
    limit: str  # why the search stopped: "slo", "max load", "probes", "nothing held"


class FindMax(StrictModel):
    """`--find-max`: the largest load each arm holds within the `--slo` gates."""

    slo: list[str]
    mode: str
    start: float
    max_load: float | None
    max_probes: int
    precision_pct: float
    arms: dict[str, ArmSearch]


class PayloadInput(StrictModel):
    dtype: str
    shape: list[int]


class Payload(StrictModel):
    """What every request carried: where it came from, the file it is in, its inputs."""

    # "--payload-file /abs/path", or "generated with seed N from SavedModel V" (or "from metadata
    # of ARM (ADDRESS)"); reports before these words: "file PATH", "SavedModel V", "metadata of"
    source: str
    file: str  # payload.npz, request.bin for a REST body given as it is, requests.bin (traffic)
    inputs: dict[str, PayloadInput]
    traffic: TrafficPayload | None = None  # `--traffic FILE`: the requests cycled through


class TrafficPayload(StrictModel):
    """`--traffic FILE`: a traffic file's predict requests, sent to every arm in their order,
    cycling (generator/framed.py's requests.bin, each encoded once)."""

    file: str  # the traffic file, absolute
    model: str  # the model whose records were sent (to the run's model)
    records: int  # in the file
    requests: int  # cycled through
    shapes: dict[str, int]  # requests by shape: "images [4, 784]" -> 12


class AnswersCheck(StrictModel):
    """`--traffic`: each arm's first answer to each request against the log's and the baseline
    arm's (loadtest/results/answers.py, the exporter's parity rule), and the requests that
    disagree most, saved under OUT/answers with the command that sends each again."""

    requests: int  # cycled through
    answered: dict[str, int]  # per arm: requests with a kept answer
    tolerances: dict[str, list[float]]
    tolerances_from: str
    agreements: dict[str, list[dict[str, Any]]]  # per arm: Agreement's JSON, one per reference
    worst: list[dict[str, Any]]  # Disagreement's JSON
    unread: dict[str, int] = Field(default_factory=dict)  # per arm: answers not readable


class Settings(StrictModel):
    """How the run was asked for."""

    protocol: str
    rest_format: str
    mode: str  # "closed": loads are users; "open": loads are req/s
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
    payload: Payload
    locust: dict[str, Any]


class Environment(StrictModel):
    """Where a measurement ran (loadtest.comparison.run.environment; the bench records it too)."""

    timestamp: str
    hostname: str
    platform: str
    cpus: int | None
    python: str
    versions: dict[str, str]
    command: list[str]


class ArmInfo(BaseModel):
    """An arm's server: its address, protocol and metrics, and what started it (free-form)."""

    model_config = ConfigDict(extra="allow")

    address: str
    protocol: str
    metrics_url: str | None


class ColdStartRun(StrictModel):
    """One cold start of one server (loadtest.coldstart): time to ready, the first request
    against the steady p50 of `steady_requests` more."""

    server: str  # graph | eager | null
    warmup_records: bool  # the server replayed the SavedModel's warm-up records at load
    ready_s: float
    first_request_ms: float
    steady_p50_ms: float
    first_over_steady: float | None  # how many times slower the first request is
    steady_requests: int

    @classmethod
    def measured(
        cls,
        server: str,
        warmup_records: bool,
        ready_s: float,
        first_request_ms: float,
        steady_p50_ms: float,
        steady_requests: int,
    ) -> ColdStartRun:
        ratio = first_request_ms / steady_p50_ms if steady_p50_ms > 0 else None
        return cls(
            server=server,
            warmup_records=warmup_records,
            ready_s=ready_s,
            first_request_ms=first_request_ms,
            steady_p50_ms=steady_p50_ms,
            first_over_steady=ratio,
            steady_requests=steady_requests,
        )


class ColdStarts(StrictModel):
    runs: list[ColdStartRun]


class ReportFiles(StrictModel):
    json_file: str = Field(alias="json")
    markdown: str
    html: str
    plots: list[str]
    locust_csv: list[str]
    raw: str | None

    def names(self) -> list[str]:
        """The files a reader may want beside the page: the JSON, raw records, locust's CSVs."""
        return [n for n in (self.json_file, self.raw, *self.locust_csv) if n]


class Report(StrictModel):
    """report.json: one load-test run."""

    schema_version: str = Field(alias="schema")
    title: str
    headline: list[str]
    settings: Settings
    environment: Environment
    arms: dict[str, ArmInfo]
    steps: list[Step]
    truncated: str | None
    workers: Workers | None = None
    elapsed_s: float | None
    cold_start: ColdStarts | None
    manifest: dict[str, Any] | None  # the exported model's manifest, as the exporter wrote it
    calibration: Calibration | None
    slo: SloResult | None
    find_max: FindMax | None = None  # `--find-max`: the searches; the probes are the steps
    answers: AnswersCheck | None = None  # `--traffic`: every arm's answers checked
    files: ReportFiles | None = None

    def arm_order(self) -> list[str]:
        """Arm names in display order: settings.arm_order, then any other arm the run has."""
        names = list(self.settings.arm_order)
        for source in [list(self.arms), *(list(step.arms) for step in self.steps)]:
            names += [n for n in source if n not in names]
        return names

    def step_arms(self, step: Step) -> list[tuple[str, ArmStep]]:
        """A step's arms in display order."""
        return [(name, step.arms[name]) for name in self.arm_order() if name in step.arms]


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
    """Read a report.json of this version or an earlier one (`READABLE_SCHEMAS`: /2 and /3 load
    as this version). Raises LoadTestError when the file cannot be read, is not a JSON object,
    names another schema version, or does not have its version's shape."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LoadTestError(f"cannot read {path}: {exc}") from None
    if not isinstance(document, dict):
        raise LoadTestError(f"{path} is not a report: expected a JSON object")
    return check_report(document)


def load_versioned(path: Path, model: type[_M], schema: str, kind: str) -> _M:
    """Read `path` as `model`, a report of one schema version (its `schema_version`): the
    rollout's and the many-models report's, which read only their own. Raises LoadTestError
    naming the file when it cannot be read, does not have the report's shape, or is of another
    version."""
    try:
        report = model.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as exc:
        raise LoadTestError(f"{path} is not a {kind} report: {exc}") from None
    found = getattr(report, "schema_version", None)
    if found != schema:
        raise LoadTestError(f"{path} is a {found!r} report; this version reads {schema!r}")
    return report
