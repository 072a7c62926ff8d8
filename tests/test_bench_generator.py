"""The generator agreement's pieces that need no server: reading the reference generators' output
and the medians and ratios over rounds (tools/bench/generator.py). The runs themselves are in
tests/test_bench.py, against real servers with the real perf_analyzer and wrk.

The outputs read here are what the programs printed, captured from real runs against a graph
server and never edited: tests/fixtures/README.md says how, when and with which versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench.generator import (
    _PERF_ANALYZER_UNSTABLE,
    Agreement,
    PerfAnalyzerUnstable,
    Point,
    Stability,
    _perf_analyzer_numbers,
    _wrk_ms,
    _wrk_numbers,
    perf_analyzer_point,
    stability_text,
    wrk_point,
)
from tools.bench.tools import Tool

FIXTURES = Path(__file__).parent / "fixtures"


def captured(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_wrk_latencies_are_read_in_their_units() -> None:
    one = captured("wrk_c1.txt")  # 50% 433.00us, 75% 694.00us, 90% 2.84ms, 99% 30.53ms
    assert _wrk_ms("50%", one) == pytest.approx(0.433)
    assert _wrk_ms("75%", one) == pytest.approx(0.694)
    assert _wrk_ms("90%", one) == pytest.approx(2.84)
    assert _wrk_numbers(one) == pytest.approx((0.433, 30.53, 1711.43))
    assert _wrk_ms("95%", one) is None  # wrk --latency prints 50, 75, 90 and 99 only
    assert _wrk_numbers(captured("wrk_c16.txt")) == pytest.approx((4.66, 96.0, 2636.2))
    # From 1 s on wrk writes seconds (format_time_us in its units.c); no run here was that slow.
    assert _wrk_ms("99%", "     99%    1.51s\n") == pytest.approx(1510.0)


def test_perf_analyzer_latencies_are_read_in_ms() -> None:
    assert _perf_analyzer_numbers(captured("perf_analyzer_2.41_c1.txt")) == pytest.approx(
        (0.655, 4.048, 905.025)
    )
    assert _perf_analyzer_numbers(captured("perf_analyzer_2.41_c16.txt")) == pytest.approx(
        (6.109, 16.472, 2441.57)
    )
    # The perf-analyzer 2.60 wheel's binary prints the same lines (it does not run on Debian 12).
    assert _perf_analyzer_numbers(captured("perf_analyzer_2.60_c1.txt")) == pytest.approx(
        (0.645, 4.447, 1304.11)
    )
    unstable = captured("perf_analyzer_2.41_unstable_c1.txt")
    assert _perf_analyzer_numbers(unstable) == (None, None, None)
    assert _PERF_ANALYZER_UNSTABLE in unstable


def replaying(tmp_path: Path, name: str, script: str) -> Tool:
    """A stand-in for a generator's program that prints captured output (`script`: sh)."""
    program = tmp_path / name
    program.write_text(f"#!/bin/sh\ncd {FIXTURES}\n{script}\n")
    program.chmod(0o755)
    return Tool(name, "captured", program, {})


def test_wrk_point_is_what_wrk_printed(tmp_path: Path) -> None:
    wrk = replaying(tmp_path, "wrk", "cat wrk_c16.txt")
    body = tmp_path / "body.json"
    body.write_text("{}")
    point = wrk_point(wrk, "http://127.0.0.1:1/", body, 16, seconds=6.0, work_dir=tmp_path)
    assert point == Point("wrk", 16, 4.66, 96.0, 2636.2)


# As on the shared machine: no three windows within 10 %, then a measurement within 25 %.
UNSTABLE_THEN_STABLE = (
    'case "$*" in *"-s 10"*) cat perf_analyzer_2.41_verbose_unstable_c1.txt; exit 2 ;; esac\n'
    "cat perf_analyzer_2.41_verbose_c1.txt"
)


def test_perf_analyzer_point_retries_at_25_percent_and_says_how_stable_each_run_was(
    tmp_path: Path,
) -> None:
    tool = replaying(tmp_path, "perf_analyzer", UNSTABLE_THEN_STABLE)
    point = perf_analyzer_point(tool, "127.0.0.1:1", "mlp", ["images:1,784"], 1, window_ms=2000)
    assert (point.p50_ms, point.p99_ms, point.requests_per_s) == (1.728, 7.356, 407.793)
    # the last three windows: 330.367, 280.885 req/s and 3024, 3557 µs at most and least
    unstable = Stability(10, 10, 2000, False, 10, 17.62, 17.63)
    stable = Stability(25, 10, 2000, True, 3, 9.26, 9.39)  # 422.297 / 386.514, 2585 / 2363
    assert point.stability == (unstable, stable)
    text = stability_text(point.to_json()["stability"])
    assert text == (
        "not stable within 10 % after 10 of at most 10 windows of 2000 ms; the last 3 17.6 % "
        "apart in req/s, 17.6 % in latency, then stable within 25 % after 3 of at most 10 "
        "windows of 2000 ms; the last 3 9.3 % apart in req/s, 9.4 % in latency"
    )
    assert stability_text(None) == "stability not recorded"  # results written before


def test_perf_analyzer_point_never_stable_raises_with_what_it_got(tmp_path: Path) -> None:
    script = "cat perf_analyzer_2.41_verbose_unstable_c1.txt; exit 2"
    tool = replaying(tmp_path, "perf_analyzer", script)
    with pytest.raises(PerfAnalyzerUnstable) as caught:
        perf_analyzer_point(tool, "127.0.0.1:1", "mlp", ["images:1,784"], 1, window_ms=2000)
    assert [(s.percent, s.stable, s.ran) for s in caught.value.stability] == [
        (10, False, 10),
        (25, False, 10),
    ]
    assert str(caught.value).startswith(
        "perf_analyzer found no stable measurement: not stable within 10 % after 10"
    )


def _point(who: str, clients: int, p50: float, rps: float) -> Point:
    return Point(
        who, clients, p50, p50 * 2, rps, cpu_us_per_request=100.0 if who == "ours" else None
    )


def test_ratios_are_taken_within_a_round_then_the_median() -> None:
    agreement = Agreement("graph", "grpc", "perf_analyzer 2.41.0", (1,))
    # Round 1: both slow (the machine drifted); round 2: both fast; round 3: ours slower.
    for ours, ref in ((2.0, 2.0), (1.0, 1.0), (1.3, 1.0)):
        agreement.rounds.append(
            {
                "ours": [_point("ours", 1, ours, 1 / ours)],
                "reference": [_point("ref", 1, ref, 1 / ref)],
            }
        )
    (row,) = agreement.rows()
    assert row["p50_ratio"] == pytest.approx(1.0)  # the median of 1.0, 1.0 and 1.3
    assert row["ours_p50_ms"] == pytest.approx(1.3) and row["reference_p50_ms"] == pytest.approx(
        1.0
    )
    assert row["rps_ratio"] == pytest.approx(1.0)
    assert row["cpu_us_per_request"] == pytest.approx(100.0)
    assert agreement.to_json()["rows"] == [row]
