"""From a many-models run's records and scrapes to its report's numbers.

    records   start (time.time()), latency_ms, lag_ms, model (index in the popularity's names),
              error (-1: none, else an index in "errors"), cold_s (NaN: no cold-load mark)
    Scrapes   the server's first and last scrapes, and each scrape's gauges and totals

A request is cold when it carries the mark, warm when it was answered without it. Latencies are
the answered requests', from the scheduled send in an open loop (a generator that falls behind,
its users all waiting on cold loads, must not hide it) and from the send in a closed one.
Pure numpy and the typed report: no TensorFlow, no locust, no gRPC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from graphserve.core.errors import SloError
from graphserve.loadtest.results.labels import fmt_plain
from graphserve.loadtest.results.many import (
    CLASSES,
    MANY_SCHEMA,
    ManyGate,
    ManyReport,
    ManySettings,
    ManySlo,
    MemorySample,
    ModelRow,
    PayloadGroup,
    ServerCounters,
    Tick,
    Totals,
)
from graphserve.loadtest.results.run import Percentiles
from graphserve.loadtest.results.slo import Gate, parse_gate, passes
from graphserve.loadtest.results.stats import percentile, summarize

if TYPE_CHECKING:
    from graphserve.loadtest.manymodels.scrapes import Scrapes, ServerScrape
    from graphserve.loadtest.manymodels.spec import ManySpec, Target

__all__ = ["Requests", "build_report", "check_gates", "parse_gates"]

Records = Mapping[str, npt.NDArray[Any]]


def parse_gates(texts: Sequence[str]) -> list[Gate]:
    """The `--slo` gates (a comma separates several in one text). A gate names the requests it
    judges (all, warm, cold) or none (all); errors and throughput are of all requests. Raises
    SloError for a gate that cannot be read or judged here."""
    gates = [parse_gate(g) for text in texts for g in text.split(",") if g.strip()]
    for gate in gates:
        if gate.ratio:
            raise SloError(f"--slo {gate.expression!r}: a many-models run has no baseline")
        if gate.arm is not None and gate.arm not in CLASSES:
            raise SloError(
                f"--slo {gate.expression!r} names {gate.arm!r}; here a gate names the requests "
                f"it judges ({', '.join(CLASSES)}) or none (all)"
            )
        if gate.metric in ("errors", "throughput") and gate.arm not in (None, "all"):
            raise SloError(f"--slo {gate.expression!r}: {gate.metric} is of all requests")
    return gates


@dataclass(frozen=True)
class Requests:
    """The records as the report reads them: each request's latency and what it was."""

    model: npt.NDArray[np.int64]
    latency: npt.NDArray[np.float64]
    answered: npt.NDArray[np.bool_]
    cold: npt.NDArray[np.bool_]  # marked cold, answered or not

    @classmethod
    def of(cls, records: Records, open_loop: bool) -> Requests:
        latency = records["latency_ms"].astype(np.float64)
        return cls(
            model=records["model"].astype(np.int64),
            latency=latency + records["lag_ms"] if open_loop else latency,
            answered=records["error"] < 0,
            cold=np.isfinite(records["cold_s"]),
        )

    @property
    def warm(self) -> npt.NDArray[np.bool_]:
        return self.answered & ~self.cold

    @property
    def answered_cold(self) -> npt.NDArray[np.bool_]:
        return self.answered & self.cold


