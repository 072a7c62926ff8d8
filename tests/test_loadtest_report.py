"""The load-test report: files written, markdown and HTML content, plots as valid PNGs."""

# The report prints the multiplication sign for ratios and the en dash for ranges and gaps.
# ruff: noqa: RUF001

from __future__ import annotations

import base64
import io
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from rich.console import Console

from graphserve.loadtest.report import plots
from graphserve.loadtest.report.analysis import (
    BREAKDOWN_STATISTIC,
    RawRun,
    analyze,
    breakdown,
    load_records,
)
from graphserve.loadtest.report.render import (
    headline,
    render_html,
    render_markdown,
    render_table,
    write_report,
)
from graphserve.loadtest.results.plan import ArmTarget, Plan
from graphserve.loadtest.results.run import REPORT_SCHEMA, OpenLoop, RatioValue, Report

T0 = 1_763_632_800.0  # 2025-11-20T10:00:00Z
WINDOW_S = 5.0


def _window(index: int, start: float, p50: float) -> dict[str, Any]:
    return {
        "index": index,
        "start": start,
        "end": start + WINDOW_S,
        "requests": 1470,
        "failures": 0,
        "throughput_rps": 294.0,
        "p50_ms": p50,
        "p99_ms": p50 * 2,
        "mean_ms": p50 * 1.1,
        "generator_cpu_pct": 41.0,
        "machine_cpu_pct": 63.0,
    }


def _arm(p50: float, rps: float, step_start: float, offset: int, **extra: Any) -> dict[str, Any]:
    """One arm's step; its windows alternate with the other arm's (offset 0 or 1)."""
    latency = {
        "p50": p50,
        "p90": p50 * 1.3,
        "p95": p50 * 1.5,
        "p99": p50 * 2.1,
        "p99.9": p50 * 3.6,
        "mean": p50 * 1.1,
        "min": p50 * 0.6,
        "max": p50 * 8,
    }
    windows = [
        _window(i, step_start + (2 * i + offset) * WINDOW_S, p50 * (1 + 0.02 * i)) for i in range(3)
    ]
    arm: dict[str, Any] = {
        "requests": 5210,
        "warmup_requests": 800,
        "measured_requests": 4410,
        "failures": 0,
        "errors": {},
        "duration_s": 15.0,
        "throughput_rps": rps,
        "latency_ms": latency,
        "ci95_ms": {k: [v * 0.98, v * 1.02] for k, v in latency.items() if k.startswith("p")},
        "windows": windows,
        "stable": True,
        "stability": {"last_windows": 3, "spread_pct": {"throughput": 2.1, "p50": 3.0}},
        "generator": {"cpu_pct": 45.0, "machine_cpu_pct": 63.0, "bound": False, "reason": None},
        "server": {
            "requests": 5210,
            "client_requests": 5210,
            "request_mean_ms": p50 * 0.8,
            "runtime_mean_ms": p50 * 0.5,
            "statistic": "mean",
            "client_mean_ms": p50 * 1.1,
            "breakdown_ms": {
                "model": p50 * 0.5,
                "server": p50 * 0.3,
                "client_and_network": p50 * 0.3,
            },
            "clamped_ms": {},
        },
        "open_loop": None,
    }
    arm.update(extra)
    return arm


def _ratio(value: float, ci: list[float] | None = None) -> dict[str, Any]:
    return {"value": value, "ci95": ci}


def make_report(loads: tuple[int, ...] = (4, 16)) -> Report:
    """A two-arm closed-loop report; at the last load eager is generator-bound and unstable."""
    return Report.model_validate(make_report_document(loads))


