"""The load-test report in a real browser (issue 17, D): report.html opened in headless Chromium.

Every page is a report written by `write_report` into tmp_path and opened from disk at a 1280 px
wide viewport, offline: it loads with no console error, page error or failed request and asks for
nothing but itself; every plot decodes and is visible; nothing scrolls sideways, neither the page
nor a table in its box. `test_the_checks_catch_a_broken_page` shows each check can fail.

Chromium is Debian's `chromium` (`make test` installs it); the Python `playwright` package drives
it through the driver inside its wheel. `playwright install`, which downloads a browser of its
own, is never run. Also `graphserve loadtest report OUT --open`, with BROWSER set to a script.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from graphserve.loadtest.generator.workers import workers_section
from graphserve.loadtest.report.analysis import breakdown
from graphserve.loadtest.report.render import IMAGE_TITLES, write_report
from graphserve.loadtest.results.run import ArmSearch, FindMax, Probe, Report, Step
from tests.test_loadtest_report import make_report, make_report_document, write_records

VIEWPORT = {"width": 1280, "height": 800}
# What the page looks like to a reader, measured by the browser after the load event.
_MEASURE = """
async () => {
  const heading = (node) => {
    for (let n = node; n; n = n.previousElementSibling) {
      if (/^H[12]$/.test(n.tagName)) return n.textContent;
    }
    return "(no heading)";
  };
  const images = await Promise.all([...document.images].map(async (img) => {
    const decoded = await img.decode().then(() => true, () => false);
    const box = img.getBoundingClientRect();
    return {
      alt: img.alt, decoded, complete: img.complete, naturalWidth: img.naturalWidth,
      width: box.width, height: box.height, display: getComputedStyle(img).display,
      visible: img.checkVisibility({checkOpacity: true, checkVisibilityCSS: true}),
    };
  }));
  const tables = [...document.querySelectorAll("table")].map((table) => {
    const box = table.parentElement;
    return {
      under: heading(box.matches(".scroll") ? box : table),
      width: table.getBoundingClientRect().width,
      box: box.getBoundingClientRect().width,
      scrolls: box.scrollWidth > box.clientWidth,
    };
  });
  return {
    viewport: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    images, tables,
  };
}
"""


def page_problems(browser: Any, page_path: Path) -> tuple[list[str], dict[str, Any]]:
    """Everything a reader of `page_path` at 1280 px would trip on, and the measurements."""
    context = browser.new_context(viewport=VIEWPORT, offline=True)
    page = context.new_page()
    problems: list[str] = []
    requests: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} {r.failure}"))
    page.on("request", lambda r: requests.append(r.url))
    uri = page_path.resolve().as_uri()
    try:
        response = page.goto(uri, wait_until="load")
        if response is None or not response.ok:
            problems.append(f"{uri} did not load: {response and response.status}")
        measured: dict[str, Any] = page.evaluate(_MEASURE)
        if problems or _layout_problems(measured):
            page.screenshot(path=page_path.with_suffix(".1280.png"), full_page=True)
    finally:
        context.close()
    problems += [
        f"asked for {url}" for url in requests if url != uri and not url.startswith("data:")
    ]
    return problems + _layout_problems(measured), measured


def _layout_problems(measured: dict[str, Any]) -> list[str]:
    problems = []
    if measured["scrollWidth"] > measured["viewport"]:
        problems.append(
            f"the page scrolls sideways: {measured['scrollWidth']} px wide in a "
            f"{measured['viewport']} px viewport"
        )
    for table in measured["tables"]:
        if table["width"] > table["box"] or table["scrolls"]:
            problems.append(
                f"the table under {table['under']!r} is {table['width']:.0f} px wide "
                f"in a {table['box']:.0f} px box"
            )
    for image in measured["images"]:
        if not (image["decoded"] and image["complete"] and image["naturalWidth"] > 0):
            problems.append(f"the image {image['alt']!r} does not decode")
        if not (image["visible"] and image["width"] > 0 and image["height"] > 0):
            problems.append(
                f"the image {image['alt']!r} is not visible ({image['width']:.0f}x"
                f"{image['height']:.0f} px, display {image['display']})"
            )
    return problems


# ---------------------------------------------------------------------------------------------
# The reports: the fixture report, and the widest that real runs make


def write_fixture_report(out: Path) -> Path:
    """make_report() with its raw records: all four plots."""
    report = make_report()
    write_records(out, report)
    write_report(report, out)
    return out / "report.html"


_LONG_ERROR = (
    "StatusCode.UNAVAILABLE: failed to connect to all addresses; last error: UNKNOWN: "
    "ipv4:127.0.0.1:9500: Failed to connect to remote host: Connection refused"
)
# An error body with a token no space breaks: a URL and a TensorFlow node path.
_UNBROKEN_ERROR = (
    "HTTP 400: http://graphserve-eager.loadtest.svc.cluster.local:9501/v1/models/"
    "mnist_mlp_784_128_10/versions/1700000000:predict/"
    "StatefulPartitionedCall/sequential_1/flatten_1/Reshape_with_a_very_long_suffix"
)
_WORKER_HOST = "graphserve-loadtest-worker-7d9f8c6b5-x2k4q.loadtest.svc.cluster.local"


def widest_report() -> Report:
    """Four arms (graph, tfserving, null, eager) in an open loop at three rates: the late
    column, the server breakdown with clamped parts, generator-bound arms with every reason,
    failures with long messages, and three locust workers of which two were lost."""
    document = make_report_document(loads=(50, 400, 2000))
    arms = ["graph", "tfserving", "null", "eager"]
    document["title"] = "mnist_mlp: graph vs tfserving vs null vs eager, REST (columnar), open loop"
    document["settings"].update(
        protocol="rest", rest_format="columnar", mode="open", arrivals="poisson",
        arm_order=arms, expect_workers=3,
    )  # fmt: skip
    document["arms"]["tfserving"] = {**document["arms"]["graph"], "address": "10.0.0.7:8501"}
    document["arms"]["null"] = {**document["arms"]["graph"], "address": "127.0.0.1:7501"}
    for step in document["steps"]:
        graph, eager = step["arms"]["graph"], step["arms"]["eager"]
        step["arms"] = {
            "graph": graph,
            "tfserving": _scaled(graph, 0.8, 1.3),
            "null": _scaled(graph, 0.1, 9.0),
            "eager": _scaled(eager, 1234.0, 1.0),  # saturated: seconds, thousands separators
        }
        # (late %, server request mean, model mean), the means as shares of the client's: the
        # tfserving server's mean above the client's, eager's model mean above its server's.
        shapes = {"graph": (0.4, 0.8, 0.5), "tfserving": (0.9, 1.12, 0.6),
                  "null": (2.5, 0.5, 0.05), "eager": (38.2, 1.05, 1.07)}  # fmt: skip
        for name, arm in step["arms"].items():
            late, request, model = shapes[name]
            arm["requests"] = arm["measured_requests"] = 1_234_567
            arm["open_loop"] = {"target_rps": step["load"], "achieved_rps": step["load"] * 0.62,
                                "late_pct": late}  # fmt: skip
            arm["server"] = _server(arm["requests"], arm["latency_ms"]["mean"], request, model)
        # Reasons as loadtest.analysis words them: CPU limits, and the null endpoint's rate.
        step["arms"]["tfserving"]["generator"] = {
            "cpu_pct": 97.0, "machine_cpu_pct": 99.0, "bound": True,
            "reason": "a locust process used 97% CPU (limit 90%); the machine's CPUs were 99% "
                      "busy (limit 95%); 4812 req/s is within 10% of the null endpoint's "
                      "5105 req/s",
        }  # fmt: skip
        eager = step["arms"]["eager"]
        eager.update(failures=12_345, stable=False)
        eager["errors"] = {_LONG_ERROR: 12_000, _UNBROKEN_ERROR: 300, "HTTP 503: overloaded": 45}
        ratio = step["ratios"]["graph/eager"]
        step["ratios"] = {f"{name}/eager": copy.deepcopy(ratio) for name in arms[:-1]}
    report = Report.model_validate(document)
    report.workers = workers_section(_phases(len(document["steps"]), arms), arms, remote=True)
    return report


def _scaled(arm: dict[str, Any], latency: float, throughput: float) -> dict[str, Any]:
    """Another arm with latencies and throughput `latency` and `throughput` times `arm`'s."""
    scaled = copy.deepcopy(arm)
    scaled["latency_ms"] = {k: v * latency for k, v in arm["latency_ms"].items()}
    scaled["ci95_ms"] = {k: [low * latency, high * latency] for k, (low, high)
                         in arm["ci95_ms"].items()}  # fmt: skip
    scaled["throughput_rps"] = arm["throughput_rps"] * throughput
    return scaled


