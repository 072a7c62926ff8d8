"""From a sweep's raw files to the report's "steps": exact percentiles, CIs, windows, ratios.

Input: OUT/raw/records.npz (one row per request) and OUT/raw/phases.json (phases with their
times, the servers' metrics scraped around them, the load generator's CPU), both written by
loadtest/generator/sweepfile.py. Output: the run's steps, typed (loadtest/results/run.py: Step,
ArmStep, Window, Ratio, ...).

Latency statistics use the successful requests that started inside measurement windows; warm-up
requests are counted but never timed. In open loop a request's latency runs from its scheduled
arrival, not from when it was sent, so a generator or server that falls behind shows up in the
latencies instead of hiding behind fewer requests (the "coordinated omission" correction).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from graphserve.core.errors import LocustRunError
from graphserve.loadtest.generator.scrape import Snapshot
from graphserve.loadtest.results.plan import Plan
from graphserve.loadtest.results.run import (
    ArmStep,
    Breakdown,
    GeneratorLoad,
    OpenLoop,
    PercentileCIs,
    Percentiles,
    Ratio,
    RatioValue,
    ServerBreakdown,
    Stability,
    Step,
    Window,
)
from graphserve.loadtest.results.stats import (
    percentile_cis,
    ratio_summary,
    stability,
    summarize,
    window_summary,
)

__all__ = [
    "BREAKDOWN_STATISTIC",
    "CALIBRATION_ARM",
    "GENERATOR_CPU_LIMIT_PCT",
    "MACHINE_CPU_LIMIT_PCT",
    "RECORD_FIELDS",
    "RawRun",
    "analyze",
    "breakdown",
    "generator_load",
    "load_records",
    "read_raw",
]

# The fields of raw/records.npz every reader needs (it also holds seq, start and lag_ms).
RECORD_FIELDS: tuple[str, ...] = ("arms", "arm", "step", "window", "latency_ms", "ok")
# A load generator process above this CPU share was the bottleneck, not the server.
GENERATOR_CPU_LIMIT_PCT = 90.0
# The whole machine (every CPU) above this share: the generator had no CPU to spare either.
MACHINE_CPU_LIMIT_PCT = 95.0
# An arm within this share of the null endpoint's throughput measured the stack, not the model.
_NULL_SHARE = 0.9
# An open-loop request sent this much after its scheduled time counts as late.
_LATE_MS = 1.0
CALIBRATION_ARM = "null"
# The statistic every part of the server-side breakdown is taken from (see `breakdown`).
BREAKDOWN_STATISTIC = "mean"


@dataclass(frozen=True)
class RawRun:
    records: dict[str, np.ndarray]
    phases: list[dict[str, Any]]
    scrapes: list[dict[str, Any]]
    cpu: dict[int, dict[str, float]]
    errors: list[tuple[int, int, str, int]]
    truncated: str


def load_records(path: Path) -> dict[str, npt.NDArray[Any]] | None:
    """Every request of the run from raw/records.npz, field -> array; None when there is no file.

    Raises ValueError when the file is not an npz without pickles or lacks a RECORD_FIELDS field.
    """
    if not path.is_file():
        return None
    with np.load(path, allow_pickle=False) as data:
        missing = [f for f in RECORD_FIELDS if f not in data.files]
        if missing:
            raise ValueError(
                f"raw records {str(path)!r} lack the fields {missing}; expected {RECORD_FIELDS}"
            )
        return {name: data[name] for name in data.files}


def read_raw(out_dir: Path) -> RawRun:
    """Read what the sweep wrote; LocustRunError when the files are missing (the run died)."""
    raw = out_dir / "raw"
    try:
        records = load_records(raw / "records.npz")
        if records is None:
            raise OSError("raw/records.npz is missing")
        document = json.loads((raw / "phases.json").read_text())
    except (OSError, ValueError) as exc:
        raise LocustRunError(
            f"the load test left no complete raw results in {str(raw)!r} ({exc}); see "
            f"{str(out_dir / 'locust.log')!r}"
        ) from None
    return RawRun(
        records=records,
        phases=document["phases"],
        scrapes=document["scrapes"],
        cpu={int(seq): nodes for seq, nodes in document["cpu"].items()},
        errors=[(int(a), int(s), str(m), int(n)) for a, s, m, n in document["errors"]],
        truncated=document["truncated"],
    )


def analyze(run: RawRun, plan: Plan, baseline: str) -> list[Step]:
    """The report's steps, one per load the sweep reached."""
    names = [arm.name for arm in plan.arms]
    steps: list[Step] = []
    reached = sorted({p["step"] for p in run.phases if p["kind"] != "idle"})
    for step in reached:
        measured = {name: _arm_step(run, plan, step, index) for index, name in enumerate(names)}
        arms = _calibrate({name: arm for name, (arm, _) in measured.items()})
        latencies = {name: good_ms for name, (_, good_ms) in measured.items()}
        steps.append(
            Step(
                index=step,
                load=plan.loads[step],
                arms=arms,
                ratios=_ratios(arms, latencies, baseline, seed=plan.seed + step),
            )
        )
    return steps