def make_report_document(loads: tuple[int, ...] = (4, 16)) -> dict[str, Any]:
    """make_report's report.json, as a JSON document."""
    steps = []
    for index, load in enumerate(loads):
        start = T0 + index * 40.0
        last = index == len(loads) - 1
        eager_extra: dict[str, Any] = {}
        if last:
            eager_extra = {
                "stable": False,
                "failures": 3,
                "errors": {"UNAVAILABLE: <connection refused> | retry": 3},
                "generator": {
                    "cpu_pct": 98.0,
                    "machine_cpu_pct": 99.0,
                    "bound": True,
                    "reason": "generator CPU 98 %",
                },
                "stability": {"last_windows": 3, "spread_pct": {"throughput": 14.0, "p50": 21.0}},
            }
        steps.append(
            {
                "index": index,
                "load": load,
                "arms": {
                    "graph": _arm(0.473 * (1 + index), 294.0 * (1 + index), start, 0),
                    "eager": _arm(1.05 * (1 + index), 140.0 * (1 + index), start, 1, **eager_extra),
                },
                "ratios": {
                    "graph/eager": {
                        "throughput": _ratio(2.1),
                        "p50": _ratio(0.45, [0.44, 0.46]),
                        "p90": _ratio(0.5, [0.48, 0.52]),
                        "p95": _ratio(0.51, [0.49, 0.53]),
                        "p99": _ratio(0.55, [0.5, 0.6]),
                        "p99.9": _ratio(0.6, [0.5, 0.7]),
                        "mean": _ratio(0.47),
                    }
                },
            }
        )
    return {
        "schema": REPORT_SCHEMA,
        "title": "mlp: graph vs eager, gRPC, closed loop",
        "headline": [],
        "settings": {
            "protocol": "grpc",
            "rest_format": "row",
            "mode": "closed",
            "loads": list(loads),
            "arrivals": "constant",
            "max_in_flight": 64,
            "warmup_s": 2.0,
            "window_s": WINDOW_S,
            "min_windows": 3,
            "max_windows": 10,
            "stability_pct": 10.0,
            "model_name": "mlp",
            "signature_name": "serving_default",
            "batch_size": 1,
            "seed": 0,
            "workers": 0,
            "max_requests": None,
            "baseline": "eager",
            "arm_order": ["graph", "eager"],
            "payload": {
                "source": "metadata",
                "file": "payload.npz",
                "inputs": {"x": {"dtype": "float32", "shape": [1, 784]}},
            },
            "locust": {"stop_timeout_s": 5, "sweepfile": "sweepfile.py"},
        },
        "environment": {
            "timestamp": "2026-11-20T10:00:00+00:00",
            "hostname": "box",
            "platform": "Linux-6.1-x86_64",
            "cpus": 2,
            "python": "3.11.2",
            "versions": {"tensorflow": "2.21.0", "locust": "2.47.0"},
            "command": ["graphserve", "loadtest", "compare"],
        },
        "arms": {
            "graph": {
                "address": "127.0.0.1:8500",
                "protocol": "grpc",
                "runner": "graph",
                "metrics_url": "http://127.0.0.1:8501/monitoring/prometheus/metrics",
            },
            "eager": {
                "address": "127.0.0.1:9500",
                "protocol": "grpc",
                "runner": "eager",
                "metrics_url": None,
            },
        },
        "steps": steps,
        "truncated": None,
        "elapsed_s": 95.2,
        "manifest": None,
        "calibration": {
            "null_endpoint": "127.0.0.1:1234",
            "arm": "null",
            "steps": [{"load": load, "throughput_rps": 5000.0, "p50_ms": 0.3} for load in loads],
        },
        "cold_start": {
            "runs": [
                {
                    "server": "graph",
                    "warmup_records": True,
                    "ready_s": 2.1,
                    "first_request_ms": 3.0,
                    "steady_p50_ms": 0.9,
                    "first_over_steady": 3.3,
                    "steady_requests": 200,
                }
            ]
        },
        "slo": {
            "gates": [
                {
                    "expression": "p99<50ms",
                    "arm": "graph",
                    "step": 0,
                    "load": loads[0],
                    "value": 2.3,
                    "threshold": 50.0,
                    "passed": True,
                },
                {
                    "expression": "p99<2ms",
                    "arm": "eager",
                    "step": 0,
                    "load": loads[0],
                    "value": 2.2,
                    "threshold": 2.0,
                    "passed": False,
                },
            ],
            "max_failures": 0,
            "failures": 3,
            "passed": False,
        },
    }