def _server(requests: int, client_ms: float, request: float, model: float) -> dict[str, Any]:
    """A server breakdown as the analysis makes it, from the server's request and model means
    given as shares of the client's mean `client_ms`."""
    parts = breakdown(client_ms, client_ms * request, client_ms * model)
    return {
        **parts.model_dump(),
        "requests": requests,
        "client_requests": requests,
        "request_mean_ms": client_ms * request,
        "runtime_mean_ms": client_ms * model,
    }


def _phases(steps: int, arms: list[str]) -> dict[str, Any]:
    """raw/phases.json of a run with three workers; the first two were lost in the last step."""
    phases, seq, start = [], 0, 1000.0
    for step in range(steps):
        for window in range(3):
            for arm in range(len(arms)):
                seq += 1
                phases.append({"seq": seq, "kind": "window", "step": step, "window": window,
                               "arm": arm, "started": start, "ended": start + 5.0})  # fmt: skip
                start += 5.0
    node = {"host": _WORKER_HOST, "cpus": 64, "joined": 999.0, "lost": None, "last_seen": start}
    cpu = {str(p["seq"]): {"w1": 91.5, "w2": 88.0, "w3": 45.2} for p in phases}
    return {
        "phases": phases,
        "expected_workers": 3,
        "nodes": {
            "w1": {**node, "pid": 1_234_567, "lost": start, "last_seen": start - 50.0},
            "w2": {**node, "pid": 2_345_678, "lost": start, "last_seen": start - 95.0},
            "w3": {**node, "pid": 3_456_789},
        },
        "cpu": cpu,
        "machine_cpu": cpu,
    }