def _arm_step(run: RawRun, plan: Plan, step: int, arm: int) -> tuple[ArmStep, np.ndarray]:
    """One arm at one step, and the sorted latencies of its measured successful requests."""
    r = run.records
    mine = (r["step"] == step) & (r["arm"] == arm)
    measured = mine & (r["window"] >= 0)
    timed = r["latency_ms"] + (r["lag_ms"] if plan.mode == "open" else 0.0)
    good_ms = np.sort(timed[measured & r["ok"]])
    windows = [
        p for p in run.phases if p["step"] == step and p["arm"] == arm and p["kind"] == "window"
    ]
    summaries = [_window(run, p, timed) for p in windows]
    duration = sum(p["ended"] - p["started"] for p in windows if p["ended"] is not None)
    stable, spread = stability(summaries, last=plan.min_windows, tolerance_pct=plan.stability_pct)
    seqs = {p["seq"] for p in run.phases if p["step"] == step and p["arm"] == arm}
    errors = Counter({m: n for a, s, m, n in run.errors if a == arm and s in seqs})
    latency = Percentiles.model_validate(summarize(good_ms))
    arm_step = ArmStep(
        requests=int(mine.sum()),
        warmup_requests=int((mine & (r["window"] < 0)).sum()),
        measured_requests=int(measured.sum()),
        failures=int((measured & ~r["ok"]).sum()),
        errors=dict(errors.most_common()),
        duration_s=duration,
        throughput_rps=good_ms.size / duration if duration > 0 else None,
        latency_ms=latency,
        ci95_ms=PercentileCIs.model_validate(percentile_cis(good_ms, seed=plan.seed + step)),
        windows=summaries,
        stable=stable,
        stability=Stability(last_windows=plan.min_windows, spread_pct=spread),
        generator=generator_load(summaries, _cpu_per_request(run, windows, summaries)),
        server=_server(run, step, arm, windows, int(mine.sum()), latency.mean),
        open_loop=_open_loop(plan, step, r, measured, duration),
    )
    return arm_step, good_ms


def _window(run: RawRun, phase: Mapping[str, Any], timed: np.ndarray) -> Window:
    r = run.records
    chosen = r["seq"] == phase["seq"]
    cpu = run.cpu.get(phase["seq"], {})
    return window_summary(
        timed[chosen],
        r["ok"][chosen],
        phase["started"],
        phase["ended"] if phase["ended"] is not None else phase["started"] + 1e-6,
        index=phase["window"],
        cpu_pct=max(cpu.values()) if cpu else None,
        machine_cpu_pct=phase.get("machine_cpu_pct"),
    )


def _cpu_per_request(
    run: RawRun, phases: Sequence[Mapping[str, Any]], windows: Sequence[Window]
) -> float | None:
    """Microseconds of generator CPU (all its processes) per request, median over `windows`."""
    costs = []
    for phase, window in zip(phases, windows, strict=True):
        cpu = run.cpu.get(phase["seq"], {})
        if cpu and window.throughput_rps:
            costs.append(sum(cpu.values()) / 100 / window.throughput_rps * 1e6)
    return float(np.median(costs)) if costs else None


def generator_load(
    windows: Sequence[Window], cpu_us_per_request: float | None = None
) -> GeneratorLoad:
    """Whether the load generator may have been the limit in `windows` (their
    `generator_cpu_pct`, the busiest locust process, and `machine_cpu_pct`, every CPU of the
    machine): bound when either reached its limit in some window; none measured is not bound.
    A generator beside a server that keeps every CPU busy is starved as surely as one that
    keeps its own core busy."""
    cpu = _highest(w.generator_cpu_pct for w in windows)
    machine = _highest(w.machine_cpu_pct for w in windows)
    reasons = []
    if cpu is not None and cpu >= GENERATOR_CPU_LIMIT_PCT:
        reasons.append(
            f"a locust process used {cpu:.0f}% CPU (limit {GENERATOR_CPU_LIMIT_PCT:.0f}%)"
        )
    if machine is not None and machine >= MACHINE_CPU_LIMIT_PCT:
        reasons.append(
            f"the machine's CPUs were {machine:.0f}% busy (limit {MACHINE_CPU_LIMIT_PCT:.0f}%)"
        )
    return GeneratorLoad(
        cpu_pct=cpu,
        machine_cpu_pct=machine,
        bound=bool(reasons),
        reason="; ".join(reasons) or None,
        cpu_us_per_request=cpu_us_per_request,
    )


