"""M2, Zipf traffic: the one-model server at the plan's rate, then Zipf traffic over every model
with at most `plan.resident` versions resident. `graphserve loadtest many` (its library:
manymodels.run.many) sends it and scrapes the server every second meanwhile."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tools.bench.many.plan import Run
from tools.bench.many.report import shown
from tools.bench.many.servers import MB, scrape, serving, timing, wait_resident

__all__ = ["TRAFFIC", "USERS", "zipf"]

TRAFFIC = "graphserve loadtest many"
USERS = 64  # its threads: enough that requests waiting on loads leave some free


def _traffic(
    run: Run, address: str, config: Path, duration_s: float, tag: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`graphserve loadtest many` against `address` at the plan's rate, Zipf over `config`'s
    models in their order: what its clients saw, and its scrapes of the server every second
    as samples (one scraper: a scrape costs the server time). LoadTestError when it cannot
    run."""
    from graphserve.loadtest.generator.locustrun import read_records
    from graphserve.loadtest.manymodels.popularity import Popularity, models_from_config
    from graphserve.loadtest.manymodels.run import many
    from graphserve.loadtest.manymodels.spec import ManySpec

    plan, out = run.plan, run.plan.work_dir / f"loadtest-many-{tag}"
    popularity = Popularity.zipf(models_from_config(config), plan.zipf_s, config)
    report = many(ManySpec(f"http://{address}", popularity, rate=plan.rate, users=USERS,
                           duration_s=duration_s, scrape_every_s=1.0), out)  # fmt: skip
    # every request as the generator recorded it (loadtest/manymodels/analysis.py): latency
    # from the actual send, lag behind the schedule, the server's mark (NaN: warm), error (-1)
    records = read_records(out / "raw", out / "locust.log")
    answered = records["error"] == -1
    ms, lag, cold_s = (records[k][answered].tolist() for k in ("latency_ms", "lag_ms", "cold_s"))
    warm = [(m, g) for m, g, c in zip(ms, lag, cold_s, strict=True) if np.isnan(c)]
    cold = [(m, g, c * 1e3) for m, g, c in zip(ms, lag, cold_s, strict=True) if not np.isnan(c)]
    scheduled, totals = round(plan.rate * duration_s), report.totals
    traffic = {
        "generator": TRAFFIC,
        "scheduled": scheduled,
        "requests": totals.requests,
        "unsent": max(scheduled - totals.requests, 0),
        "failures": totals.failures,
        "failure_examples": list(report.errors)[:10],
        **_latencies(warm, cold),
        "hit_ratio": totals.hit_ratio,
        "sent_per_s": totals.throughput_rps,
    }
    samples = [
        {
            "t_s": m.t_s,
            "rss_mb": round((m.rss_bytes or 0.0) / MB, 2),
            "resident_mb": round((m.resident_bytes or 0.0) / MB, 2),
            "resident_versions": m.resident_versions,
            "loads": m.loads,
            "evictions": m.evictions,
            "scrape_ms": m.scrape_ms,
        }
        for m in report.memory
    ]
    return traffic, samples


def _latencies(
    warm: Sequence[tuple[float, float]], cold: Sequence[tuple[float, float, float]]
) -> dict[str, Any]:
    """Warm (ms, lag ms) and cold (ms, lag ms, marked wait ms) answers: their latencies from
    the actual send, from the scheduled send (the lag added: an open loop's view), and the
    cold ones' waits the server marked."""
    lags = [lag for _, lag in warm] + [lag for _, lag, _ in cold]
    return {
        "late_p50_ms": round(float(np.median(lags)), 1) if lags else None,
        "late_max_ms": round(max(lags), 1) if lags else None,
        "warm": timing([ms for ms, _ in warm]),
        "cold": timing([ms for ms, _, _ in cold]),
        "warm_scheduled": timing([ms + lag for ms, lag in warm]),
        "cold_scheduled": timing([ms + lag for ms, lag, _ in cold]),
        "cold_wait": timing([wait for _, _, wait in cold]),
    }


def zipf(run: Run) -> dict[str, Any]:
    """M2: the one-model server at the rate, then Zipf traffic over every model with at most
    `plan.resident` versions resident, the server scraped every second."""
    plan = run.plan
    flags = ["--max-resident-models", str(plan.resident)]
    with serving(run.one_config, flags, run.log("zipf-one"), record=run.servers) as one:
        assert one.rest_address is not None
        baseline, _ = _traffic(run, one.rest_address, run.one_config, plan.baseline_duration_s,
                               "one")  # fmt: skip
    run.say(f"M2 one model: warm p50 {shown((baseline['warm'] or {}).get('p50_ms'))} ms")
    with serving(run.config, flags, run.log("zipf-many"), record=run.servers) as server:
        address = server.rest_address
        assert address is not None
        base = wait_resident(address, 0, timeout=60.0)
        first = scrape(address)
        traffic, samples = _traffic(run, address, run.config, plan.zipf_duration_s, "many")
        last = scrape(address)
    loads = last.loads - first.loads
    budget = max((s["resident_mb"] for s in samples), default=0.0) * MB
    run.say(f"M2 {plan.models} models: warm p50 {shown((traffic['warm'] or {}).get('p50_ms'))} ms, "
            f"{loads:.0f} loads")  # fmt: skip
    return {
        "baseline": baseline,
        "traffic": traffic,
        "base_rss_bytes": base.rss,
        "base_rule": "process_resident_memory_bytes scraped once the server answered, held no "
        "version (graphserve_resident_versions 0) and 2 s passed, before the first request",
        "budget_bytes": budget,
        "budget_rule": "the largest graphserve_resident_bytes of the scrapes every second during "
        "the traffic",
        "rss_max_bytes": max((s["rss_mb"] for s in samples), default=0.0) * MB,
        "loads": loads,
        "load_ms_mean": (last.load_seconds - first.load_seconds) / loads * 1e3 if loads else None,
        "evictions": last.evictions - first.evictions,
        "model_bytes": sorted(last.model_bytes.values()),
        "samples": samples,
    }
