"""The generator agreement's pieces that need no server: reading the reference generators' output
and the medians and ratios over rounds (bench/generator.py). The runs themselves are in
tests/test_bench.py, against real servers with the real perf_analyzer and wrk."""

from __future__ import annotations

import pytest

from bench.generator import Agreement, Point, _number, _wrk_ms

# What wrk 4.1 printed here for `wrk -t1 -c1 -d5s --latency -s post.lua URL` (abridged).
WRK_OUTPUT = """Running 5s test @ http://127.0.0.1:18501/v1/models/mlp:predict
  1 threads and 1 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   735.12us  210.33us   5.01ms   91.20%
  Latency Distribution
     50%  701.00us
     75%  790.00us
     90%    1.02ms
     99%    1.51s
  6962 requests in 5.00s, 1.10MB read
Requests/sec:   1392.42
Transfer/sec:    225.73KB
"""


def test_wrk_latencies_are_read_in_their_units() -> None:
    assert _wrk_ms("50%", WRK_OUTPUT) == pytest.approx(0.701)
    assert _wrk_ms("90%", WRK_OUTPUT) == pytest.approx(1.02)
    assert _wrk_ms("99%", WRK_OUTPUT) == pytest.approx(1510.0)
    assert _wrk_ms("95%", WRK_OUTPUT) is None
    assert _number(r"Requests/sec:\s+([\d.]+)", WRK_OUTPUT) == pytest.approx(1392.42)


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
