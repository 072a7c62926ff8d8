"""The many-models goals M1-M4, each read from the results (tools/bench/README.md's table)."""

from __future__ import annotations

from typing import Any

from tools.bench.goals import Goal, evaluate
from tools.bench.many.servers import MB

__all__ = ["MANY_GOALS", "many_goals"]


def _m1(r: dict[str, Any]) -> tuple[float, str]:
    m = r["first"]["median_s"]
    return m["many"] - m["one"], (
        f"{r['first']['models']:,} models {m['many']:.2f} s - one model {m['one']:.2f} s "
        f"(median of {r['plan']['first_runs']} starts each, process start to the first 200)"
    )


def _m2_failures(r: dict[str, Any]) -> tuple[float, str]:
    t = r["zipf"]["traffic"]
    return float(t["failures"]), f"{t['failures']} of {t['requests']:,} requests sent failed"


def _m2_sent(r: dict[str, Any]) -> tuple[bool, str]:
    t = r["zipf"]["traffic"]
    sent = t["requests"] / t["scheduled"]
    return sent >= 0.99, f"{sent:.1%} of the {t['scheduled']:,} scheduled were sent (goal ≥ 99%)"


def _m2_warm(r: dict[str, Any]) -> tuple[float, str]:
    many, one = r["zipf"]["traffic"]["warm"]["p50_ms"], r["zipf"]["baseline"]["warm"]["p50_ms"]
    return many / one, (
        f"warm p50 {many:.2f} ms, {r['plan']['models']:,} models / one model {one:.2f} ms, "
        f"both at {r['plan']['rate']:g} req/s, from the actual send"
    )


def _m2_cold(r: dict[str, Any]) -> tuple[float, str]:
    z = r["zipf"]
    cold, load = z["traffic"]["cold"]["p50_ms"], z["load_ms_mean"]
    return cold / (load + 20.0), (
        f"cold p50 {cold:,.1f} ms from the actual send / (mean load {load:.1f} ms + 20 ms), "
        f"{z['loads']:,.0f} loads"
    )


def _m2_rss(r: dict[str, Any]) -> tuple[float, str]:
    z = r["zipf"]
    base, budget, top = z["base_rss_bytes"], z["budget_bytes"], z["rss_max_bytes"]
    return (top - base) / budget, (
        f"(max RSS {top / MB:,.0f} MB - base {base / MB:,.0f} MB) / largest resident "
        f"{budget / MB:,.0f} MB"
    )


def _m3(r: dict[str, Any]) -> tuple[float, str]:
    p = r["isolation"]["phases"]
    cold, warm = p["cold"]["hot"]["p99_ms"], p["resident"]["hot"]["p99_ms"]
    return cold / warm, (
        f"hot p99 {cold:.2f} ms with cold neighbours ({p['cold']['loads_per_s']:g} loads/s) / "
        f"{warm:.2f} ms with resident ones"
    )


def _m4(r: dict[str, Any]) -> tuple[float, str]:
    row = next(row for row in r["memory"]["rows"] if row["allocator"] == "default")
    allowed = max(0.1 * row["before_mb"], 50.0)
    grew = row["after_mb"] - row["before_mb"]
    return grew / allowed, (
        f"after - before {grew:+.1f} MB / allowed {allowed:.1f} MB (before {row['before_mb']:.0f} "
        f"MB, peak {row['peak_mb']:.0f} MB; glibc with malloc_trim, oneDNN off)"
    )


MANY_GOALS: tuple[Goal, ...] = (
    Goal("M1", "first answer: 1,000 models - one model (s)", "<=", 5.0, _m1),
    Goal("M2a", "Zipf: failed requests (and the load sent)", "<=", 0.0, _m2_failures, _m2_sent),
    Goal("M2b", "Zipf: warm p50 / one-model server's p50", "<=", 1.10, _m2_warm),
    Goal("M2c", "Zipf: cold p50 / (mean load time + 20 ms)", "<=", 1.0, _m2_cold),
    Goal("M2d", "Zipf: (max RSS - base) / max resident bytes", "<=", 1.10, _m2_rss),
    Goal("M3", "isolation: hot p99 with cold neighbours / with resident ones", "<=", 1.5, _m3),
    Goal("M4", "memory back: (after - before) / max(10% of before, 50 MB)", "<=", 1.0, _m4),
)


def many_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """MANY_GOALS evaluated against `results`; a part not run is a miss saying so."""
    return [g.to_json() for g in evaluate(results, MANY_GOALS)]
