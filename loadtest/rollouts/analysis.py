"""From a rollout's raw requests and observed moments to its report's numbers.

    records   start (time.time()), latency_ms, lag_ms, code (gRPC status number), version
    Moments   the swap's times as the controller saw them (time.time())

`windows` cuts the run at the swap's start and end (a request belongs to the window it was sent
in), `timeline` bins it by second, `first_requests` compares the new version's first answers
with its last ones, `check_gates` reads the `--slo` gates (loadtest/results/slo.py's grammar,
with the windows in place of arms). Pure numpy: no TensorFlow, no locust, no gRPC.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from graphserve.core.errors import SloError
from graphserve.loadtest.results.rollout import (
    WINDOWS,
    FirstRequests,
    RolloutGate,
    RolloutSlo,
    Second,
    StatusChange,
    Swap,
    WindowStats,
)
from graphserve.loadtest.results.run import Percentiles
from graphserve.loadtest.results.slo import Gate, passes
from graphserve.loadtest.results.stats import percentile, summarize

__all__ = [
    "Moments",
    "Records",
    "check_gate_windows",
    "check_gates",
    "errors_by_status",
    "first_requests",
    "swap_section",
    "timeline",
    "windows",
]

Records = Mapping[str, npt.NDArray[Any]]

# gRPC's status codes by number (grpc.StatusCode without importing grpc here).
_STATUS_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
    "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
)  # fmt: skip


@dataclass
class Moments:
    """What the controller saw, as time.time(); None: it did not happen (yet)."""

    t0: float  # the load's first scheduled send
    old_version: int
    new_version: int | None = None
    push_started: float | None = None
    pushed: float | None = None
    swap_start: float | None = None
    new_listed: float | None = None
    new_available: float | None = None
    old_unloaded: float | None = None
    old_left_available: float | None = None  # the old version was last AVAILABLE before this
    swap_end: float | None = None
    load_end: float | None = None
    note: str = ""
    # (time, version, state); version None: the server ("NO ANSWER", "ANSWERS" again)
    changes: list[tuple[float, int | None, str]] = field(default_factory=list)


def status_name(code: int) -> str:
    return _STATUS_NAMES[code] if 0 <= code < len(_STATUS_NAMES) else f"CODE_{code}"


def _latency(records: Records, open_loop: bool) -> npt.NDArray[np.float64]:
    """What the percentiles measure: in an open loop from the scheduled send (a generator that
    falls behind must not hide the server's stall), else from the send."""
    latency = records["latency_ms"].astype(np.float64)
    return latency + records["lag_ms"] if open_loop else latency


def _rel(t: float | None, t0: float) -> float | None:
    return None if t is None else round(t - t0, 4)


def _span(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 4)


def errors_by_status(codes: npt.NDArray[Any]) -> dict[str, int]:
    counts = Counter(int(c) for c in codes if c != 0)
    return {status_name(c): n for c, n in sorted(counts.items())}


def window_bounds(moments: Moments, end: float) -> dict[str, tuple[float, float]]:
    """Each window's [start, end) in time.time(); before runs to the swap's start, during to
    its end (or to the end of the load when it did not end)."""
    start = moments.swap_start if moments.swap_start is not None else end
    stop = moments.swap_end if moments.swap_end is not None else end
    return {
        "run": (moments.t0, end),
        "before": (moments.t0, start),
        "during": (start, stop),
        "after": (stop, end),
    }


def windows(records: Records, moments: Moments, end: float, open_loop: bool) -> list[WindowStats]:
    """The whole run and the windows before, during and after the swap."""
    start = records["start"]
    latency = _latency(records, open_loop)
    ok = records["code"] == 0
    stats = []
    for name, (low, high) in window_bounds(moments, end).items():
        inside = (start >= low) & (start < high) if name != "run" else np.ones_like(ok)
        answered = inside & ok
        duration = max(high - low, 0.0)
        versions = Counter(int(v) for v in records["version"][answered])
        stats.append(
            WindowStats(
                name=name,
                start_s=round(low - moments.t0, 4),
                end_s=round(high - moments.t0, 4),
                requests=int(inside.sum()),
                answered=int(answered.sum()),
                errors=int((inside & ~ok).sum()),
                throughput_rps=round(int(answered.sum()) / duration, 2) if duration > 0 else None,
                latency_ms=Percentiles.model_validate(summarize(latency[answered])),
                versions={str(v): n for v, n in sorted(versions.items())},
                errors_by_status=errors_by_status(records["code"][inside]),
            )
        )
    return stats


def timeline(records: Records, t0: float, end: float, open_loop: bool) -> list[Second]:
    """Per second of the run (by send time): requests, errors, p50 and p99 of the answered
    ones, and which versions answered; the last second ends with the load (`end`)."""
    if records["start"].size == 0:
        return []
    second = np.floor(records["start"] - t0).astype(np.int64)
    latency = _latency(records, open_loop)
    ok = records["code"] == 0
    seconds = []
    for s in range(int(second.min()), int(second.max()) + 1):
        inside = second == s
        answered = np.sort(latency[inside & ok])
        versions = Counter(int(v) for v in records["version"][inside & ok])
        seconds.append(
            Second(
                t_s=float(s),
                duration_s=round(min(1.0, max(end - t0 - s, 0.001)), 4),
                requests=int(inside.sum()),
                errors=int((inside & ~ok).sum()),
                p50_ms=percentile(answered, 0.5) if answered.size else None,
                p99_ms=percentile(answered, 0.99) if answered.size else None,
                versions={str(v): n for v, n in sorted(versions.items())},
            )
        )
    return seconds


def first_requests(
    records: Records,
    version: int,
    has_warmup: bool | None,
    warmup_file: str | None,
    first: int = 20,
    steady: int = 200,
) -> FirstRequests:
    """The first `first` answers of `version` (in send order) against the p50 of its last
    `steady` (fewer when it answered fewer than first + steady: the first ones are left out of
    its steady state). Latency from the send: the version's own cost, not the schedule's lag."""
    mine = (records["version"] == version) & (records["code"] == 0)
    order = np.argsort(records["start"][mine], kind="stable")
    latency = records["latency_ms"][mine].astype(np.float64)[order]
    head = latency[:first]
    tail = np.sort(latency[first:][-steady:])
    steady_p50 = percentile(tail, 0.5) if tail.size else None
    first_ms = float(head[0]) if head.size else None
    return FirstRequests(
        version=version,
        has_warmup=has_warmup,
        warmup_file=warmup_file,
        count=int(latency.size),
        first_ms=[round(float(x), 4) for x in head],
        first_request_ms=first_ms,
        first_p50_ms=percentile(np.sort(head), 0.5) if head.size else None,
        first_max_ms=float(head.max()) if head.size else None,
        steady_requests=int(tail.size),
        steady_p50_ms=steady_p50,
        first_over_steady=(
            round(first_ms / steady_p50, 3) if first_ms is not None and steady_p50 else None
        ),
    )


def swap_section(records: Records, moments: Moments, completed: bool) -> Swap:
    """The swap's moments since t0, and how long the versions overlapped."""
    t0 = moments.t0
    ok = records["code"] == 0
    answered_at = records["start"] + records["latency_ms"] / 1000.0
    both_answered = None
    if moments.new_version is not None:
        new = answered_at[ok & (records["version"] == moments.new_version)]
        old = answered_at[ok & (records["version"] == moments.old_version)]
        if new.size and old.size:
            both_answered = round(max(0.0, float(old.max()) - float(new.min())), 4)
    both_available = None
    if moments.new_available is not None:
        left = moments.old_left_available
        both_available = round(max(0.0, left - moments.new_available), 4) if left else 0.0
    return Swap(
        old_version=moments.old_version,
        new_version=moments.new_version,
        completed=completed,
        note=moments.note,
        push_started_s=_rel(moments.push_started, t0),
        pushed_s=_rel(moments.pushed, t0),
        copy_s=_span(moments.push_started, moments.pushed),
        swap_start_s=_rel(moments.swap_start, t0),
        new_listed_s=_rel(moments.new_listed, t0),
        new_available_s=_rel(moments.new_available, t0),
        old_unloaded_s=_rel(moments.old_unloaded, t0),
        swap_end_s=_rel(moments.swap_end, t0),
        time_to_available_s=_span(moments.swap_start, moments.new_available),
        old_unloaded_after_s=_span(moments.swap_start, moments.old_unloaded),
        both_available_s=both_available,
        both_answered_s=both_answered,
        load_end_s=round((moments.load_end or t0) - t0, 4),
    )


def status_changes(moments: Moments) -> list[StatusChange]:
    return [
        StatusChange(at_s=round(t - moments.t0, 4), version=v, state=s)
        for t, v, s in moments.changes
    ]


def check_gate_windows(gates: Sequence[Gate]) -> None:
    """Raise SloError when a gate names something other than a window or asks a ratio."""
    for gate in gates:
        if gate.ratio:
            raise SloError(f"--slo {gate.expression!r}: a rollout has no baseline to divide by")
        if gate.arm is not None and gate.arm not in WINDOWS:
            raise SloError(
                f"--slo {gate.expression!r} names {gate.arm!r}; a rollout's gates name a window "
                f"({', '.join(WINDOWS)}) or none (the whole run)"
            )


def check_gates(gates: Sequence[Gate], stats: Sequence[WindowStats]) -> RolloutSlo | None:
    """Every gate against its window (none: the whole run); a window without the value (no
    successful request) fails its gate. None when there are no gates."""
    if not gates:
        return None
    by_name = {w.name: w for w in stats}
    rows = []
    for gate in gates:
        window = by_name[gate.arm or "run"]
        value: float | None
        if gate.metric == "errors":
            value = float(window.errors)
        elif gate.metric == "throughput":
            value = window.throughput_rps
        else:
            value = window.latency_ms.of(gate.metric)
        rows.append(
            RolloutGate(
                expression=gate.expression,
                window=window.name,
                value=value,
                threshold=gate.threshold,
                passed=passes(gate, value),
            )
        )
    return RolloutSlo(gates=rows, passed=all(row.passed for row in rows))