def _highest(values: Iterable[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return max(measured) if measured else None


def _calibrate(arms: dict[str, ArmStep]) -> dict[str, ArmStep]:
    """Arms whose throughput is the null endpoint's marked generator-bound: they measured the
    stack, not a model."""
    null = arms.get(CALIBRATION_ARM)
    ceiling = null.throughput_rps if null else None
    if not ceiling:
        return arms
    marked = dict(arms)
    for name, arm in arms.items():
        rps = arm.throughput_rps
        if name == CALIBRATION_ARM or rps is None or rps < _NULL_SHARE * ceiling:
            continue
        reason = (
            f"{rps:.0f} req/s is within {100 * (1 - _NULL_SHARE):.0f}% of the null endpoint's "
            f"{ceiling:.0f} req/s"
        )
        reasons = "; ".join(filter(None, [arm.generator.reason, reason]))
        generator = arm.generator.model_copy(update={"bound": True, "reason": reasons})
        marked[name] = arm.model_copy(update={"generator": generator})
    return marked


def _server(
    run: RawRun,
    step: int,
    arm: int,
    windows: Sequence[Mapping[str, Any]],
    client_requests: int,
    client_mean_ms: float | None,
) -> ServerBreakdown | None:
    """Server-side time over the measurement windows; the server's request count for the step."""

    def snapshot(moment: str, seq: int | None = None) -> Snapshot | None:
        for s in run.scrapes:
            same = s["arm"] == arm and s["step"] == step and s["moment"] == moment
            if same and (seq is None or s["seq"] == seq):
                return Snapshot(**{k: s[k] for k in Snapshot.__dataclass_fields__})
        return None

    start, end = snapshot("step_start"), snapshot("step_end")
    if start is None:
        return None
    total = Snapshot()
    for phase in windows:
        before, after = snapshot("phase_start", phase["seq"]), snapshot("phase_end", phase["seq"])
        if before is not None and after is not None:
            total = total.plus(after.minus(before))
    request_ms = _mean_ms(total.request_sum_s, total.request_count)
    runtime_ms = _mean_ms(total.runtime_sum_s, total.runtime_count)
    return ServerBreakdown(
        requests=int(end.minus(start).requests) if end is not None else None,
        client_requests=client_requests,
        request_mean_ms=request_ms,
        runtime_mean_ms=runtime_ms,
        **breakdown(client_mean_ms, request_ms, runtime_ms).model_dump(),
    )


def breakdown(
    client_mean_ms: float | None, request_mean_ms: float | None, runtime_mean_ms: float | None
) -> Breakdown:
    """Split the client's mean latency into model, rest of the server, client and network.

    Every part is a difference of means (BREAKDOWN_STATISTIC): Prometheus histograms give a
    server's sum and count, hence its mean, exactly, and no percentile. Means add up, so the
    three parts sum to the client's mean latency. A part is never negative: the server counts
    the requests that ended between its scrapes, the client those that started in a window
    and succeeded, so the two means can disagree by more than the part; such a part shows as 0
    and its raw difference is kept in `clamped_ms`.
    """
    raw = {
        "model": runtime_mean_ms,
        "server": _minus(request_mean_ms, runtime_mean_ms),
        "client_and_network": _minus(client_mean_ms, request_mean_ms),
    }
    clamped = {name: value for name, value in raw.items() if value is not None and value < 0}
    return Breakdown(
        statistic=BREAKDOWN_STATISTIC,
        client_mean_ms=client_mean_ms,
        breakdown_ms={name: 0.0 if name in clamped else v for name, v in raw.items()},
        clamped_ms=clamped,
    )


def _open_loop(
    plan: Plan, step: int, r: Mapping[str, np.ndarray], measured: np.ndarray, duration: float
) -> OpenLoop | None:
    if plan.mode != "open":
        return None
    sent = int(measured.sum())
    late = int((measured & (r["lag_ms"] > _LATE_MS)).sum())
    return OpenLoop(
        target_rps=plan.loads[step],
        achieved_rps=sent / duration if duration > 0 else None,
        late_pct=100.0 * late / sent if sent else None,
    )


def _ratios(
    arms: Mapping[str, ArmStep],
    latencies: Mapping[str, np.ndarray],
    baseline: str,
    seed: int,
) -> dict[str, Ratio]:
    base = arms.get(baseline)
    if base is None:
        return {}
    ratios: dict[str, Ratio] = {}
    for name, arm in arms.items():
        if name in (baseline, CALIBRATION_ARM):
            continue
        rps, base_rps = arm.throughput_rps, base.throughput_rps
        throughput = rps / base_rps if rps is not None and base_rps else None
        ratios[f"{name}/{baseline}"] = Ratio.model_validate(
            {
                **ratio_summary(latencies[name], latencies[baseline], seed=seed),
                "throughput": RatioValue(value=throughput, ci95=None),
            }
        )
    return ratios


def _mean_ms(total_s: float, count: float) -> float | None:
    return 1000.0 * total_s / count if count > 0 else None


def _minus(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None