def write_records(out_dir: Path, report: Report, per_window: int = 200) -> Path:
    """raw/records.npz as the run writes it: warm-up (window -1) and windowed requests."""
    rng = np.random.default_rng(0)
    names = report.settings.arm_order
    columns: dict[str, list[Any]] = {
        k: [] for k in ("arm", "step", "window", "start", "latency_ms", "ok")
    }
    for step in report.steps:
        for a, name in enumerate(names):
            p50 = step.arms[name].latency_ms.p50
            assert p50 is not None
            for window in range(-1, 3):
                latency = rng.lognormal(np.log(p50), 0.3, per_window)
                columns["arm"] += [a] * per_window
                columns["step"] += [step.index] * per_window
                columns["window"] += [window] * per_window
                columns["start"] += list(T0 + rng.uniform(0, 30, per_window))
                columns["latency_ms"] += list(latency)
                columns["ok"] += list(rng.uniform(size=per_window) > 0.01)
    path = out_dir / "raw" / "records.npz"
    path.parent.mkdir(parents=True, exist_ok=True)
    n = len(columns["arm"])
    np.savez(
        path,
        arm=np.array(columns["arm"], np.int16),
        step=np.array(columns["step"], np.int16),
        window=np.array(columns["window"], np.int16),
        start=np.array(columns["start"]),
        latency_ms=np.array(columns["latency_ms"]),
        ok=np.array(columns["ok"], bool),
        lag_ms=np.zeros(n),
        arms=np.array(names),
    )
    return path


def assert_png(data: bytes) -> None:
    image = Image.open(io.BytesIO(data))
    assert image.format == "PNG"
    assert image.size[0] > 100 and image.size[1] > 100
    image.verify()


class _PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str | None]] = []
        self.links: list[str] = []
        self.scripts: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "img":
            self.images.append(attributes)
        if tag == "script":
            self.scripts.append(attributes)
        for key in ("src", "href"):
            if attributes.get(key):
                self.links.append(str(attributes[key]))


def test_write_report_writes_every_file(tmp_path: Path) -> None:
    report = make_report()
    write_records(tmp_path, report)
    for name in ("locust_stats.csv", "locust_failures.csv"):
        (tmp_path / name).write_text("Type,Name\n")
    (tmp_path / "other.csv").write_text("x\n")

    files = write_report(report, tmp_path)

    assert files.to_json() == {
        "json": "report.json",
        "markdown": "report.md",
        "html": "report.html",
        "plots": ["latency_cdf.png", "percentiles.png", "throughput.png", "windows.png"],
        "locust_csv": ["locust_failures.csv", "locust_stats.csv"],
        "raw": "raw/records.npz",
    }
    assert report.files is files
    for name in files.plots:
        assert_png((tmp_path / name).read_bytes())
    saved = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert saved == report.to_json()
    assert Report.model_validate(saved) == report
    assert saved["files"]["plots"] == files.plots
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "![latency CDF](latency_cdf.png)" in markdown
    assert "![p50 per measurement window over time](windows.png)" in markdown
    assert "locust_stats.csv" in markdown
    html_page = (tmp_path / "report.html").read_text(encoding="utf-8")
    parser = _PageParser()
    parser.feed(html_page)
    assert len(parser.images) == 4


def test_write_report_without_records_skips_the_cdf(tmp_path: Path) -> None:
    report = make_report()
    files = write_report(report, tmp_path)
    assert files.plots == ["percentiles.png", "throughput.png", "windows.png"]
    assert files.raw is None and files.locust_csv == []
    assert not (tmp_path / "latency_cdf.png").exists()
    assert "latency_cdf" not in (tmp_path / "report.md").read_text(encoding="utf-8")


