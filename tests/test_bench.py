"""The benchmark: a real quick run (export, servers, load), its goals and its files.

Quick mode measures for seconds, so its numbers are not data; these tests check that every
part runs against real servers, that every goal is computed from the measurements it names,
and that results.json and results.md say the same thing. No test asserts a speed.
"""

from __future__ import annotations

import json
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from graphserve.serving.server import prime_threads
from tools.bench.cli import app
from tools.bench.goals import GOALS, evaluate
from tools.bench.render import goal_lines
from tools.bench.run import BenchSpec, run_bench, write_results
from tools.bench.served import BATCHING_PARAMETERS


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("bench")
    return run_bench(BenchSpec.quick(work))


def test_every_goal_is_measured(quick_results: dict[str, Any]) -> None:
    goals = {g["key"]: g for g in quick_results["goals"]}
    assert list(goals) == [g.key for g in GOALS]
    for goal in goals.values():
        assert goal["value"] is not None and goal["value"] > 0, goal
        assert "not measured" not in goal["detail"]


def test_goal_values_are_the_ratios_of_the_measurements(quick_results: dict[str, Any]) -> None:
    goals = {g["key"]: g["value"] for g in quick_results["goals"]}
    latency = quick_results["served"]["mlp/b1"]["latency"]
    p50 = {arm: t["p50_ms"] for arm, t in latency.items()}
    concrete = quick_results["in_process"]["mlp/b1"]["timings"]["concrete"]["p50_ms"]
    assert goals["G1"] == pytest.approx(p50["graph/grpc"] / p50["eager/grpc"])
    assert goals["G2"] == pytest.approx(p50["graph/grpc"] / (concrete + p50["null/grpc"]))
    assert goals["G3"] == pytest.approx(p50["graph/rest"] / p50["graph/grpc"])
    assert goals["G7"] == pytest.approx(p50["peer/rest"] / p50["graph/rest"])
    for key, config in (("G4a", "mobilenet/b1"), ("G4b", "mlp/b1")):
        batching = quick_results["served"][config]["graph_batching"]
        assert goals[key] == pytest.approx(
            batching["on"]["throughput"] / batching["off"]["throughput"]
        )
    mobilenet = {g["key"]: g for g in quick_results["goals"]}["G4a"]
    batching = quick_results["served"]["mobilenet/b1"]["graph_batching"]
    p99 = {arm: batching[arm]["latency"]["p99_ms"] for arm in ("on", "off")}
    assert f"p99 {p99['on']:.2f} ms on vs {p99['off']:.2f} ms off" in mobilenet["detail"]
    if p99["on"] > p99["off"]:  # the second condition alone can fail the goal
        assert not mobilenet["passed"]
    codec = quick_results["codec"]
    assert goals["G6"] == pytest.approx(
        codec["typed_fields"]["total_ms"] / codec["tensor_content"]["total_ms"]
    )
    grpc = next(a for a in quick_results["agreement"] if a["protocol"] == "grpc")
    (round_,) = grpc["rounds"]  # the quick run: one round, so the medians are that round's
    ours, ref = ({p["clients"]: p for p in round_[k]} for k in ("ours", "reference"))
    assert goals["G13"] == pytest.approx(ours[1]["p50_ms"] / ref[1]["p50_ms"])
    assert goals["G14"] == pytest.approx(ours[16]["requests_per_s"] / ref[16]["requests_per_s"])
    for key, protocol in (("G15a", "grpc"), ("G15b", "rest")):
        assert goals[key] == quick_results["generator"][protocol]["requests_per_core_s"]


