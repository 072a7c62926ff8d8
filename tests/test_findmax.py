"""`loadtest compare --find-max`: the search's next load, its bounds and refusals, and real
searches against the graph and eager servers, written as a report that validates."""

# The report prints the multiplication sign for ratios.
# ruff: noqa: RUF001

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from graphserve.loadtest.cli import app
from graphserve.loadtest.comparison.findmax import SearchSpec, next_load
from graphserve.loadtest.results.run import load_report
from tests.conftest import Servers

SCHEMA = json.loads((Path(__file__).parent.parent / "docs" / "report.schema.json").read_text())
_SHORT = ["--warmup", "0.5s", "--window", "0.5s", "--min-windows", "2", "--max-windows", "2"]


def search(capacity: float, mode: str, start: float, spec: SearchSpec) -> list[float]:
    """The loads a search probes against an arm that holds every load up to `capacity`."""
    held: list[float] = []
    missed: list[float] = []
    while (load := next_load(mode, start, held, missed, spec)) is not None:
        (held if load <= capacity else missed).append(load)
        assert len(held) + len(missed) < 50, "the search does not end"
    return [*held, *missed]


@pytest.mark.parametrize(
    ("capacity", "start", "probed", "found"),
    [
        (13, 1, [1, 2, 4, 8, 16, 12, 14, 13], 13),  # ramp, then bisect to 1 user apart
        (1, 1, [1, 2], 1),
        (0, 4, [4, 2, 1], None),  # back off to 1 user, nothing held
        (3, 8, [8, 4, 2, 3], 3),  # back off, then bisect
        (500, 100, [100, 200, 400, 800, 600, 500, 550], 500),  # 10% of 500 is 50 users
    ],
)
def test_closed_loop_search(
    capacity: float, start: float, probed: list[float], found: float | None
) -> None:
    loads = search(capacity, "closed", start, SearchSpec())
    assert sorted(loads) == sorted(probed)
    held = [x for x in loads if x <= capacity]
    assert max(held, default=None) == found
    assert all(float(x).is_integer() for x in loads)  # users are whole


def test_open_loop_search_stops_within_the_precision() -> None:
    loads = search(730.0, "open", 100.0, SearchSpec(precision_pct=10.0))
    held = max(x for x in loads if x <= 730)
    missed = min(x for x in loads if x > 730)
    assert missed / held <= 1.10 and held <= 730 < missed
    assert loads[:4] == [100, 200, 400, 800] or sorted(loads)[:3] == [100, 200, 400]


def test_the_cap_ends_the_ramp() -> None:
    assert search(1e9, "closed", 1, SearchSpec(max_load=6)) == [1, 2, 4, 6]
    assert next_load("closed", 1, [1, 2, 4, 6], [], SearchSpec(max_load=6)) is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ([], "--find-max needs a latency budget to hold: add --slo"),
        (["--slo", "ratio.p50<0.5"], "a ratio gate cannot be held: ratio.p50<0.5"),
    ],
)
def test_find_max_refuses_what_it_cannot_search(
    mlp_servers: Servers, tmp_path: Path, arguments: list[str], message: str
) -> None:
    result = CliRunner().invoke(
        app,
        ["compare", "--find-max", "--model-name", "mlp", "--graph", mlp_servers.graph_grpc,
         "--eager", mlp_servers.eager_grpc, "--out", str(tmp_path), *arguments],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "probes").exists()  # refused before any load


