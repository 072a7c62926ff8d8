"""`python -m tools.bench many` at a tiny scale, by the path the published figures take: every part
against real servers (12 copies of the mlp written by `loadtest copies`, 4 resident, seconds of
`loadtest many`'s Zipf traffic), the JSON it writes read back, every goal evaluated (not that it
passes: a toy run's numbers are not data); and the page rendered from a results dict."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tools.bench.cli import app
from tools.bench.many import MANY_GOALS, ManyPlan, many_goals, render_many, run_many, write_many
from tools.bench.published import BY_NAME

GOAL_KEYS = [g.key for g in MANY_GOALS]


@pytest.mark.slow
def test_a_tiny_run_measures_every_part_and_evaluates_every_goal(tmp_path: Path) -> None:
    plan = ManyPlan(
        work_dir=tmp_path / "work",
        models=12,
        first_runs=1,
        rate=40.0,
        zipf_duration_s=3.0,
        baseline_duration_s=2.0,
        resident=4,
        isolation_phase_s=2.0,
        isolation_resident=4,
        memory_models=6,
        memory_late_s=0.0,
        allocators=("default", "jemalloc"),
    )
    results = run_many(plan)
    paths = write_many(results, tmp_path / "out")
    assert [p.name for p in paths] == ["many.json", "many.md", "many.png"]
    written = json.loads(paths[0].read_text())
    assert written == json.loads(json.dumps(results))

    first = written["first"]
    assert [(r["run"], r["config"]) for r in first["runs"]] == [(0, "many"), (0, "one")]
    for row in first["runs"]:
        assert 0 < row["first_answer_s"] < 120
        assert row["cold_load_s"] is not None and row["cold_load_s"] > 0  # loaded on demand
    assert set(first["median_s"]) == {"many", "one"}

    assert written["copies"] == "graphserve loadtest copies"
    copies = tmp_path / "work" / "copies"
    names = sorted(p.name for p in copies.iterdir() if p.is_dir())
    assert (len(names), names[0], names[-1]) == (12, "model-0000", "model-0011")
    assert (copies / "model-0000" / "1" / "saved_model.pb").stat().st_nlink > 1  # hard links
    assert 'key: "pinned"' in (tmp_path / "work" / "pinned" / "models.config").read_text()

    zipf = written["zipf"]
    traffic, baseline = zipf["traffic"], zipf["baseline"]
    assert traffic["generator"] == baseline["generator"] == "graphserve loadtest many"
    assert traffic["scheduled"] == 120 and traffic["unsent"] == max(120 - traffic["requests"], 0)
    assert traffic["requests"] > 60 and traffic["failures"] == 0
    assert traffic["warm"]["samples"] + traffic["cold"]["samples"] == traffic["requests"]
    assert 0 < traffic["hit_ratio"] < 1 and traffic["sent_per_s"] > 0
    assert traffic["cold"]["samples"] > 0  # 12 models, 4 resident: loads happened
    assert traffic["cold_wait"]["samples"] == traffic["cold"]["samples"]
    assert traffic["cold_wait"]["p50_ms"] <= traffic["cold"]["p50_ms"]
    for kind in ("warm", "cold"):  # from the schedule: the lag added
        assert traffic[f"{kind}_scheduled"]["p50_ms"] >= traffic[kind]["p50_ms"] - 1.0
    assert baseline["warm"]["samples"] > 0
    assert 0 < zipf["base_rss_bytes"] <= zipf["rss_max_bytes"]
    assert zipf["budget_bytes"] > 0 and zipf["loads"] > 0
    assert zipf["load_ms_mean"] > 0 and zipf["base_rule"] and zipf["budget_rule"]
    samples = zipf["samples"]
    assert len(samples) >= 2 and max(s["resident_versions"] for s in samples) <= 4
    assert all(s["scrape_ms"] > 0 for s in samples)
    assert [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples)

    phases = written["isolation"]["phases"]
    assert list(phases) == ["resident", "cold"]
    assert phases["resident"]["others_cold"] == 0 and phases["resident"]["loads"] == 0
    assert phases["cold"]["others_cold"] == phases["cold"]["others_requests"] > 0
    assert phases["cold"]["loads_per_s"] > 0
    for phase in phases.values():
        assert phase["hot"]["samples"] > 10 and phase["hot_failures"] == 0

    rows = {row["allocator"]: row for row in written["memory"]["rows"]}
    assert list(rows) == ["default", "jemalloc"]
    for row in rows.values():
        assert row["failures"] == 0 and row["cold"] == 6
        assert row["before_mb"] > 100 and row["peak_mb"] >= row["before_mb"]
        assert row["evictions"] >= 6  # every one of them unloaded idle
    assert rows["jemalloc"]["env"]["LD_PRELOAD"].endswith("libjemalloc.so.2")

    per_model = written["bytes_per_model"]
    assert per_model["predicted_bytes"] > 0 and per_model["loaded_alone"]["models"] > 0
    assert per_model["under_traffic"]["models"] > 0 and per_model["predicted_over_measured"] > 0
    assert len(written["servers"]) == 2 + 2 + 1 + 2
    assert all(s["exit_code"] == 0 for s in written["servers"])

    goals = written["goals"]
    assert [g["key"] for g in goals] == GOAL_KEYS
    for goal in goals:
        assert goal["value"] is not None, goal  # measured, whether or not it passed
        within = goal["value"] <= float(goal["goal"].split()[-1])
        if goal["key"] == "M2a":  # and a second condition: the scheduled load went out
            assert goal["passed"] == (within and "were sent (goal ≥ 99%)" in goal["detail"]
                                      and traffic["unsent"] <= 1), goal  # fmt: skip
        else:
            assert goal["passed"] == within, goal
    assert paths[1].read_text() == BY_NAME["many"].page(written)  # the page, with its provenance
    assert paths[2].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _results() -> dict[str, Any]:
    """A results dict of the shape run_many writes, with round numbers."""
    traffic = {
        "generator": "graphserve loadtest many", "scheduled": 60_000, "requests": 60_000,
        "unsent": 0, "failures": 0, "failure_examples": [], "hit_ratio": 0.8,
        "warm": {"p50_ms": 1.1, "p99_ms": 9.0, "mean_ms": 2.0, "samples": 48_000},
        "cold": {"p50_ms": 60.0, "p99_ms": 400.0, "mean_ms": 80.0, "samples": 12_000},
        "cold_wait": {"p50_ms": 50.0, "p99_ms": 390.0, "mean_ms": 70.0, "samples": 12_000},
        "warm_scheduled": {"p50_ms": 1.2, "p99_ms": 19.0, "mean_ms": 2.5, "samples": 48_000},
        "cold_scheduled": {"p50_ms": 61.0, "p99_ms": 410.0, "mean_ms": 81.0, "samples": 12_000},
        "late_p50_ms": 0.1, "late_max_ms": 30.0,
        "sent_per_s": 200.0,
    }  # fmt: skip
    memory_row = {
        "allocator": "default", "env": {"TF_ENABLE_ONEDNN_OPTS": None, "LD_PRELOAD": None},
        "requests": 200, "failures": 0, "cold": 200, "before_mb": 650.0, "loaded_mb": 700.0,
        "loaded_versions": 40, "peak_mb": 720.0, "peak_versions": 45, "after_mb": 660.0,
        "after_s": 20.0, "late_mb": 659.0, "late_s": 30.0, "evictions": 200,
        "model_bytes": [1.8e6, 2.0e6],
    }  # fmt: skip
    results: dict[str, Any] = {
        "environment": {
            "timestamp": "2026-01-01T00:00:00+00:00", "hostname": "vm", "platform": "Linux",
            "cpus": 2, "python": "3.11", "versions": {"tensorflow": "2.21.0"}, "command": [],
        },
        "plan": {"models": 1000, "first_runs": 3, "zipf_s": 1.1, "rate": 200.0,
                 "zipf_duration_s": 300.0, "baseline_duration_s": 60.0, "resident": 200,
                 "isolation_phase_s": 45.0, "isolation_clients": 4, "isolation_resident": 8},
        "copies": "graphserve loadtest copies",
        "traffic_generator": "graphserve loadtest many",
        "first": {"models": 1000, "median_s": {"many": 5.0, "one": 4.0}, "runs": [
            {"run": 0, "config": "many", "first_answer_s": 5.0, "cold_load_s": 0.05},
            {"run": 0, "config": "one", "first_answer_s": 4.0, "cold_load_s": 0.04},
        ]},
        "zipf": {
            "baseline": {**traffic, "warm": {**traffic["warm"], "p50_ms": 1.0}},
            "traffic": traffic, "base_rss_bytes": 650e6, "base_rule": "after start",
            "budget_bytes": 400e6, "budget_rule": "the largest", "rss_max_bytes": 1000e6,
            "loads": 12_000, "load_ms_mean": 45.0, "evictions": 11_800,
            "model_bytes": [1.8e6, 2.0e6], "samples": [
                {"t_s": 0.0, "rss_mb": 650.0, "resident_mb": 0.0, "resident_versions": 0,
                 "loads": 0, "evictions": 0, "scrape_ms": 20.0},
                {"t_s": 1.0, "rss_mb": 1000.0, "resident_mb": 400.0, "resident_versions": 200,
                 "loads": 250, "evictions": 50, "scrape_ms": 100.0},
            ],
        },
        "isolation": {"hot_model": "model-0000", "resident_set": 7, "cold_set": 992,
                      "phases": {phase: {
                          "seconds": 45.0, "hot": {"p50_ms": 1.0, "p99_ms": p99, "mean_ms": 1.2,
                                                   "samples": 20_000},
                          "hot_failures": 0, "others": {"p50_ms": 2.0, "p99_ms": 9.0,
                                                        "mean_ms": 3.0, "samples": 9_000},
                          "others_requests": 9_000, "others_cold": cold, "others_failures": 0,
                          "loads": cold, "loads_per_s": cold / 45,
                      } for phase, p99, cold in (("resident", 4.0, 0), ("cold", 8.0, 900))}},
        "memory": {"models": 200, "idle_unload_s": 2.0, "rows": [
            memory_row,
            {**memory_row, "allocator": "jemalloc", "after_mb": 800.0},
            {"allocator": "tcmalloc", "env": {}, "skipped": "/usr/lib/x.so is not installed"},
        ]},
        "bytes_per_model": {
            "predicted_bytes": 1.83e6,
            "loaded_alone": {"models": 2, "mean_bytes": 1.9e6, "median_bytes": 1.9e6,
                             "min_bytes": 1.8e6, "max_bytes": 2.0e6},
            "under_traffic": None, "predicted_over_measured": 1.83 / 1.9,
        },
        "servers": [{"args": ["graphserve", "serve", "graph", "--model-config-file",
                              "/tmp/x/models.config"],
                     "env": {"LD_PRELOAD": None}, "ready_s": 4.0, "exit_code": 0}],
        "notes": ["Copies: graphserve loadtest copies."],
        "seconds": 900.0,
    }  # fmt: skip
    results["goals"] = many_goals(results)
    return results


def test_the_goals_read_the_parts_and_a_missing_part_is_a_miss_that_says_so() -> None:
    results = _results()
    goals = {g["key"]: g for g in results["goals"]}
    assert list(goals) == GOAL_KEYS
    assert goals["M1"]["value"] == pytest.approx(1.0) and goals["M1"]["passed"]
    assert goals["M2a"]["value"] == 0 and goals["M2a"]["passed"]
    assert goals["M2b"]["value"] == pytest.approx(1.1) and goals["M2b"]["passed"]
    assert goals["M2c"]["value"] == pytest.approx(60 / 65) and goals["M2c"]["passed"]
    assert goals["M2d"]["value"] == pytest.approx(350 / 400) and goals["M2d"]["passed"]
    assert goals["M3"]["value"] == pytest.approx(2.0) and not goals["M3"]["passed"]
    assert goals["M4"]["value"] == pytest.approx(10 / 65) and goals["M4"]["passed"]

    unsent = copy.deepcopy(results)  # no failure, but a tenth of the load never went out
    unsent["zipf"]["traffic"].update(requests=54_000, unsent=6_000)
    m2a = next(g for g in many_goals(unsent) if g["key"] == "M2a")
    assert (m2a["value"], m2a["passed"]) == (0, False)
    assert "90.0% of the 60,000 scheduled were sent (goal ≥ 99%)" in m2a["detail"]

    without = copy.deepcopy(results)
    del without["isolation"]
    m3 = next(g for g in many_goals(without) if g["key"] == "M3")
    assert (m3["value"], m3["passed"]) == (None, False)
    assert m3["detail"].startswith("not measured: KeyError('isolation')")


def test_the_page_is_the_goals_and_each_part_from_the_json_alone() -> None:
    page = render_many(_results())
    assert page.startswith("# Many models on one server: loading on demand\n")
    assert "| M3 | isolation: hot p99 with cold neighbours / with resident ones | 2.000 |" in page
    assert "| <= 1.5 | **miss** |" in page
    row = "| 1,000 models | 60,000 | 60,000 | 0 | 0.800 | 1.10 | 9.00 | 60.0 | 400.0 | 50.0 | 200 "
    assert row + "| 0 | 1.2 | 61.0 |" in page
    assert "| default | 650.0 | 720.0 | 45 | 660.0 | +10.0 | 659.0 (at 30 s) | 65.0 | within |" in (
        page
    )
    assert "| jemalloc | 650.0 | 720.0 | 45 | 800.0 | +150.0 |" in page
    assert "| tcmalloc | — |" in page and "skipped: /usr/lib/x.so is not installed" in page
    assert "![RSS and resident bytes over time during M2](many.png)" in page
    assert "| M4's default server, loaded one after another | 2 | 1.90 | 1.90 | 1.80 | 2.00 |" in (
        page
    )
    assert "Predicted / measured (the first row's mean): 0.96×." in page
    assert "one scrape of the metrics page took a median" not in page  # notes come from the JSON
    assert "`graphserve serve graph --model-config-file models.config` |" in page
    assert "- Copies: graphserve loadtest copies." in page


def test_the_command_refuses_unknown_parts_and_too_few_models() -> None:
    result = CliRunner().invoke(app, ["many", "--parts", "first,warp"])
    assert result.exit_code == 2
    assert "--parts 'first,warp': expected some of first, zipf, isolation, memory" in (
        result.output
    )
    result = CliRunner().invoke(app, ["many", "--models", "100", "--resident", "200"])
    assert result.exit_code == 2
    assert "--models must exceed --resident" in result.output