def build_report(
    spec: ManySpec,
    target: Target,
    metrics_url: str | None,
    payloads: list[PayloadGroup],
    records: Records,
    t0: float,
    scrapes: Scrapes,
    gates: Sequence[Gate],
) -> ManyReport:
    """The report of one run from its records and the server's scrapes."""
    from graphserve.loadtest.comparison.run import environment

    open_loop = spec.rate is not None
    requests = Requests.of(records, open_loop)
    names = spec.popularity.names
    rows = model_rows(requests, names, spec.popularity.weights, scrapes.first, scrapes.last)
    report = ManyReport(
        schema=MANY_SCHEMA,
        title=_title(spec, target),
        settings=_settings(spec, target, metrics_url, payloads, open_loop),
        environment=environment(),
        totals=totals(requests, records, t0),
        latency_ms=latencies(requests),
        load_wait_ms=Percentiles.model_validate(
            summarize(records["cold_s"][requests.cold] * 1000.0)
        ),
        models=rows,
        top=spec.top,
        tail=tail_row(requests, rows, spec.top, names),
        server=server_counters(scrapes),
        memory=[MemorySample(t_s=round(at - t0, 3), **values) for at, values in scrapes.series],
        timeline=timeline(requests, records["start"], t0),
        errors=errors(records),
        slo=None,
        files=[],
    )
    report.slo = check_gates(gates, report, spec.max_failure_ratio, spec.min_hit_ratio)
    return report


def totals(requests: Requests, records: Records, t0: float) -> Totals:
    count = int(requests.model.size)
    answered = int(requests.answered.sum())
    ends = records["start"] + records["latency_ms"] / 1000.0
    duration = max(float(ends.max()) - t0, 1e-3) if count else 0.0
    return Totals(
        requests=count,
        answered=answered,
        failures=count - answered,
        failure_ratio=(count - answered) / count if count else None,
        cold=int(requests.cold.sum()),
        warm=int(requests.warm.sum()),
        hit_ratio=int(requests.warm.sum()) / count if count else None,
        duration_s=round(duration, 3),
        throughput_rps=round(answered / duration, 2) if duration else None,
        models_requested=int(np.unique(requests.model).size),
        models_cold=int(np.unique(requests.model[requests.cold]).size),
    )


def latencies(requests: Requests) -> dict[str, Percentiles]:
    masks = {"all": requests.answered, "warm": requests.warm, "cold": requests.answered_cold}
    return {
        name: Percentiles.model_validate(summarize(requests.latency[mask]))
        for name, mask in masks.items()
    }


def _p50_p99(values: npt.NDArray[np.float64]) -> tuple[float | None, float | None]:
    if not values.size:
        return None, None
    ordered = np.sort(values)
    return percentile(ordered, 0.5), percentile(ordered, 0.99)


def _by_model(
    requests: Requests, mask: npt.NDArray[np.bool_], count: int
) -> list[tuple[float | None, float | None]]:
    """(p50, p99) of the masked requests of each model 0..count-1."""
    model, latency = requests.model[mask], requests.latency[mask]
    order = np.lexsort((latency, model))
    model, latency = model[order], latency[order]
    bounds = np.searchsorted(model, np.arange(count + 1))
    return [_p50_p99(latency[bounds[i] : bounds[i + 1]]) for i in range(count)]


def model_rows(
    requests: Requests,
    names: Sequence[str],
    weights: Sequence[float],
    first: ServerScrape | None,
    last: ServerScrape | None,
) -> list[ModelRow]:
    """A row per model, most requested first (ties: the more popular first)."""
    count = len(names)
    asked = np.bincount(requests.model, minlength=count)
    failed = np.bincount(requests.model[~requests.answered], minlength=count)
    cold = np.bincount(requests.model[requests.cold], minlength=count)
    warm = _by_model(requests, requests.warm, count)
    cold_ms = _by_model(requests, requests.answered_cold, count)
    loads = _per_model(first, last, "graphserve_model_loads", "loads")
    evictions = _per_model(first, last, "graphserve_model_evictions", "evictions")
    rows = [
        ModelRow(
            name=name,
            rank=i + 1,
            weight=round(weights[i], 6),
            requests=int(asked[i]),
            failures=int(failed[i]),
            cold=int(cold[i]),
            warm_p50_ms=warm[i][0],
            warm_p99_ms=warm[i][1],
            cold_p50_ms=cold_ms[i][0],
            cold_p99_ms=cold_ms[i][1],
            loads=None if loads is None else int(loads.get(name, 0)),
            evictions=None if evictions is None else int(evictions.get(name, 0)),
        )
        for i, name in enumerate(names)
    ]
    return sorted(rows, key=lambda row: (-row.requests, row.rank))