def test_markdown_content() -> None:
    markdown = render_markdown(make_report(), {"latency_cdf.png": "latency_cdf.png"})

    assert markdown.startswith("# mlp: graph vs eager, gRPC, closed loop\n")
    assert "gRPC, closed loop with 4, 16 concurrent users" in markdown
    assert "2 s warm-up, then 5 s windows (3–10 per arm)" in markdown
    assert "2 CPUs, Linux-6.1-x86_64" in markdown
    assert "## 4 users" in markdown and "## 16 users" in markdown
    # graph at 4 users: p50 0.473 with its CI, p99 0.993, p99.9 1.70; breakdown model/server/rest
    row = next(line for line in markdown.splitlines() if line.startswith("| graph |"))
    assert "| 4,410 | 0 | 294.0 | 0.473 [0.464–0.482] |" in row
    assert "| 0.236 / 0.142 / 0.142 |" in row
    assert "| eager (baseline) |" in markdown
    assert "| graph/eager | 2.1× | 0.45× [0.44–0.46] |" in markdown
    # cold start, calibration, SLO with the failing gate and the failures against the max
    assert (
        "## Cold start" in markdown and "| graph | yes | 2.10 | 3.00 | 0.900 | 3.3× |" in markdown
    )
    assert "null endpoint 127.0.0.1:1234" in markdown
    assert "**SLO failed ✗**" in markdown
    assert "| p99\\<2ms | eager | 4 users | 2.20 | 2.00 | ✗ |" in markdown
    assert "| failures ≤ max | all | all | 3 | 0 | ✗ |" in markdown
    # warnings collected from the data; a pipe in an error message does not break the table
    warnings = markdown.split("## Warnings", 1)[1]
    assert "eager at 16 users: not stable (spread: throughput 14.0 %, p50 21.0 %)" in warnings
    assert "eager at 16 users: the load generator was the bottleneck" in warnings
    assert (
        "eager at 16 users: 3 failed requests (UNAVAILABLE: \\<connection refused> \\| retry ×3)"
        in warnings
    )
    assert "graph at" not in warnings
    assert "| eager (baseline) | 4,410 | 3 |" in markdown
    assert "bound: generator CPU 98 %" in markdown
    assert "![latency CDF](latency_cdf.png)" in markdown


def test_markdown_warns_about_late_requests_and_server_counts() -> None:
    report = make_report(loads=(200,))
    report.settings.mode = "open"
    arm = report.steps[0].arms["graph"]
    arm.open_loop = OpenLoop(target_rps=200, achieved_rps=150.0, late_pct=12.5)
    assert arm.server is not None
    arm.server.requests = 5000
    markdown = render_markdown(report)
    assert "open loop at 200 req/s (constant arrivals, at most 64 requests in flight)" in markdown
    assert "## 200 req/s" in markdown
    assert (
        "graph at 200 req/s: 12.5 % of requests sent late (achieved 150.0 of 200.0 req/s)"
        in markdown
    )
    assert (
        "graph at 200 req/s: the server counted 5,000 requests, the client sent 5,210" in markdown
    )


def test_html_is_self_contained_and_escaped() -> None:
    report = make_report()
    images = {
        "percentiles.png": plots.percentiles_vs_load(report),
        "windows.png": plots.windows_over_time(report),
    }
    page = render_html(report, images)

    parser = _PageParser()
    parser.feed(page)
    assert [i["alt"] for i in parser.images] == [
        "latency percentiles against load",
        "p50 per measurement window over time",
    ]
    for image in parser.images:
        src = str(image["src"])
        assert src.startswith("data:image/png;base64,")
        assert_png(base64.b64decode(src.removeprefix("data:image/png;base64,"), validate=True))
    assert not [link for link in parser.links if link.startswith(("http://", "https://"))]
    assert not [s for s in parser.scripts if s.get("src")]
    assert "<style>" in page
    assert "&lt;connection refused&gt;" in page and "<connection refused>" not in page
    assert '<tr class="fail">' in page  # the failing SLO gate
    assert '<div class="warnings">' in page
    assert '<td class="num">0.473 [0.464–0.482]</td>' in page