def test_every_part_ran_against_real_servers(quick_results: dict[str, Any]) -> None:
    methods = quick_results["in_process"]["mlp/b1"]["timings"]
    assert set(methods) == {"concrete", "eager", "predict", "function", "xla"}
    assert quick_results["in_process"]["mlp/b1"]["function_traces"] == 1  # one shape, one trace
    assert set(quick_results["in_process"]) == {"mlp/b1", "mlp/b32"}
    for key in ("mlp/b1", "mlp/b32"):
        latency = quick_results["served"][key]["latency"]
        assert set(latency) == {
            "graph/grpc", "eager/grpc", "null/grpc", "graph/rest", "eager/rest", "null/rest",
            "peer/rest",
        }  # fmt: skip
        for timing in latency.values():
            assert 0 < timing["p50_ms"] <= timing["p99_ms"]
            assert timing["samples"] >= 30
    batched = [("mlp/b1", "graph"), ("mlp/b1", "eager"), ("mobilenet/b1", "graph")]
    for config, runner in batched:
        load = quick_results["served"][config][f"{runner}_batching"]
        assert load["parameters"] == BATCHING_PARAMETERS
        for arm in ("off", "on"):
            assert load[arm]["errors"] == 0
            assert load[arm]["requests"] > 0 and load[arm]["clients"] == 16
    mobilenet = quick_results["served"]["mobilenet/b1"]
    assert set(mobilenet["latency"]) == {"graph/grpc", "null/grpc", "graph/rest", "null/rest"}
    assert "eager_batching" not in mobilenet
    assert mobilenet["request_bytes"]["grpc"] > 96 * 96 * 3 * 4
    assert quick_results["served"]["image/b1"]["request_bytes"]["grpc"] > 224 * 224 * 3 * 4
    assert set(quick_results["codec"]) == {"tensor_content", "typed_fields", "json"}
    for protocol in ("grpc", "rest"):  # one locust process against the null server
        capacity = quick_results["generator"][protocol]
        assert capacity["failures"] == 0 and capacity["requests"] > 0
        assert capacity["requests_per_core_s"] == pytest.approx(
            capacity["requests"] / capacity["cpu_s"]
        )
    agreement = {(a["server"], a["protocol"]): a for a in quick_results["agreement"]}
    assert set(agreement) == {("graph", "grpc"), ("graph", "rest")}
    assert agreement["graph", "grpc"]["reference"] == "perf_analyzer 2.41.0"
    assert agreement["graph", "rest"]["reference"].startswith("wrk ")
    for entry in agreement.values():  # both generators measured the same server at 1 and 16
        for who, points in entry["rounds"][0].items():
            assert [p["clients"] for p in points] == [1, 16], who
            for point in points:
                assert 0 < point["p50_ms"] <= point["p99_ms"] and point["requests_per_s"] > 0
        for point in entry["rounds"][0]["ours"]:
            assert point["generator"] == "graphserve" and point["cpu_us_per_request"] > 0
            assert isinstance(point["generator_bound"], bool)
    starts = quick_results["cold_start"]["mlp"]
    assert {(c["server"], c["warmup_records"]) for c in starts} == {
        ("graph", True),
        ("graph", False),
        ("eager", False),
    }


def test_results_files_agree(quick_results: dict[str, Any], tmp_path: Path) -> None:
    json_path, md_path = write_results(quick_results, tmp_path / "out")
    assert json.loads(json_path.read_text())["goals"] == quick_results["goals"]
    markdown = md_path.read_text()
    for goal in quick_results["goals"]:
        assert f"| {goal['key']} |" in markdown
    for section in ("In-process", "Served", "Batching", "Codec", "Cold start", "Load generator"):
        assert f"## {section}" in markdown
    assert "| mobilenet/b1 | graph | 16 |" in markdown
    assert "## Our generator against the reference generators" in markdown
    assert "| graph | grpc | perf_analyzer 2.41.0 | 1 |" in markdown
    assert f"batching parameters: `{' '.join(BATCHING_PARAMETERS.split())}`" in markdown
    lines = goal_lines(quick_results)
    assert len(lines) == len(GOALS)
    assert all((" pass " in line) != (" MISS " in line) for line in lines)


def test_a_goal_without_its_measurement_is_a_miss_that_says_so() -> None:
    results = {"served": {}, "in_process": {}, "codec": {}, "cold_start": {}}
    for goal in evaluate(results):
        assert not goal.passed and goal.value is None
        assert goal.detail.startswith("not measured")


def test_pass_and_miss_follow_the_goal_direction() -> None:
    def served(graph: float, eager: float) -> dict[str, Any]:
        latency = {"graph/grpc": {"p50_ms": graph}, "eager/grpc": {"p50_ms": eager}}
        return {"served": {"mlp/b1": {"latency": latency}}}

    g1 = next(g for g in evaluate(served(0.4, 1.0)) if g.key == "G1")
    assert g1.passed and g1.value == pytest.approx(0.4)
    g1 = next(g for g in evaluate(served(0.5, 1.0)) if g.key == "G1")
    assert not g1.passed and "graph 0.500 ms / eager 1.000 ms" in g1.detail


def test_cli_refuses_an_unknown_model() -> None:
    result = CliRunner().invoke(app, ["--models", "mlp,resnet"])
    assert result.exit_code == 2
    assert "unknown model(s) resnet" in result.output and "mlp, power, cnn" in result.output


def test_prime_threads_runs_the_work_once_on_each_of_its_own_threads() -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        with lock:
            seen.append(threading.get_ident())

    with futures.ThreadPoolExecutor(4) as pool:
        prime_threads(pool, 4, work)
        assert len(seen) == 4 and len(set(seen)) == 4
        # the threads stay: later tasks run on the primed ones
        assert pool.submit(threading.get_ident).result() in seen