def _per_model(
    first: ServerScrape | None, last: ServerScrape | None, family: str, counter: str
) -> dict[str, float] | None:
    """A counter's delta over the run by model (summed over its other label); None when the
    server did not expose it."""
    if first is None or last is None or not last.has(family):
        return None
    values: Mapping[tuple[str, str], float] = getattr(last, counter)
    before: Mapping[tuple[str, str], float] = getattr(first, counter)
    deltas: dict[str, float] = {}
    for key, value in values.items():
        deltas[key[0]] = deltas.get(key[0], 0.0) + value - before.get(key, 0.0)
    return deltas


def tail_row(
    requests: Requests, rows: Sequence[ModelRow], top: int, names: Sequence[str]
) -> ModelRow | None:
    """The models after the first `top` rows, as one: their requests together."""
    tail = rows[top:]
    if not tail:
        return None
    index = {name: i for i, name in enumerate(names)}
    mine = np.isin(requests.model, [index[row.name] for row in tail])
    warm = _p50_p99(requests.latency[mine & requests.warm])
    cold = _p50_p99(requests.latency[mine & requests.answered_cold])
    return ModelRow(
        name=f"the other {len(tail):,} models",
        rank=None,
        weight=round(sum(row.weight for row in tail), 6),
        requests=sum(row.requests for row in tail),
        failures=sum(row.failures for row in tail),
        cold=sum(row.cold for row in tail),
        warm_p50_ms=warm[0],
        warm_p99_ms=warm[1],
        cold_p50_ms=cold[0],
        cold_p99_ms=cold[1],
        loads=_sum_or_none(row.loads for row in tail),
        evictions=_sum_or_none(row.evictions for row in tail),
    )


def _sum_or_none(values: Any) -> int | None:
    known = list(values)
    return None if any(v is None for v in known) else sum(known)


def server_counters(scrapes: Scrapes) -> ServerCounters | None:
    """The server's counters over the run (last scrape minus first) and its gauges' peaks."""
    first, last = scrapes.first, scrapes.last
    if first is None or last is None:
        return None
    loads = _outcomes(first.loads, last.loads) if last.has("graphserve_model_loads") else None
    evictions = None
    if last.has("graphserve_model_evictions"):
        evictions = _outcomes(first.evictions, last.evictions)
    cold = None
    if last.has("graphserve_cold_requests"):
        cold = int(sum(v - first.cold.get(m, 0.0) for m, v in last.cold.items()))
    return ServerCounters(
        reported=sorted(last.present),
        loads_ok=None if loads is None else loads.get("ok", 0),
        loads_failed=None if loads is None else loads.get("failed", 0),
        evictions=evictions,
        cold_requests=cold,
        rss_bytes_max=_peak(scrapes.series, "rss_bytes"),
        resident_bytes_max=_peak(scrapes.series, "resident_bytes"),
        resident_versions_max=_peak(scrapes.series, "resident_versions"),
    )


def _outcomes(
    first: Mapping[tuple[str, str], float], last: Mapping[tuple[str, str], float]
) -> dict[str, int]:
    """A counter's delta by its second label (outcome, reason), models together."""
    totals: dict[str, float] = {}
    for key, value in last.items():
        totals[key[1]] = totals.get(key[1], 0.0) + value - first.get(key, 0.0)
    return {label: int(total) for label, total in sorted(totals.items())}


def _peak(series: Sequence[tuple[float, Mapping[str, float | None]]], key: str) -> float | None:
    values = [v for _, point in series if (v := point[key]) is not None]
    return max(values) if values else None