def test_terminal_table_shows_arms_and_ratios() -> None:
    console = Console(record=True, width=160)
    console.print(render_table(make_report()))
    text = console.export_text()
    assert "graph" in text and "eager" in text and "16 users" in text
    assert "graph/eager: p50 0.45× [0.44–0.46], p99 0.55× [0.5–0.6], throughput 2.1×" in text
    assert "generator-bound" in text and "unstable" in text
    assert "SLO: FAILED (1 gate(s))" in text


@pytest.mark.parametrize("with_records", [True, False])
def test_single_step_report_plots(tmp_path: Path, with_records: bool) -> None:
    report = make_report(loads=(8,))
    for png in (
        plots.percentiles_vs_load(report),
        plots.throughput_vs_load(report),
        plots.windows_over_time(report),
    ):
        assert_png(png)
    if with_records:
        records = load_records(write_records(tmp_path, report))
        assert records is not None
        cdf = plots.latency_cdf(records, report)
        assert cdf is not None
        assert_png(cdf)
    else:
        assert load_records(tmp_path / "raw" / "records.npz") is None


def test_cdf_downsamples_large_runs_and_is_none_without_successes(tmp_path: Path) -> None:
    report = make_report(loads=(8,))
    records = load_records(write_records(tmp_path, report, per_window=5000))
    assert records is not None
    assert_png(plots.latency_cdf(records, report) or b"")
    failed = dict(records, ok=np.zeros_like(records["ok"]))
    assert plots.latency_cdf(failed, report) is None
    report.settings.mode = "open"  # latency counted from the scheduled send (+ lag_ms)
    assert_png(plots.latency_cdf(dict(records, lag_ms=records["latency_ms"]), report) or b"")


def test_load_records_rejects_missing_fields(tmp_path: Path) -> None:
    path = tmp_path / "records.npz"
    np.savez(path, arm=np.zeros(3, np.int16))
    with pytest.raises(ValueError, match="lack the fields"):
        load_records(path)