def find_max_report() -> Report:
    """`--find-max` over the widest report's arms and loads: every probe a one-arm step, and
    the searches' two tables (eager misses its gates from the second load on)."""
    report = widest_report()
    steps: list[Step] = []
    searches = {}
    for name in report.settings.arm_order:
        probes = []
        for source in report.steps:
            arm = source.arms[name]
            held = name != "eager" or source.load == report.steps[0].load
            why = None if held else f"missed p99<20ms, eager.p99.9<100ms; {_LONG_ERROR}"
            probes.append(
                Probe(step=len(steps), load=source.load, held=held, why=why,
                      value=arm.latency_ms.p99, throughput_rps=arm.throughput_rps,
                      generator_bound=arm.generator.bound)
            )  # fmt: skip
            steps.append(Step(index=len(steps), load=source.load, arms={name: arm}, ratios={}))
        held_loads = [p.load for p in probes if p.held]
        missed_loads = [p.load for p in probes if not p.held]
        searches[name] = ArmSearch(
            probes=probes,
            max_load=max(held_loads),
            first_miss=min(missed_loads, default=None),
            limit="slo" if missed_loads else "max load",
        )
    report.steps = steps
    report.find_max = FindMax(
        slo=["p99<20ms", "eager.p99.9<100ms"], mode="open", start=50, max_load=2000,
        max_probes=8, precision_pct=10.0, arms=searches,
    )  # fmt: skip
    return report


def write_widest_report(out: Path) -> Path:
    report = widest_report()
    write_records(out, report)
    write_report(report, out)
    return out / "report.html"


def write_find_max_report(out: Path) -> Path:
    """As `--find-max` writes it: no raw records at the top, so no latency CDF."""
    report = find_max_report()
    write_report(report, out)
    return out / "report.html"


# Each report, and how many plots its page shows.
REPORTS = {
    "fixture": (write_fixture_report, 4),
    "widest": (write_widest_report, 4),
    "find-max": (write_find_max_report, 3),
}


# ---------------------------------------------------------------------------------------------
# The checks


@pytest.mark.browser
@pytest.mark.parametrize("name", REPORTS)
def test_the_report_reads_in_chromium_at_1280_px(browser: Any, tmp_path: Path, name: str) -> None:
    write, plots = REPORTS[name]
    page = write(tmp_path)
    problems, measured = page_problems(browser, page)
    shot = page.with_suffix(".1280.png")
    assert not problems, "\n".join([f"{page} at 1280 px (screenshot: {shot}):", *problems])
    files = json.loads(page.with_name("report.json").read_text())["files"]["plots"]
    assert len(files) == plots
    assert [image["alt"] for image in measured["images"]] == [IMAGE_TITLES[f] for f in files]
    assert all(image["width"] >= 600 for image in measured["images"])  # shown, not a thumbnail
    assert measured["viewport"] == 1280 and len(measured["tables"]) >= 6