def timeline(requests: Requests, start: npt.NDArray[np.float64], t0: float) -> list[Tick]:
    """Per second of the run (by the send): requests, cold, failures, and the warm and cold
    latencies of the answered."""
    if not start.size:
        return []
    second = np.floor(start - t0).astype(np.int64)
    ticks = []
    for s in range(int(second.min()), int(second.max()) + 1):
        inside = second == s
        warm = _p50_p99(requests.latency[inside & requests.warm])
        cold = np.sort(requests.latency[inside & requests.answered_cold])
        ticks.append(
            Tick(
                t_s=float(s),
                requests=int(inside.sum()),
                cold=int((inside & requests.cold).sum()),
                failures=int((inside & ~requests.answered).sum()),
                warm_p50_ms=warm[0],
                warm_p99_ms=warm[1],
                cold_p50_ms=percentile(cold, 0.5) if cold.size else None,
                cold_max_ms=float(cold[-1]) if cold.size else None,
            )
        )
    return ticks


def errors(records: Records) -> dict[str, int]:
    """Failed requests by status (gRPC code, `HTTP 503`, or the client's error)."""
    codes = records["error"]
    labels = [str(label) for label in records["errors"]]
    counts = np.bincount(codes[codes >= 0], minlength=len(labels))
    return {labels[i]: int(n) for i, n in enumerate(counts) if n}


def check_gates(
    gates: Sequence[Gate],
    report: ManyReport,
    max_failure_ratio: float | None,
    min_hit_ratio: float | None,
) -> ManySlo | None:
    """Every gate against its requests, and the ratio bounds; None when there are none. A value
    that was not measured fails its gate, and nothing passes when no request was answered."""
    totals = report.totals
    rows = []
    for gate in gates:
        requests = gate.arm or "all"
        value: float | None
        if gate.metric == "errors":
            value = float(totals.failures)
        elif gate.metric == "throughput":
            value = totals.throughput_rps
        else:
            value = report.latency_ms[requests].of(gate.metric)
        rows.append(
            ManyGate(
                expression=gate.expression,
                requests=requests,
                value=value,
                threshold=gate.threshold,
                passed=passes(gate, value),
            )
        )
    for name, bound, value, op in (
        ("failure_ratio", max_failure_ratio, totals.failure_ratio, "<="),
        ("hit_ratio", min_hit_ratio, totals.hit_ratio, ">="),
    ):
        if bound is not None:
            gate = Gate(f"{name}{op}{fmt_plain(bound)}", None, False, name, op, bound)
            rows.append(
                ManyGate(
                    expression=gate.expression,
                    requests="all",
                    value=value,
                    threshold=bound,
                    passed=passes(gate, value),
                )
            )
    if not rows:
        return None
    return ManySlo(gates=rows, passed=all(r.passed for r in rows) and totals.answered > 0)


def _title(spec: ManySpec, target: Target) -> str:
    load = f"{fmt_plain(spec.rate)} req/s" if spec.rate is not None else f"{spec.users} users"
    protocol = "gRPC" if target.protocol == "grpc" else "REST"
    return f"{len(spec.popularity.names):,} models, {protocol}, {load}"


def _settings(
    spec: ManySpec,
    target: Target,
    metrics_url: str | None,
    payloads: list[PayloadGroup],
    open_loop: bool,
) -> ManySettings:
    popularity = spec.popularity
    return ManySettings(
        target=spec.target,
        protocol=target.protocol,
        models_from=str(popularity.models_from) if popularity.models_from else None,
        weights_file=str(popularity.weights_file) if popularity.weights_file else None,
        zipf_s=popularity.zipf_s,
        models=len(popularity.names),
        signature_name=spec.signature_name,
        batch_size=spec.batch_size,
        mode="open" if open_loop else "closed",
        rate=spec.rate,
        users=spec.users,
        duration_s=spec.duration_s,
        max_requests=spec.max_requests,
        seed=spec.seed,
        scrape_every_s=spec.scrape_every_s,
        metrics_url=metrics_url,
        payloads=payloads,
        latency=(
            "from the scheduled send (open loop: a late send counts its lag)"
            if open_loop
            else "from the send"
        ),
    )
