"""`graphserve loadtest copies` and `loadtest many`: one server, many models, requests spread by
popularity, warm against cold.

Real SavedModels (copies of the exported MLP, hard-linked), real servers on loopback (the graph
server in this process for the warm runs, and `graphserve serve graph --load-on-demand` as a user
starts it for the cold ones), real locust runs of a second or two. The assertions are on values:
counts that add up, each model's requests equal to what the seed picks, the cold requests the
clients saw against the server's own count, exit codes and messages; never on timings.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from graphserve.core.client import cold_load_seconds
from graphserve.core.defaults import DEFAULT_METRICS_PATH
from graphserve.core.errors import LoadTestError, SloError
from graphserve.core.processes import ServerProcess
from graphserve.loadtest.cli import app
from graphserve.loadtest.manymodels.analysis import parse_gates
from graphserve.loadtest.manymodels.copies import CopiesResult, CopiesSpec, write_copies
from graphserve.loadtest.manymodels.popularity import (
    Popularity,
    expected_counts,
    models_from_config,
    read_weights,
    zipf_weights,
)
from graphserve.loadtest.manymodels.scrapes import read_scrape
from graphserve.loadtest.results.labels import NONE
from graphserve.loadtest.results.many import load_many
from graphserve.serving.config import load_model_config_file

MODELS = 6


def _said(output: str) -> str:
    """A usage error's message without the box typer draws around it (as wide as the terminal
    tests/conftest.py sets, so no line of it wraps)."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", output).split())


# ---------------------------------------------------------------------------------------------
# copies