def test_arm_without_successes_renders_dashes(tmp_path: Path) -> None:
    document = make_report_document()
    for step in document["steps"]:
        eager = step["arms"]["eager"]
        eager.update(
            failures=4410,
            throughput_rps=None,
            server=None,
            stable=False,  # what stability() says of windows without a p50
            ci95_ms={k: None for k in eager["ci95_ms"]},
            latency_ms={k: None for k in eager["latency_ms"]},
        )
        for window in eager["windows"]:
            window.update(p50_ms=None, p99_ms=None, mean_ms=None, throughput_rps=None)
        step["ratios"]["graph/eager"] = {
            k: {"value": None, "ci95": None} for k in step["ratios"]["graph/eager"]
        }
    report = Report.model_validate(document)
    original = report.model_copy(deep=True)

    files = write_report(report, tmp_path)

    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    row = next(line for line in markdown.splitlines() if line.startswith("| eager (baseline) |"))
    assert "| 4,410 | 4,410 | – | – | – | – | – | – | – | no |" in row
    assert "| graph/eager | – | – |" in markdown
    assert "eager at 4 users: no successful measured request" in markdown
    assert "–" in (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "percentiles.png" in files.plots
    console = Console(record=True, width=160)
    console.print(render_table(report))
    assert "no successes" in console.export_text()
    # rendering reads, never changes, the data: only the files and the headline are set
    assert report.model_copy(update={"files": None, "headline": []}) == original


# ---------------------------------------------------------------------------------------------
# The headline: one sentence per load step, at the top of every rendering


def test_headline_opens_markdown_html_and_terminal(tmp_path: Path) -> None:
    report = make_report()
    expected = [
        "graph answers in 0.45× the time of eager at 4 users (p50 ratio, 95% CI 0.44–0.46), "
        "with 2.1× the throughput.",
        # eager at 16 users is unstable and generator-bound: the sentence points at the warnings
        "graph answers in 0.45× the time of eager at 16 users (p50 ratio, 95% CI 0.44–0.46), "
        "with 2.1× the throughput (read with the warnings below).",
    ]
    assert headline(report) == expected

    write_report(report, tmp_path)
    assert json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["headline"] == (
        expected
    )
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8").split("\n\n")
    assert markdown[:3] == [
        "# mlp: graph vs eager, gRPC, closed loop",
        *(f"**{sentence}**" for sentence in expected),
    ]
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    body = page.split("<main>\n", 1)[1].splitlines()
    assert body[1:3] == [f'<p class="lead"><strong>{s}</strong></p>' for s in expected]
    console = Console(record=True, width=200)
    console.print(render_table(report))
    assert console.export_text().splitlines()[:3] == [
        "mlp: graph vs eager, gRPC, closed loop",
        *expected,
    ]


def test_headline_with_several_arms_no_clear_difference_and_no_successes() -> None:
    report = make_report(loads=(1, 4))
    first, second = report.steps
    tfserving = first.ratios["graph/eager"].model_copy(deep=True)
    tfserving.p50 = RatioValue(value=0.98, ci95=(0.95, 1.02))
    tfserving.throughput = RatioValue(value=None, ci95=None)
    first.ratios["tfserving/eager"] = tfserving
    second.arms["eager"].latency_ms.p50 = None
    second.ratios["graph/eager"].p50 = RatioValue(value=None, ci95=None)
    report.settings.mode = "open"
    assert headline(report) == [
        "At 1 req/s, graph answers in 0.45× the time of eager (p50 ratio, 95% CI 0.44–0.46), "
        "with 2.1× the throughput; tfserving answers in 0.98× the time of eager (p50 ratio, "
        "95% CI 0.95–1.02: no clear difference).",
        "graph and eager cannot be compared at 4 req/s: eager had no successful request "
        "(read with the warnings below).",
    ]
    assert headline(make_report(loads=(1,)).model_copy(update={"steps": []})) == []


# ---------------------------------------------------------------------------------------------
# The server-side breakdown: every part a difference of means, never negative


def _sweep(eager_server_mean_ms: float) -> tuple[RawRun, Plan]:
    """One step at 4 users, graph and eager, two windows each, with their servers scraped.

    Client latencies: graph 1 ms, eager 50 ms (means). Server request means: graph 0.8 ms,
    eager `eager_server_mean_ms`; model (runtime) means: graph 0.5 ms, eager 45 ms.
    """
    rng = np.random.default_rng(3)
    plan = Plan(
        arms=(ArmTarget("graph", "127.0.0.1:1", "127.0.0.1:1"),
              ArmTarget("eager", "127.0.0.1:2", "127.0.0.1:2")),
        protocol="grpc", body_file="request.bin", rest_path="/v1/models/tiny:predict",
        model_name="tiny", mode="closed", loads=(4,), out_dir=".", min_windows=2, max_windows=2,
    )  # fmt: skip
    client_ms = {0: 1.0, 1: 50.0}
    server_ms = {0: (0.8, 0.5), 1: (eager_server_mean_ms, 45.0)}
    phases, scrapes, columns = [], [], {k: [] for k in ("arm", "seq", "window", "latency_ms")}
    seq = 0
    for arm in (0, 1):
        scrapes.append(_scrape(arm, "step_start", -1, 0, 0.0, 0.0))
    for window, arms in enumerate(((0, 1), (1, 0))):
        for arm in arms:
            seq += 1
            started = T0 + seq
            phases.append({"seq": seq, "kind": "window", "step": 0, "window": window,
                           "arm": arm, "started": started, "ended": started + 1.0})  # fmt: skip
            latency = rng.normal(client_ms[arm], client_ms[arm] * 0.05, 100)
            latency += client_ms[arm] - latency.mean()  # exactly the intended mean
            columns["arm"] += [arm] * 100
            columns["seq"] += [seq] * 100
            columns["window"] += [window] * 100
            columns["latency_ms"] += list(latency)
            done = sum(1 for p in phases if p["arm"] == arm) - 1
            request_ms, runtime_ms = server_ms[arm]
            scrapes.append(_scrape(arm, "phase_start", seq, 100 * done, request_ms, runtime_ms))
            scrapes.append(_scrape(arm, "phase_end", seq, 100 * (done + 1), request_ms, runtime_ms))
    for arm in (0, 1):
        scrapes.append(_scrape(arm, "step_end", -1, 200, *server_ms[arm]))
    n = len(columns["arm"])
    records = {
        "arms": np.array(["graph", "eager"]),
        "arm": np.array(columns["arm"], np.int16),
        "step": np.zeros(n, np.int16),
        "window": np.array(columns["window"], np.int16),
        "seq": np.array(columns["seq"], np.int64),
        "start": np.full(n, T0),
        "latency_ms": np.array(columns["latency_ms"]),
        "ok": np.ones(n, bool),
        "lag_ms": np.zeros(n),
    }
    return RawRun(records, phases, scrapes, cpu={}, errors=[], truncated=""), plan


def _scrape(
    arm: int, moment: str, seq: int, count: float, request_ms: float, runtime_ms: float
) -> dict[str, Any]:
    """Cumulative counters after `count` requests of `request_ms` (model: `runtime_ms`)."""
    return {
        "arm": arm, "moment": moment, "step": 0, "seq": seq, "requests": count,
        "request_count": count, "request_sum_s": count * request_ms / 1000,
        "runtime_count": count, "runtime_sum_s": count * runtime_ms / 1000,
    }  # fmt: skip


def test_breakdown_parts_are_means_that_add_up_to_the_client_mean() -> None:
    run, plan = _sweep(eager_server_mean_ms=46.0)
    (step,) = analyze(run, plan, baseline="eager")
    for name, (model, server, rest) in {"graph": (0.5, 0.3, 0.2), "eager": (45, 1, 4)}.items():
        arm = step.arms[name]
        breakdown = arm.server
        assert breakdown is not None
        assert breakdown.statistic == BREAKDOWN_STATISTIC == "mean"
        assert breakdown.client_mean_ms == pytest.approx(arm.latency_ms.mean)
        parts = breakdown.breakdown_ms
        assert parts == pytest.approx({"model": model, "server": server,
                                       "client_and_network": rest})  # fmt: skip
        assert sum(v or 0.0 for v in parts.values()) == pytest.approx(arm.latency_ms.mean)
        assert breakdown.clamped_ms == {}


def test_breakdown_is_never_negative() -> None:
    # Issue 14, failure 3: the eager server's mean request time (63.6 ms) exceeded the client's
    # mean latency (50 ms), and client + network read -13.6 ms.
    run, plan = _sweep(eager_server_mean_ms=63.6)
    (step,) = analyze(run, plan, baseline="eager")
    eager = step.arms["eager"].server
    assert eager is not None
    assert eager.breakdown_ms == pytest.approx(
        {"model": 45.0, "server": 18.6, "client_and_network": 0.0}
    )
    assert eager.clamped_ms == {"client_and_network": pytest.approx(-13.6)}
    servers = [arm.server for arm in step.arms.values() if arm.server is not None]
    assert all((v or 0.0) >= 0 for server in servers for v in server.breakdown_ms.values())
    # A model time above the request time (batched runtimes) is clamped the same way.
    assert breakdown(10.0, 2.0, 3.0).breakdown_ms == {
        "model": 3.0, "server": 0.0, "client_and_network": 8.0,
    }  # fmt: skip
    assert breakdown(None, None, None).breakdown_ms == dict.fromkeys(
        ("model", "server", "client_and_network")
    )

    report = make_report(loads=(4,))
    report.steps = [step]
    markdown = render_markdown(report)
    assert "| mean: model / server / client+network |" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| eager (baseline) |"))
    assert row.endswith("| 45.0 / 18.6 / 0 (raw -13.6) |")
    assert (
        "eager at 4 users: the client + network part of the server-side breakdown came out at "
        "-13.6 ms and shows as 0: the means it is the difference of cover different requests"
    ) in markdown