@pytest.mark.slow
def test_both_arms_hold_every_load_up_to_the_cap(mlp_servers: Servers, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["compare", "--find-max", "--slo", "p99<10s", "--users", "1", "--max-load", "2",
         *_SHORT, "--model-name", "mlp", "--graph", mlp_servers.graph_grpc,
         "--eager", mlp_servers.eager_grpc, "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "report.json").read_text())
    jsonschema.validate(document, SCHEMA)
    report = load_report(tmp_path / "report.json")
    search = report.find_max
    assert search is not None and search.slo == ["p99<10s"] and search.max_load == 2
    for name in ("graph", "eager"):
        arm = search.arms[name]
        assert [p.load for p in arm.probes] == [1, 2]  # the ramp doubles, up to the cap
        assert all(p.held and p.value is not None and p.value < 10_000 for p in arm.probes)
        assert (arm.max_load, arm.first_miss, arm.limit) == (2, None, "max load")
    # The arms take turns, one arm a probe; each probe is a step of the report.
    assert [(list(s.arms), s.load) for s in report.steps] == [
        (["graph"], 1), (["eager"], 1), (["graph"], 2), (["eager"], 2),
    ]  # fmt: skip
    for probe in search.arms["graph"].probes:
        step = report.steps[probe.step]
        assert step.arms["graph"].throughput_rps == probe.throughput_rps > 0
    assert report.headline == [
        "graph and eager both hold at least 2 users (the --max-load) at p99 < 10,000 ms."
    ]
    markdown = (tmp_path / "report.md").read_text()
    assert "## Most load within p99 \\< 10,000 ms" in markdown
    assert "| graph | 2 users | – | 2 | reached --max-load |" in markdown
    assert "## Probe 4: eager at 2 users" in markdown
    assert len(list((tmp_path / "probes").iterdir())) == 4


@pytest.mark.slow
def test_each_arm_holds_its_own_gates(mlp_servers: Servers, tmp_path: Path) -> None:
    """A gate that names an arm binds that arm only: graph holds up to the cap, eager nothing
    (not even 1 user), and the run exits 3, since an arm held no load at all."""
    result = CliRunner().invoke(
        app,
        ["compare", "--find-max", "--slo", "graph.p99<10s", "--slo", "eager.p99<0.001ms",
         "--users", "1", "--max-load", "2", *_SHORT, "--model-name", "mlp",
         "--graph", mlp_servers.graph_grpc, "--eager", mlp_servers.eager_grpc,
         "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "SLO missed: eager held none of the loads tried (graph.p99<10s and" in result.output
    assert "missed on graph" not in result.output  # the search's own misses are no failure
    report = load_report(tmp_path / "report.json")
    assert report.find_max is not None
    graph, eager = report.find_max.arms["graph"], report.find_max.arms["eager"]
    assert [p.load for p in graph.probes] == [1, 2] and graph.max_load == 2
    assert [p.load for p in eager.probes] == [1] and eager.max_load is None
    assert eager.limit == "nothing held" and eager.first_miss == 1
    (probe,) = eager.probes
    assert not probe.held and probe.why == "missed eager.p99<0.001ms"
    # Each probe was checked against the gates of its arm only.
    checks = {(g.expression, g.arm, g.step) for g in report.slo.gates} if report.slo else set()
    assert checks == {("graph.p99<10s", "graph", 0), ("eager.p99<0.001ms", "eager", 1),
                      ("graph.p99<10s", "graph", 2)}  # fmt: skip
    assert report.headline == [
        "eager held none of the loads tried at graph's p99 < 10,000 ms and eager's p99 < 0.001 "
        "ms (down to 1 user); graph at least 2 users (the --max-load)."
    ]


def test_a_probe_in_which_every_request_failed_is_not_held() -> None:
    from graphserve.loadtest.comparison.findmax import held_load
    from graphserve.loadtest.results.run import Report
    from graphserve.loadtest.results.slo import evaluate, parse_gate
    from tests.test_loadtest_report import make_report_document

    document = make_report_document(loads=(4,))
    (step,) = document["steps"]
    step["arms"].pop("eager")
    step["ratios"] = {}
    document["settings"]["arm_order"] = ["graph"]
    document["settings"]["baseline"] = "graph"
    report = Report.model_validate(document)
    report.steps[0].arms["graph"].latency_ms.p50 = None  # no successful measured request
    # A gate every failed request still meets: the probe is not held all the same.
    report.slo = evaluate([parse_gate("errors<=1000000")], report, max_failures=1000000)
    assert all(gate.passed for gate in report.slo.gates)
    assert held_load(report, max_failures=1000000) == (
        False,
        "SLO not judged: every request failed",
    )