def test_copies_are_hard_links_served_by_the_config_they_come_with(
    mlp_export: Any, tmp_path: Path
) -> None:
    out = tmp_path / "copies"
    args = ["copies", "--from", str(mlp_export.model_dir), "--count", "12", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--pin", "2"])
    assert result.exit_code == 0, result.output
    assert "12 copies" in result.output and "hard links" in result.output
    models = load_model_config_file(out / "models.config")
    assert [m.name for m in models] == [f"model-{i:04d}" for i in range(12)]
    assert [m.labels for m in models] == [{"pinned": 1}] * 2 + [{}] * 10
    source = mlp_export.version_dir / "saved_model.pb"
    for model in models:
        copied = model.base_path / "1" / "saved_model.pb"
        assert copied.stat().st_ino == source.stat().st_ino  # --from BASE/MODEL: its newest
    assert models_from_config(out / "models.config") == [(m.name, m.base_path) for m in models]

    again = CliRunner().invoke(app, args)  # OUT holds files now
    assert again.exit_code == 2
    assert "is not empty" in _said(again.output) and "--force" in _said(again.output)
    forced = CliRunner().invoke(
        app, ["copies", "--from", str(mlp_export.version_dir), "--count", "3", "--out", str(out),
              "--prefix", "model", "--force", "--output", "json"],
    )  # fmt: skip
    assert forced.exit_code == 0, forced.output
    assert json.loads(forced.output)["names"] == ["model-0000", "model-0001", "model-0002"]
    assert sorted(p.name for p in out.iterdir()) == [
        "model-0000", "model-0001", "model-0002", "models.config",
    ]  # fmt: skip
    assert all(not m.labels for m in load_model_config_file(out / "models.config"))


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--count", "0"], "copy at least one"),
        (["--count", "2", "--pin", "3"], "--pin 3"),
        (["--count", "2", "--prefix", "a/b"], "--prefix 'a/b'"),
    ],
)
def test_copies_refuses_bad_counts_and_names(
    mlp_export: Any, tmp_path: Path, flags: list[str], said: str
) -> None:
    base = ["copies", "--from", str(mlp_export.version_dir), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(app, [*base, *flags])
    assert result.exit_code == 2
    assert said in _said(result.output)
    assert not (tmp_path / "o").exists()


def test_copies_are_copied_where_they_cannot_be_linked(
    mlp_export: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def other_file_system(source: Any, target: Any) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", other_file_system)
    spec = CopiesSpec(source=mlp_export.version_dir, count=2, out=tmp_path / "o")
    result = write_copies(spec)
    assert result.method == "copies"
    copied = tmp_path / "o" / "model-0001" / "1" / "saved_model.pb"
    source = mlp_export.version_dir / "saved_model.pb"
    assert copied.read_bytes() == source.read_bytes()
    assert copied.stat().st_ino != source.stat().st_ino


def test_copies_refuses_a_source_that_is_no_model(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(
        app,
        ["copies", "--from", str(tmp_path / "empty"), "--count", "2", "--out", str(tmp_path / "o")],
    )
    assert result.exit_code == 2
    assert "neither a SavedModel" in _said(result.output)


# ---------------------------------------------------------------------------------------------
# popularity, gates and the cold mark, without servers


def test_zipf_weights_and_seeded_picks() -> None:
    weights = zipf_weights(5, 1.1)
    assert math.isclose(sum(weights), 1.0)
    assert weights == sorted(weights, reverse=True)
    assert math.isclose(weights[0] / weights[1], 2**1.1)
    assert zipf_weights(3, 0) == pytest.approx([1 / 3] * 3)
    counts = expected_counts(weights, seed=3, requests=5000)
    assert sum(counts) == 5000 and counts == sorted(counts, reverse=True)
    assert counts == expected_counts(weights, seed=3, requests=5000)  # the same seed, the same
    assert counts != expected_counts(weights, seed=4, requests=5000)


def test_weights_files_json_and_lines(tmp_path: Path) -> None:
    (tmp_path / "w.json").write_text('{"b": 1, "a": 3, "c": 0}')
    (tmp_path / "w.txt").write_text("# name weight\n\nb 1\na 3.0\nc 0\n")
    for name in ("w.json", "w.txt"):
        weights = read_weights(tmp_path / name)
        assert weights == {"b": 1.0, "a": 3.0, "c": 0.0}
        popularity = Popularity.from_weights(weights, tmp_path / name)
        assert popularity.names == ("a", "b")  # heaviest first; weight 0: never asked
        assert popularity.weights == (0.75, 0.25)
    for text, said in [
        ("a 1\nb heavy\n", "line 2: the weight of 'b' must be a number >= 0, got 'heavy'"),
        ("a 1 2\n", "line 1: expected NAME WEIGHT"),
        ("a 1\na 2\n", "line 2: 'a' is named twice"),
        ('{"a": -1}', "the weight of 'a' must be a number >= 0"),
        ("a 0\n", "no model has a weight above 0"),
        ("{oops", "not JSON"),
    ]:
        (tmp_path / "bad").write_text(text)
        with pytest.raises(LoadTestError, match=re.escape(said)):
            read_weights(tmp_path / "bad")
    with pytest.raises(LoadTestError, match="'x' not in --models-from"):
        Popularity.from_weights({"x": 1.0}, tmp_path / "w", [("a", None)], tmp_path / "cfg")


def test_gates_name_warm_cold_or_all_requests() -> None:
    gates = parse_gates(["warm.p99<20ms,cold.p99<2s", "errors==0", "p50<5ms"])
    assert [(g.arm, g.metric, g.threshold) for g in gates] == [
        ("warm", "p99", 20.0), ("cold", "p99", 2000.0), (None, "errors", 0.0), (None, "p50", 5.0),
    ]  # fmt: skip
    for text, said in [
        ("graph.p99<1ms", "names 'graph'"),
        ("ratio.p50<1", "no baseline"),
        ("cold.errors==0", "errors is of all requests"),
    ]:
        with pytest.raises(SloError, match=re.escape(said)):
            parse_gates([text])


def test_the_cold_mark_from_headers_and_trailing_metadata() -> None:
    raw_headers = [(b"content-type", b"x"), (b"X-Graphserve-Cold-Load", b"0.041")]
    assert cold_load_seconds(raw_headers) == 0.041
    assert cold_load_seconds([("x-graphserve-cold-load", "1.5")]) == 1.5
    assert cold_load_seconds([("x-graphserve-cold-load", "soon")]) == 0.0
    assert cold_load_seconds([(b"content-length", b"3")]) is None


def test_a_counter_absent_from_the_scrape_is_not_reported() -> None:
    text = (
        "# TYPE graphserve_model_loads_total counter\n"
        'graphserve_model_loads_total{model="a",outcome="ok"} 2.0\n'
        "# TYPE graphserve_resident_versions gauge\ngraphserve_resident_versions 1.0\n"
    )
    first, last = read_scrape("", 0.0), read_scrape(text, 1.0)
    assert last.loads_since(first) == 2.0
    assert last.evictions_since(first) is None  # not exposed: not 0
    assert (last.resident_versions, last.rss_bytes) == (1.0, None)


# ---------------------------------------------------------------------------------------------
# Refused before any load


@pytest.fixture(scope="module")
def copies(mlp_export: Any, tmp_path_factory: pytest.TempPathFactory) -> CopiesResult:
    out = tmp_path_factory.mktemp("many") / "copies"
    return write_copies(CopiesSpec(source=mlp_export.version_dir, count=MODELS, out=out, pin=1))


def test_a_bad_weights_file_or_target_exits_2_before_any_load(
    copies: CopiesResult, tmp_path: Path
) -> None:
    weights = tmp_path / "weights.txt"
    weights.write_text("model-0000 3\nmodel-0001 heavy\n")
    base = ["many", "--models-from", str(copies.config), "--out", str(tmp_path / "out")]
    bad = CliRunner().invoke(app, [*base, "--target", "127.0.0.1:1", "--weights", str(weights)])
    assert bad.exit_code == 2
    said = _said(bad.output)
    assert f"--weights {weights}, line 2: the weight of 'model-0001'" in said, said
    weights.write_text("model-0000 3\nnot-a-model 1\n")
    unknown = CliRunner().invoke(app, [*base, "--target", "127.0.0.1:1", "--weights", str(weights)])
    assert unknown.exit_code == 2 and "'not-a-model' not in --models-from" in _said(unknown.output)
    remote = CliRunner().invoke(app, [*base, "--target", "grpc://10.1.2.3:8500"])
    assert remote.exit_code == 2 and "loopback" in remote.output
    gate = CliRunner().invoke(app, [*base, "--target", "127.0.0.1:1", "--slo", "graph.p99<1ms"])
    assert gate.exit_code == 2 and "names 'graph'" in gate.output
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# Real runs


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_many_sends_a_traffic_files_requests_to_every_model(
    protocol: str, mlp_export: Any, copies: CopiesResult, warm_server: Any, tmp_path: Path
) -> None:
    """The file's requests (of 1 and 3 rows) go to every copy, each model's name in its head
    (gRPC) or path (REST): all answered; a file with no request of the model named exits 2."""
    from graphserve.loadtest.traffic.make import MakeSpec, make_traffic, parse_distribution

    traffic = tmp_path / "mixed.tfrecord"
    make_traffic(MakeSpec(mlp_export.version_dir, traffic, count=8,
                          batch_sizes=parse_distribution("1,3", "--batch-sizes")))  # fmt: skip
    port = warm_server.grpc_port if protocol == "grpc" else warm_server.rest_port
    target = f"grpc://127.0.0.1:{port}" if protocol == "grpc" else f"http://127.0.0.1:{port}"
    base = ["many", "--target", target, "--models-from", str(copies.config), "--users", "2",
            "--traffic", str(traffic)]  # fmt: skip
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [*base, "--max-requests", "48", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = load_many(out / "many.json")
    assert (report.totals.requests, report.totals.answered, report.totals.failures) == (48, 48, 0)
    (group,) = report.settings.payloads
    assert group.models == MODELS and group.traffic_requests == 8
    from collections import Counter

    from graphserve.model.traffic import read_traffic

    held = Counter(r.shape_label() for r in read_traffic(traffic).records)
    assert group.traffic_shapes == dict(held) and set(held) <= {
        "images [1, 784]",
        "images [3, 784]",
    }
    assert "a traffic file's 8 requests that fit it" in (out / "many.md").read_text()
    refused = CliRunner().invoke(app, [*base, "--traffic-model", "bert", "--out", str(out / "x")])
    assert refused.exit_code == 2, refused.output
    said = _said(refused.output)
    assert "no predict request of model 'bert' of signature 'serving_default' fits" in said, said


@pytest.fixture(scope="module")
def warm_server(copies: CopiesResult) -> Iterator[Any]:
    """The graph server of the copies' config, every model loaded at start, with metrics."""
    from graphserve.serving import ServeConfig, ServerOptions, build_server

    options = ServerOptions(
        host="127.0.0.1", grpc_port=0, rest_port=0, metrics_path=DEFAULT_METRICS_PATH
    )
    config = ServeConfig(models=load_model_config_file(copies.config), options=options)
    server = build_server(config).start()
    yield server
    server.stop(grace=1.0)


@pytest.mark.slow
def test_a_seeded_run_asks_each_model_what_its_weight_picks(
    copies: CopiesResult, warm_server: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["many", "--target", f"http://127.0.0.1:{warm_server.rest_port}",
         "--models-from", str(copies.config), "--zipf", "1.1", "--users", "4",
         "--max-requests", "240", "--duration", "60s", "--seed", "7", "--scrape-every", "0.5s",
         "--top", "4", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = load_many(out / "many.json")
    totals = report.totals
    assert (totals.requests, totals.answered, totals.failures) == (240, 240, 0)
    names = [f"model-{i:04d}" for i in range(MODELS)]
    asked = {row.name: row.requests for row in report.models}
    weights = zipf_weights(MODELS, 1.1)
    assert [asked[n] for n in names] == expected_counts(weights, seed=7, requests=240)
    assert asked[names[0]] > asked[names[2]] > asked[names[5]]  # Zipf's order, by the counts
    assert [row.requests for row in report.models] == sorted(asked.values(), reverse=True)
    assert report.tail is not None and report.tail.name == "the other 2 models"
    assert report.tail.requests == sum(row.requests for row in report.models[4:])
    # Every model loaded at start: nothing cold, every answer a hit.
    assert (totals.cold, totals.warm, totals.hit_ratio) == (0, 240, 1.0)
    assert report.latency_ms["warm"].p50 is not None and report.latency_ms["cold"].p50 is None
    assert all(row.cold == 0 and row.cold_p50_ms is None for row in report.models)
    assert sum(tick.requests for tick in report.timeline) == 240
    # This server loads nothing on demand: its counters are not reported, never 0.
    server = report.server
    assert server is not None and server.loads_ok is None and server.evictions is None
    assert all(row.loads is None for row in report.models)
    assert len(report.memory) >= 2 and report.memory[0].loads is None
    assert report.settings.payloads[0].models == MODELS  # one signature, read once
    assert report.settings.payloads[0].source.startswith("SavedModel")

    for name in ("many.md", "many.html", "many_models.csv", "many_latency.png", "payload-0.npz"):
        assert (out / name).is_file(), name
    html = (out / "many.html").read_text()
    assert "data:image/png;base64," in html and "<script" not in html
    rows = (out / "many_models.csv").read_text().splitlines()
    assert len(rows) == MODELS + 1 and rows[0].startswith("name,rank,weight,requests")
    markdown = (out / "many.md").read_text()
    assert (
        "## Warm and cold requests" in markdown and f"| {NONE} | the other 2 models |" in markdown
    )
    (out / "many.md").unlink()
    rendered = CliRunner().invoke(app, ["report", str(out)])
    assert rendered.exit_code == 0, rendered.output
    assert (out / "many.md").read_text() == markdown


@pytest.mark.slow
def test_a_missed_gate_exits_3_over_grpc(
    copies: CopiesResult, warm_server: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["many", "--target", f"grpc://127.0.0.1:{warm_server.grpc_port}",
         "--rest-port", str(warm_server.rest_port), "--models-from", str(copies.config),
         "--rate", "100", "--users", "2", "--max-requests", "40", "--slo", "warm.p99<0.001ms",
         "--min-hit-ratio", "0.9", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "SLO missed: warm.p99<0.001ms (warm requests)" in result.output
    report = load_many(out / "many.json")
    assert report.settings.protocol == "grpc" and report.totals.answered == 40
    assert report.slo is not None and not report.slo.passed
    assert [(g.expression, g.requests, g.passed) for g in report.slo.gates] == [
        ("warm.p99<0.001ms", "warm", False),
        ("hit_ratio>=0.9", "all", True),
    ]
    assert report.slo.gates[0].value == report.latency_ms["warm"].p99


@pytest.fixture(scope="module")
def on_demand_server(
    copies: CopiesResult, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """`serve graph --load-on-demand` over the copies: two resident at most, model-0000 pinned
    (loaded at start, which is how the server is seen ready)."""
    args = ["graph", "--model-config-file", str(copies.config), "--load-on-demand",
            "--max-resident-models", "2", "--metrics"]  # fmt: skip
    log = tmp_path_factory.mktemp("ondemand") / "server.log"
    with ServerProcess.on_free_ports(args, "model-0000", log_path=log) as server:
        yield server


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_cold_requests_are_counted_as_the_server_counts_them(
    copies: CopiesResult, on_demand_server: ServerProcess, tmp_path: Path, protocol: str
) -> None:
    server = on_demand_server
    rest = server.rest_address
    assert rest is not None
    target = f"http://{rest}" if protocol == "rest" else f"grpc://{server.grpc_address}"
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["many", "--target", target, "--rest-port", rest.rsplit(":", 1)[1],
         "--models-from", str(copies.config), "--zipf", "0", "--users", "1",
         "--max-requests", "60", "--scrape-every", "0.5s", "--max-failure-ratio", "0",
         "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output + server.log_tail()
    report = load_many(out / "many.json")
    totals = report.totals
    assert (totals.requests, totals.failures) == (60, 0)
    # Six models of equal weight and two resident: models come and go, so some requests wait.
    # One user: no request's model is evicted for another's before it runs (each waits once).
    assert totals.cold > 0 and totals.warm == 60 - totals.cold
    assert totals.hit_ratio == pytest.approx(totals.warm / 60)
    assert sum(row.cold for row in report.models) == totals.cold
    cold_ms, wait_ms = report.latency_ms["cold"], report.load_wait_ms
    assert cold_ms.max is not None and wait_ms.max is not None
    assert 0 < wait_ms.max <= cold_ms.max  # the server's wait, within the client's latency
    server_counts = report.server
    assert server_counts is not None
    assert server_counts.cold_requests == totals.cold  # the marks the clients saw, all of them
    assert server_counts.loads_ok is not None and server_counts.loads_ok >= totals.models_cold - 1
    assert server_counts.loads_failed == 0
    assert server_counts.evictions is not None and sum(server_counts.evictions.values()) > 0
    assert set(server_counts.evictions) <= {"models"}
    assert server_counts.resident_versions_max is not None
    assert server_counts.resident_versions_max <= 2
    assert sum(r.loads or 0 for r in report.models) == server_counts.loads_ok
    assert report.memory[-1].loads == server_counts.loads_ok
    assert (out / "many_memory.png").is_file()
