"""The load-test report: files written, markdown and HTML content, plots as valid PNGs."""

# The report prints the multiplication sign for ratios and the en dash for ranges and gaps.
# ruff: noqa: RUF001

from __future__ import annotations

import base64
import copy
import io
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from rich.console import Console

from loadtest import plots
from loadtest.analysis import load_records
from loadtest.report import render_html, render_markdown, render_table, write_report

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
        "generator": {"cpu_pct": 45.0, "bound": False, "reason": None},
        "server": {
            "requests": 5210,
            "request_mean_ms": p50 * 0.8,
            "runtime_mean_ms": p50 * 0.5,
            "breakdown_ms": {
                "model": p50 * 0.5,
                "server": p50 * 0.3,
                "client_and_network": p50 * 0.3,
            },
        },
        "open_loop": None,
    }
    arm.update(extra)
    return arm


def _ratio(value: float, ci: list[float] | None = None) -> dict[str, Any]:
    return {"value": value, "ci95": ci}


def make_report(loads: tuple[int, ...] = (4, 16)) -> dict[str, Any]:
    """A two-arm closed-loop report; at the last load eager is generator-bound and unstable."""
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
                "generator": {"cpu_pct": 98.0, "bound": True, "reason": "generator CPU 98 %"},
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
        "schema": "graphserve.loadtest/2",
        "title": "mlp: graph vs eager, gRPC, closed loop",
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
            "eager": {"address": "127.0.0.1:9500", "protocol": "grpc", "runner": "eager"},
        },
        "steps": steps,
        "calibration": {
            "null_endpoint": "127.0.0.1:1234",
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


def write_records(out_dir: Path, report: dict[str, Any], per_window: int = 200) -> Path:
    """raw/records.npz as the run writes it: warm-up (window -1) and windowed requests."""
    rng = np.random.default_rng(0)
    names = report["settings"]["arm_order"]
    columns: dict[str, list[Any]] = {
        k: [] for k in ("arm", "step", "window", "start", "latency_ms", "ok")
    }
    for step in report["steps"]:
        for a, name in enumerate(names):
            p50 = step["arms"][name]["latency_ms"]["p50"]
            for window in range(-1, 3):
                latency = rng.lognormal(np.log(p50), 0.3, per_window)
                columns["arm"] += [a] * per_window
                columns["step"] += [step["index"]] * per_window
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

    assert files == {
        "json": "report.json",
        "markdown": "report.md",
        "html": "report.html",
        "plots": ["latency_cdf.png", "percentiles.png", "throughput.png", "windows.png"],
        "locust_csv": ["locust_failures.csv", "locust_stats.csv"],
        "raw": "raw/records.npz",
    }
    assert report["files"] is files
    for name in files["plots"]:
        assert_png((tmp_path / name).read_bytes())
    saved = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert saved == report
    assert saved["files"]["plots"] == files["plots"]
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
    assert files["plots"] == ["percentiles.png", "throughput.png", "windows.png"]
    assert files["raw"] is None and files["locust_csv"] == []
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
    report["settings"]["mode"] = "open"
    arm = report["steps"][0]["arms"]["graph"]
    arm["open_loop"] = {"target_rps": 200, "achieved_rps": 150.0, "late_pct": 12.5}
    arm["server"]["requests"] = 5000
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
    report["settings"]["mode"] = "open"  # latency counted from the scheduled send (+ lag_ms)
    assert_png(plots.latency_cdf(dict(records, lag_ms=records["latency_ms"]), report) or b"")


def test_load_records_rejects_missing_fields(tmp_path: Path) -> None:
    path = tmp_path / "records.npz"
    np.savez(path, arm=np.zeros(3, np.int16))
    with pytest.raises(ValueError, match="lack the fields"):
        load_records(path)


def test_arm_without_successes_renders_dashes(tmp_path: Path) -> None:
    report = make_report()
    for step in report["steps"]:
        eager = step["arms"]["eager"]
        eager.update(
            failures=4410,
            throughput_rps=None,
            server=None,
            stable=None,
            ci95_ms={k: None for k in eager["ci95_ms"]},
            latency_ms={k: None for k in eager["latency_ms"]},
        )
        for window in eager["windows"]:
            window.update(p50_ms=None, p99_ms=None, mean_ms=None, throughput_rps=None)
        step["ratios"]["graph/eager"] = {
            k: {"value": None, "ci95": None} for k in step["ratios"]["graph/eager"]
        }
    original = copy.deepcopy(report)

    files = write_report(report, tmp_path)

    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    row = next(line for line in markdown.splitlines() if line.startswith("| eager (baseline) |"))
    assert "| 4,410 | 4,410 | – | – | – | – | – | – | – | – |" in row
    assert "| graph/eager | – | – |" in markdown
    assert "eager at 4 users: no successful measured request" in markdown
    assert "–" in (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "percentiles.png" in files["plots"]
    console = Console(record=True, width=160)
    console.print(render_table(report))
    assert "no successes" in console.export_text()
    del report["files"]
    assert report == original  # rendering reads, never changes, the data
