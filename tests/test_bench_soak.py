"""`python -m tools.bench soak` for 18 s: the real graph server, steady load, a swap every 5 s; the
figures it writes are read back and checked (`make soak` runs the same for an hour)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tools.bench.cli import app
from tools.bench.soak import GOAL_RSS_GROWTH_MB_PER_H

pytestmark = pytest.mark.slow

DURATION_S = 18
RATE = 50


def test_a_short_soak_swaps_serves_every_request_and_samples_the_server(tmp_path: Path) -> None:
    out = tmp_path / "out"
    # Three swaps, 36 samples (30 after the warm-up): more than the checks below need.
    args = ["soak", "--duration", f"{DURATION_S}s", "--swap-every", "5s", "--sample-every", "0.5s"]
    args += ["--warmup", "3s", "--rate", f"{RATE}", "--out", str(out), "--work-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    results = json.loads((out / "soak.json").read_text())

    swaps = results["swaps"]
    assert len(swaps) >= 2, swaps
    assert [s["version"] for s in swaps] == list(range(2, 2 + len(swaps)))
    for swap in swaps:  # pushed, then AVAILABLE, then the old one END
        assert swap["pushed_s"] <= swap["available_s"] <= swap["old_end_s"]
    assert sorted(p.name for p in (tmp_path / "models" / "mlp").iterdir()) == [
        str(swaps[-1]["version"])
    ]

    requests = results["requests"]
    assert requests["failed"] == 0, requests["failures"]
    assert requests["ok"] > DURATION_S * RATE / 2  # the rate, give or take a slow machine

    samples = results["samples"]
    assert len(samples) >= 20
    assert all(s["rss_kb"] > 100 * 1024 and s["threads"] > 1 for s in samples)
    assert [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples)
    answered = [s for s in samples if s["requests"]]
    assert all(0 < s["p50_ms"] <= s["p99_ms"] for s in answered)
    assert sum(s["requests"] for s in samples) == requests["ok"]

    rss = results["rss"]
    assert rss["start_mb"] == pytest.approx(samples[0]["rss_kb"] / 1024, abs=0.1)
    assert rss["end_mb"] == pytest.approx(samples[-1]["rss_kb"] / 1024, abs=0.1)
    assert rss["growth_mb_per_h"] is not None and rss["fit_samples"] >= 20
    goals = {g["key"]: g for g in results["goals"]}
    assert goals["S1"]["passed"] == (rss["growth_mb_per_h"] <= GOAL_RSS_GROWTH_MB_PER_H)
    assert goals["S2"] == {**goals["S2"], "value": 0, "passed": True}
    assert results["server"]["exit_code"] == 0

    assert f"{len(swaps)} swaps, requests ok" in result.output
    assert "S2 pass" in result.output
    markdown = (out / "soak.md").read_text()
    assert "![RSS, threads and p99 over time, the swaps marked](soak.png)" in markdown
    assert f"Swaps: {len(swaps)}" in markdown
    assert (out / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