def test_the_widest_report_has_every_wide_part(tmp_path: Path) -> None:
    """The widest report holds what makes tables wide, or the test above proves little."""
    page = write_widest_report(tmp_path).read_text(encoding="utf-8")
    for text in (
        '<th class="num">late</th>',
        "mean: model / server / client+network",
        "<span>0 (raw -28.5)</span> / <span>0 (raw -71.3)</span>",
        "1,234,567",
        "is within 10% of the null endpoint",
        "tfserving/eager",
        "null/eager",
        "<h2>Load generator</h2>",
        f"worker {_WORKER_HOST} (pid 1234567) was lost",
        "Reshape_with_a_very_long_suffix",
    ):
        assert text in page


_BROKEN_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
<h2>Wide</h2><div class="scroll" style="overflow-x: auto">
<table><tr><td style="white-space: nowrap">{cells}</td></tr></table></div>
<img src="data:image/png;base64,iVBORw0KGgoAAAAN" alt="broken">
<img src="data:image/png;base64,{png}" alt="hidden" style="display: none">
<script>console.error("boom"); missing_function();</script>
</body></html>
"""


@pytest.mark.browser
def test_the_checks_catch_a_broken_page(browser: Any, tmp_path: Path) -> None:
    png = (write_fixture_report(tmp_path / "good").parent / "windows.png").read_bytes()
    page = tmp_path / "broken.html"
    page.write_text(_BROKEN_PAGE.format(cells="wide " * 600, png=base64.b64encode(png).decode()))
    problems, _ = page_problems(browser, page)
    assert problems[:2] == [
        "console error: boom",
        "page error: missing_function is not defined",
    ]
    layout = problems[2:]
    assert layout[0].startswith("the table under 'Wide' is ")
    assert layout[1:] == [
        "the image 'broken' does not decode",
        "the image 'hidden' is not visible (0x0 px, display none)",
    ]
    assert page.with_suffix(".1280.png").is_file()  # a screenshot to look at


# ---------------------------------------------------------------------------------------------
# `graphserve loadtest report OUT --open`: a person's browser, here a script that records its
# argument (webbrowser runs BROWSER's command with the URI and waits for it)


def _report_open(out: Path, browser_command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "TERM")}
    # No display and no terminal: webbrowser knows no browser here but BROWSER's.
    env["BROWSER"] = browser_command
    return subprocess.run(
        [sys.executable, "-m", "graphserve", "loadtest", "report", str(out), "--open"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _browser_script(path: Path, exit_code: int) -> Path:
    path.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> "{path}.args"\nexit {exit_code}\n')
    path.chmod(0o755)
    return path


def test_report_open_opens_the_page_in_the_browser(tmp_path: Path) -> None:
    out = tmp_path / "run"
    write_fixture_report(out)
    (out / "report.html").unlink()
    script = _browser_script(tmp_path / "browser", 0)

    result = _report_open(out, str(script))

    assert result.returncode == 0, result.stderr
    uri = (out / "report.html").resolve().as_uri()
    assert uri.startswith("file:///")
    assert Path(f"{script}.args").read_text() == uri + "\n"
    assert (out / "report.html").is_file()
    assert f"report: {out / 'report.html'}" in result.stderr
    assert f"opened {uri} in a web browser" in result.stderr


def test_report_open_without_a_browser_fails_saying_where_the_page_is(tmp_path: Path) -> None:
    out = tmp_path / "run"
    write_fixture_report(out)
    script = _browser_script(tmp_path / "browser", 3)  # a browser that cannot start

    result = _report_open(out, str(script))

    uri = (out / "report.html").resolve().as_uri()
    assert result.returncode == 1, result.stderr
    assert Path(f"{script}.args").read_text() == uri + "\n"  # it was tried
    assert f"report: {out / 'report.html'}" in result.stderr
    assert f"error: no web browser could be opened for {uri}" in result.stderr
    assert "BROWSER" in result.stderr
