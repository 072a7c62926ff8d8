"""The result of `graphserve loadtest rollout`, typed: rollout.json is `RolloutReport.to_json()`.

    RolloutReport ─ settings: RolloutSettings     environment (as the comparison's report)
                  ─ swap: Swap ─ statuses: [StatusChange]       (times in s since the load began)
                  ─ windows: [WindowStats]  run, before, during, after
                  ─ errors: {status: count}  timeline: [Second]
                  ─ new_version: FirstRequests   slo: RolloutSlo ─ gates: [RolloutGate]

Times are seconds since the first request was sent (the report's t = 0); a moment that did not
happen (the old version was never unloaded) is None, never absent. Latencies are ms, and a
percentile of a window without a successful request is None.

Only pydantic and the comparison's result types are imported (no TensorFlow, no locust).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from graphserve.loadtest.results.run import Environment, Percentiles, StrictModel, load_versioned

__all__ = [
    "ROLLOUT_SCHEMA",
    "WINDOWS",
    "FirstRequests",
    "RolloutAnswers",
    "RolloutGate",
    "RolloutReport",
    "RolloutSettings",
    "RolloutSlo",
    "Second",
    "StatusChange",
    "Swap",
    "WindowStats",
    "load_rollout",
]

ROLLOUT_SCHEMA = "graphserve.rollout/1"
# The report's windows, in order; gates name the last three (`during.p99<50ms`), "run" is the
# default of a gate that names none.
WINDOWS = ("run", "before", "during", "after")


class RolloutSettings(StrictModel):
    address: str
    model_name: str
    signature_name: str
    model_base_path: str
    new_version_dir: str | None  # None with push_existing: someone else pushes
    push_existing: bool
    mode: str  # "open" (rate, req/s) | "closed" (users)
    load: float
    max_in_flight: int
    before_s: float
    after_s: float
    timeout_s: float
    poll_s: float
    batch_size: int
    seed: int
    latency: str  # what the percentiles measure (open loop: from the scheduled send)


class StatusChange(StrictModel):
    """A version's state as GetModelStatus reported it, when it first did; "GONE" when a
    version the server listed is no longer listed. version None: the server itself, "NO
    ANSWER" when it stopped answering GetModelStatus, "ANSWERS" when it did again."""

    at_s: float
    version: int | None
    state: str


class Swap(StrictModel):
    """The moments of the swap, in s since the load began; durations in s.

    swap_start: the push (copied and renamed into place), or with push_existing the first
    change of the server's versions. swap_end: the new version AVAILABLE and the old one
    unloaded (END or gone), or the new one AVAILABLE if the old stayed loaded.
    """

    old_version: int
    new_version: int | None
    completed: bool
    note: str  # why it did not complete, or what was unusual; "" otherwise
    push_started_s: float | None
    pushed_s: float | None
    copy_s: float | None
    swap_start_s: float | None
    new_listed_s: float | None  # first GetModelStatus that lists the new version (any state)
    new_available_s: float | None
    old_unloaded_s: float | None
    swap_end_s: float | None
    time_to_available_s: float | None  # swap start -> new AVAILABLE
    old_unloaded_after_s: float | None  # swap start -> old END or gone
    both_available_s: float | None  # how long both were AVAILABLE at once
    both_answered_s: float | None  # first answer of the new version -> last of the old one
    load_end_s: float


class WindowStats(StrictModel):
    name: str
    start_s: float
    end_s: float
    requests: int
    answered: int
    errors: int
    throughput_rps: float | None  # answered per second
    latency_ms: Percentiles
    versions: dict[str, int]  # version -> requests it answered
    errors_by_status: dict[str, int]


class Second(StrictModel):
    """One second of the timeline (requests by the second they were sent in)."""

    t_s: float
    duration_s: float  # 1, less for the run's last second
    requests: int
    errors: int
    p50_ms: float | None
    p99_ms: float | None
    versions: dict[str, int]


class FirstRequests(StrictModel):
    """The new version's first answers against its steady state: what warm-up records buy."""

    version: int
    has_warmup: bool | None  # None: the version's directory could not be read
    warmup_file: str | None
    count: int  # answers of the new version
    first_ms: list[float]  # the first `len(first_ms)` answers, in the order they were sent
    first_request_ms: float | None
    first_p50_ms: float | None
    first_max_ms: float | None
    steady_requests: int  # the last answers the steady p50 is taken over
    steady_p50_ms: float | None
    first_over_steady: float | None  # first_request_ms / steady_p50_ms


class RolloutAnswers(StrictModel):
    """Under recorded traffic: the new version's first answer to each record against the old
    version's (loadtest/results/answers.py's rule), and the records that disagree most."""

    old_version: int
    new_version: int
    records: int  # in the traffic the load cycled through
    compared: int  # records both versions answered
    mismatched: int
    top_class_changed_share: float | None
    outputs: list[dict[str, Any]]  # OutputAgreement's JSON, one per output
    worst: list[dict[str, Any]]  # {record, output, max_abs_error, allowed_abs_error, why}
    tolerances: dict[str, list[float]]


class RolloutGate(StrictModel):
    expression: str
    window: str
    value: float | None
    threshold: float
    passed: bool


class RolloutSlo(StrictModel):
    gates: list[RolloutGate]
    passed: bool


class RolloutReport(StrictModel):
    """rollout.json: one `rollout` run, as `rollout` returns it and `load_rollout` reads it back.

    The settings, the swap and every version status change, the windows (`WINDOWS`: the whole
    run, before, during and after the swap), errors by status, a timeline by the second, the
    new version's first requests against its steady state, and the SLO gates. Times are
    seconds since the first request was sent; `to_json()` is the file's content.
    """

    schema_version: str = Field(alias="schema")
    title: str
    settings: RolloutSettings
    environment: Environment
    swap: Swap
    statuses: list[StatusChange]
    windows: list[WindowStats]
    errors: dict[str, int]
    timeline: list[Second]
    new_version: FirstRequests | None
    slo: RolloutSlo | None
    files: list[str]
    answers: RolloutAnswers | None = None  # with --traffic

    def window(self, name: str) -> WindowStats | None:
        """The window of this name (one of `WINDOWS`); None when the run has none by it."""
        return next((w for w in self.windows if w.name == name), None)


def load_rollout(path: Path) -> RolloutReport:
    """Read a rollout.json of this version (`ROLLOUT_SCHEMA`). Raises LoadTestError naming the
    file when it cannot be read, does not have the report's shape, or is of another version."""
    return load_versioned(path, RolloutReport, ROLLOUT_SCHEMA, "rollout")
