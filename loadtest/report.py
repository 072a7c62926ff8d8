# The report prints the multiplication sign for ratios and the en dash for ranges and gaps.
# ruff: noqa: RUF001, RUF002
"""The load-test report ("graphserve.loadtest/2"): markdown, self-contained HTML, a terminal table.

    files = write_report(report, Path("out"))   # report.json, report.md, report.html, *.png

`report` is the plain dict that `report.json` holds: title, headline (one sentence per load step,
see `headline`), settings, environment, arms, steps (per-arm results, windows and ratios against
the baseline), calibration, cold_start, slo, files. Markdown, HTML and the terminal table open with
the headline. Markdown
and HTML are rendered from one document model (headings, paragraphs, tables, warnings) built by
`_document`, so both say the same thing. A missing number (an arm with no successful request, an
arm without a metrics endpoint) shows as "–": rendering never fails on a None, and a key the
producer left out reads as None.

matplotlib loads only in `write_report` (through `loadtest.plots`): the renderers need none of it.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import RenderableType

from graphserve.loadtest.labels import (
    NONE,
    arm_order,
    fmt_plain,
    is_number,
    load_label,
    settings,
    steps,
)
from graphserve.loadtest.results import Workers, check_report
from graphserve.loadtest.stats import PERCENTILES

__all__ = [
    "IMAGE_TITLES",
    "arm_order",
    "headline",
    "load_label",
    "render_html",
    "render_markdown",
    "render_table",
    "write_report",
]

Report = Mapping[str, Any]

_PERCENTILE_KEYS = tuple(name for name, _ in PERCENTILES)  # "p50" ... "p99.9"
# Plot file name -> alt text and caption, in display order.
IMAGE_TITLES: dict[str, str] = {
    "latency_cdf.png": "latency CDF",
    "percentiles.png": "latency percentiles against load",
    "throughput.png": "throughput against load",
    "windows.png": "p50 per measurement window over time",
}
_LATE_PCT_WARNING = 1.0


# --- the document model --------------------------------------------------------------------


@dataclass(frozen=True)
class _Heading:
    level: int
    text: str


@dataclass(frozen=True)
class _Paragraph:
    text: str
    tone: str = ""  # "" | "lead" | "pass" | "fail": shown bold (markdown), styled (HTML)


@dataclass(frozen=True)
class _Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]  # right-aligned columns
    row_classes: tuple[str, ...] = ()  # per row "" | "warn" | "fail" (HTML colours)


@dataclass(frozen=True)
class _Warnings:
    items: tuple[str, ...]


_Block = _Heading | _Paragraph | _Table | _Warnings


# --- public API ------------------------------------------------------------------------------


def write_report(
    report: dict[str, Any], out_dir: Path, records: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Write report.json, report.md, report.html and the PNG plots into `out_dir`.

    The latency CDF needs the raw records: `records` when the caller has them already, else
    `out_dir/raw/records.npz`; without either that plot is skipped. Locust's
    CSVs in `out_dir` (`locust*.csv`) are listed. Sets `report["files"]` and `report["headline"]`
    in place and returns the files.
    Raises OSError when a file cannot be written, ValueError when raw/records.npz is malformed,
    and LoadTestError (after writing) when the report does not have loadtest.results' shape.
    """
    from graphserve.loadtest import plots  # matplotlib: only when plots are drawn
    from graphserve.loadtest.analysis import load_records

    out_dir.mkdir(parents=True, exist_ok=True)
    raw_path = out_dir / "raw" / "records.npz"
    if records is None:
        records = load_records(raw_path)
    images: dict[str, bytes] = {}
    if records is not None and (cdf := plots.latency_cdf(records, report)) is not None:
        images["latency_cdf.png"] = cdf
    images["percentiles.png"] = plots.percentiles_vs_load(report)
    images["throughput.png"] = plots.throughput_vs_load(report)
    images["windows.png"] = plots.windows_over_time(report)
    for name, png in images.items():
        (out_dir / name).write_bytes(png)

    files: dict[str, Any] = {
        "json": "report.json",
        "markdown": "report.md",
        "html": "report.html",
        "plots": list(images),
        "locust_csv": sorted(p.name for p in out_dir.glob("locust*.csv")),
        "raw": "raw/records.npz" if records is not None else None,
    }
    report["files"] = files
    report["headline"] = headline(report)
    text = json.dumps(report, indent=2, ensure_ascii=False, default=_json_default)
    (out_dir / "report.json").write_text(text + "\n", encoding="utf-8")
    markdown = render_markdown(report, {name: name for name in images})
    (out_dir / "report.md").write_text(markdown, encoding="utf-8")
    (out_dir / "report.html").write_text(render_html(report, images), encoding="utf-8")
    check_report(json.loads(text))  # after writing: a report that does not fit is still kept
    return files


def render_markdown(report: Report, images: Mapping[str, str] | None = None) -> str:
    """The report as GitHub markdown; `images` maps plot file names to paths relative to it."""
    blocks = _document(report)
    parts = [_markdown_block(b) for b in blocks]
    if images:
        parts.append("## Plots")
        parts += [f"![{_image_title(name)}]({path})" for name, path in images.items()]
    parts += _markdown_files(report)
    return "\n\n".join(parts) + "\n"


def render_html(report: Report, images: Mapping[str, bytes]) -> str:
    """The report as one self-contained HTML page: inline CSS, PNGs (name -> bytes) as data URIs.

    No script, no external URL: the file can be mailed or attached to a ticket as it is.
    """
    title = html.escape(str(report.get("title") or "graphserve load test"))
    body = [_html_block(b) for b in _document(report)]
    if images:
        body.append("<h2>Plots</h2>")
        for name, png in images.items():
            alt = html.escape(_image_title(name))
            data = base64.b64encode(png).decode("ascii")
            body.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{alt}">'
                f"<figcaption>{alt}</figcaption></figure>"
            )
    files = _file_names(report)
    if files:
        body.append(f'<p class="files">Files: {html.escape(", ".join(files))}</p>')
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{title}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(body)
        + "\n</main>\n</body>\n</html>\n"
    )


def render_table(report: Report) -> RenderableType:
    """The terminal summary: one rich Table per step (arms as rows), then its ratio lines."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    mode = settings(report).get("mode")
    baseline = settings(report).get("baseline")
    parts: list[RenderableType] = [Text(str(report.get("title") or ""), style="bold")]
    parts += [Text(sentence, style="bold") for sentence in headline(report)]
    for step in steps(report):
        table = Table(title=load_label(step.get("load"), mode), title_justify="left")
        table.add_column("arm")
        for header in ("req/s", "p50 ms", "p99 ms", "p99.9 ms", "failures"):
            table.add_column(header, justify="right")
        table.add_column("flags")
        for name, arm in _step_arms(report, step):
            latency = arm.get("latency_ms") or {}
            concerns = _flags(arm)
            flags = [*(["baseline"] if name == baseline else []), *concerns]
            table.add_row(
                name,
                _fmt_rps(arm.get("throughput_rps")),
                _fmt_ms(latency.get("p50")),
                _fmt_ms(latency.get("p99")),
                _fmt_ms(latency.get("p99.9")),
                _fmt_count(arm.get("failures")),
                ", ".join(flags),
                style="yellow" if concerns else None,
            )
        parts.append(table)
        for name, ratio in (step.get("ratios") or {}).items():
            metrics = [("p50", "p50"), ("p99", "p99"), ("throughput", "throughput")]
            cells = [f"{label} {_fmt_ratio(ratio.get(key))}" for key, label in metrics]
            parts.append(Text(f"{name}: " + ", ".join(cells)))
    slo = report.get("slo")
    if slo:
        failed = [g for g in slo.get("gates") or [] if not g.get("passed")]
        verdict = "passed" if slo.get("passed") else f"FAILED ({len(failed)} gate(s))"
        parts.append(Text(f"SLO: {verdict}", style="green" if slo.get("passed") else "bold red"))
    return Group(*parts)


def headline(report: Report) -> list[str]:
    """One sentence per load step: how each arm's p50 compares with the baseline's, with the
    95% CI of that ratio, and the throughput ratio. For example "graph answers in 0.084× the
    time of eager at 1 user (p50 ratio, 95% CI 0.081–0.087), with 11.3× the throughput."

    Steps without ratios (a single arm) get no sentence; a ratio that cannot be computed says
    which arm had no successful request; a step with warnings says so.
    """
    mode = settings(report).get("mode")
    sentences = []
    for step in steps(report):
        ratios = step.get("ratios") or {}
        if not ratios:
            continue
        load = load_label(step.get("load"), mode)
        if len(ratios) == 1:
            ((name, ratio),) = ratios.items()
            sentence = _headline_clause(name, ratio, step, f" at {load}")
        else:
            clauses = [_headline_clause(n, r, step, "") for n, r in ratios.items()]
            sentence = f"At {load}, " + "; ".join(clauses)
        if any(_concerns(arm) for _, arm in _step_arms(report, step)):
            sentence += " (read with the warnings below)"
        sentences.append(sentence + ".")
    return sentences


def _headline_clause(name: str, ratio: Mapping[str, Any], step: Mapping[str, Any], at: str) -> str:
    """'graph answers in 0.084× the time of eager{at} (p50 ratio, ...), with 11.3× ...'."""
    arm, _, base = name.partition("/")
    p50 = ratio.get("p50") or {}
    if not is_number(p50.get("value")):
        arms = step.get("arms") or {}
        empty = [n for n in (arm, base) if _p50(arms.get(n)) is None]
        why = f"{' and '.join(empty) or 'an arm'} had no successful request"
        return f"{arm} and {base} cannot be compared{at}: {why}"
    ci = p50.get("ci95")
    detail = "p50 ratio"
    if ci and all(is_number(bound) for bound in ci):
        detail += f", 95% CI {_fmt_interval(ci, _fmt_sig)}"
        if ci[0] <= 1 <= ci[1]:
            detail += ": no clear difference"
    clause = f"{arm} answers in {_fmt_times(p50['value'])} the time of {base}{at} ({detail})"
    throughput = (ratio.get("throughput") or {}).get("value")
    if is_number(throughput):
        clause += f", with {_fmt_times(throughput)} the throughput"
    return clause


def _p50(arm: Mapping[str, Any] | None) -> Any:
    return ((arm or {}).get("latency_ms") or {}).get("p50")


# --- building the document -------------------------------------------------------------------


def _document(report: Report) -> list[_Block]:
    blocks: list[_Block] = [
        _Heading(1, str(report.get("title") or "graphserve load test")),
        *(_Paragraph(sentence, "lead") for sentence in headline(report)),
        _Paragraph(_how_it_was_run(report)),
    ]
    mode = settings(report).get("mode")
    for step in steps(report):
        blocks.append(_Heading(2, load_label(step.get("load"), mode)))
        blocks.append(_step_table(report, step))
        if step.get("ratios"):
            blocks.append(
                _Paragraph(
                    "Ratios, arm / baseline (below 1× is faster for latencies, "
                    "above 1× is more throughput):"
                )
            )
            blocks.append(_ratio_table(step["ratios"]))
    blocks += _cold_start(report) + _calibration(report) + _workers(report) + _slo(report)
    warnings = _warnings(report) + _lost_workers(report)
    if warnings:
        blocks.append(_Warnings(tuple(warnings)))
    return blocks


def _how_it_was_run(report: Report) -> str:
    s, env = settings(report), report.get("environment") or {}
    protocol = s.get("protocol")
    transport = {"grpc": "gRPC", "rest": f"REST ({s.get('rest_format') or 'row'} format)"}
    loads = ", ".join(fmt_plain(x) for x in s.get("loads") or []) or NONE
    if s.get("mode") == "open":
        loop = (
            f"open loop at {loads} req/s ({s.get('arrivals') or 'constant'} arrivals, "
            f"at most {fmt_plain(s.get('max_in_flight'))} requests in flight)"
        )
    else:
        loop = f"closed loop with {loads} concurrent users"
    payload = s.get("payload") or {}
    inputs = "; ".join(
        f"{k} {v.get('dtype')} {v.get('shape')}" for k, v in (payload.get("inputs") or {}).items()
    )
    versions = ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items())
    sentences = [
        f"{transport.get(str(protocol), str(protocol or NONE))}, {loop}, one step per load.",
        f"Arms {', '.join(arm_order(report)) or NONE}; ratios are arm / "
        f"{s.get('baseline') or NONE}.",
        f"Each step: {fmt_plain(s.get('warmup_s'))} s warm-up, then "
        f"{fmt_plain(s.get('window_s'))} s windows ({fmt_plain(s.get('min_windows'))}–"
        f"{fmt_plain(s.get('max_windows'))} per arm) until the last windows agree within "
        f"{fmt_plain(s.get('stability_pct'))} %.",
        f"Model {s.get('model_name') or NONE} ({s.get('signature_name') or NONE}), batch size "
        f"{fmt_plain(s.get('batch_size'))}, payload {payload.get('file') or NONE} from "
        f"{payload.get('source') or NONE}" + (f" ({inputs})" if inputs else "") + ".",
        f"Locust workers: {fmt_plain(s.get('workers'))}, seed {fmt_plain(s.get('seed'))}"
        + (f", at most {s['max_requests']} requests" if s.get("max_requests") else "")
        + ".",
        f"Run {env.get('timestamp') or NONE} on {env.get('hostname') or NONE} "
        f"({fmt_plain(env.get('cpus'))} CPUs, {env.get('platform') or NONE}"
        + (f"; {versions}" if versions else "")
        + ").",
        "Latencies in ms; req/s counts successful measured requests.",
    ]
    return " ".join(sentences)


def _step_table(report: Report, step: Mapping[str, Any]) -> _Table:
    arms = _step_arms(report, step)
    baseline = settings(report).get("baseline")
    with_server = any(arm.get("server") for _, arm in arms)
    with_late = any(arm.get("open_loop") for _, arm in arms)
    headers = [
        "arm",
        "requests",
        "failures",
        "req/s",
        "p50 [95% CI]",
        *_PERCENTILE_KEYS[1:],
        "mean",
        "stable",
        "generator",
    ]
    headers += ["late"] if with_late else []
    if with_server:
        statistic = next((a["server"].get("statistic") for _, a in arms if a.get("server")), None)
        headers.append(f"{statistic or 'mean'}: model / server / client+network")
    rows, classes = [], []
    for name, arm in arms:
        latency = arm.get("latency_ms") or {}
        # An interval around a missing p50 would read as a measurement.
        p50_ci = (arm.get("ci95_ms") or {}).get("p50") if latency.get("p50") is not None else None
        row = [
            f"{name} (baseline)" if name == baseline else name,
            _fmt_count(arm.get("measured_requests")),
            _fmt_count(arm.get("failures")),
            _fmt_rps(arm.get("throughput_rps")),
            _fmt_ms(latency.get("p50"))
            + (f" [{_fmt_interval(p50_ci, _fmt_ms)}]" if p50_ci else ""),
            *(_fmt_ms(latency.get(p)) for p in _PERCENTILE_KEYS[1:]),
            _fmt_ms(latency.get("mean")),
            _fmt_yes_no(arm.get("stable")),
            _generator(arm.get("generator")),
        ]
        if with_late:
            row.append(_fmt_pct((arm.get("open_loop") or {}).get("late_pct")))
        if with_server:
            row.append(_breakdown(arm.get("server")))
        rows.append(tuple(row))
        classes.append("warn" if _flags(arm) else "")
    numeric = tuple(h not in ("arm", "stable", "generator") for h in headers)
    return _Table(tuple(headers), tuple(rows), numeric, tuple(classes))


def _ratio_table(ratios: Mapping[str, Mapping[str, Any]]) -> _Table:
    keys = ("throughput", *_PERCENTILE_KEYS, "mean")
    rows = tuple((name, *(_fmt_ratio(r.get(k)) for k in keys)) for name, r in ratios.items())
    return _Table(("arm / baseline", *keys), rows, (False, *(True for _ in keys)))


def _cold_start(report: Report) -> list[_Block]:
    runs = (report.get("cold_start") or {}).get("runs") or []
    if not runs:
        return []
    headers = (
        "server",
        "warm-up records",
        "ready (s)",
        "first request (ms)",
        "steady p50 (ms)",
        "first / steady",
    )
    rows = tuple(
        (
            str(r.get("server") or NONE),
            _fmt_yes_no(r.get("warmup_records")),
            _fmt_ms(r.get("ready_s")),
            _fmt_ms(r.get("first_request_ms")),
            _fmt_ms(r.get("steady_p50_ms")),
            _fmt_times(r.get("first_over_steady")),
        )
        for r in runs
    )
    return [_Heading(2, "Cold start"), _Table(headers, rows, (False, False, *(True,) * 4))]


def _calibration(report: Report) -> list[_Block]:
    calibration = report.get("calibration") or {}
    if not calibration:
        return []
    mode = settings(report).get("mode")
    rows = tuple(
        (
            load_label(c.get("load"), mode),
            _fmt_rps(c.get("throughput_rps")),
            _fmt_ms(c.get("p50_ms")),
        )
        for c in calibration.get("steps") or []
    )
    note = (
        f"The load generator against the null endpoint {calibration.get('null_endpoint') or NONE}"
        ", which answers at once: the most this machine can drive and measure."
    )
    return [
        _Heading(2, "Calibration"),
        _Paragraph(note),
        _Table(("load", "req/s", "p50 (ms)"), rows, (False, True, True)),
    ]


def _workers(report: Report) -> list[_Block]:
    """The locust workers that generated the load: where, how busy, and whether one was lost."""
    section = _worker_section(report)
    if section is None:
        return []
    rows = tuple(
        (
            node.host or NONE,
            str(node.pid) if node.pid is not None else NONE,
            fmt_plain(node.cpus),
            _fmt_pct(node.cpu_pct.mean),
            _fmt_pct(node.cpu_pct.max),
            _fmt_pct(node.machine_cpu_pct.mean),
            _fmt_pct(node.machine_cpu_pct.max),
            "lost" if node.lost_s is not None else "whole run",
        )
        for node in section.nodes
    )
    where = "joined from elsewhere" if section.mode == "remote" else "started by the comparison"
    note = (
        f"{len(section.nodes)} of {section.expected} locust workers ({where}). CPU is the "
        "worker process's share of one core and its machine's share of all its CPUs, mean and "
        "max over the windows it ran."
    )
    headers = ("host", "pid", "CPUs", "CPU mean", "CPU max", "machine mean", "machine max", "ran")
    numeric = (False, True, True, True, True, True, True, False)
    rows_classes = tuple("warn" if node.lost_s is not None else "" for node in section.nodes)
    return [
        _Heading(2, "Load generator"),
        _Paragraph(note),
        _Table(headers, rows, numeric, rows_classes),
    ]


def _lost_workers(report: Report) -> list[str]:
    section = _worker_section(report)
    if section is None:
        return []
    warnings = []
    for node in section.nodes:
        if node.lost_s is None:
            continue
        at = node.lost_at
        where = f" in {at.arm}'s {at.kind} {at.window + 1} of step {at.step + 1}" if at else ""
        missed = ", ".join(
            f"{w.arm} {w.window + 1} (step {w.step + 1})" for w in node.missed_windows
        )
        warnings.append(
            f"worker {node.host} (pid {node.pid}) was lost {node.lost_s:.1f} s into the run{where};"
            f" its users moved to the other workers. Windows it missed: {missed or NONE}"
        )
    return warnings


def _worker_section(report: Report) -> Workers | None:
    raw = report.get("workers")
    return Workers.model_validate(raw) if raw else None


def _slo(report: Report) -> list[_Block]:
    slo = report.get("slo")
    if not slo:
        return []
    mode = settings(report).get("mode")
    rows, classes = [], []
    for gate in slo.get("gates") or []:
        load = gate.get("load")
        rows.append(
            (
                str(gate.get("expression") or NONE),
                str(gate.get("arm") or "all"),
                load_label(load, mode) if load is not None else "all",
                _fmt_ms(gate.get("value")),
                _fmt_ms(gate.get("threshold")),
                _fmt_check(gate.get("passed")),
            )
        )
        classes.append("" if gate.get("passed") else "fail")
    failures, allowed = slo.get("failures"), slo.get("max_failures")
    failures_ok = failures is not None and (allowed is None or failures <= allowed)
    rows.append(
        (
            "failures ≤ max",
            "all",
            "all",
            _fmt_count(failures),
            _fmt_count(allowed),
            _fmt_check(failures_ok),
        )
    )
    classes.append("" if failures_ok else "fail")
    passed = bool(slo.get("passed"))
    verdict = _Paragraph(
        f"SLO {'passed ✓' if passed else 'failed ✗'}", "pass" if passed else "fail"
    )
    headers = ("gate", "arm", "load", "value", "threshold", "result")
    table = _Table(headers, tuple(rows), (False, False, False, True, True, False), tuple(classes))
    return [_Heading(2, "SLO"), verdict, table]


def _warnings(report: Report) -> list[str]:
    """What a reader must know before trusting a number, collected from the data."""
    mode = settings(report).get("mode")
    return [
        f"{name} at {load_label(step.get('load'), mode)}: {sentence}"
        for step in steps(report)
        for name, arm in _step_arms(report, step)
        for sentence in [*(s for _, s in _concerns(arm)), *_breakdown_notes(arm.get("server"))]
    ]


_PART_NAMES = {
    "model": "model",
    "server": "rest of the server",
    "client_and_network": "client + network",
}


def _breakdown_notes(server: Mapping[str, Any] | None) -> list[str]:
    """Why a part of the breakdown shows as 0: its difference of means came out negative."""
    if not server:
        return []
    statistic = server.get("statistic") or "mean"
    return [
        f"the {_PART_NAMES.get(part, part)} part of the server-side breakdown came out at "
        f"{_fmt_ms(raw)} ms and shows as 0: the {statistic}s it is the difference of cover "
        "different requests (the server times those that end between its scrapes, the client "
        "those that start in a window and succeed)"
        for part, raw in (server.get("clamped_ms") or {}).items()
    ]


def _flags(arm: Mapping[str, Any]) -> list[str]:
    """Short flags for the terminal table; non-empty marks a row to read with care."""
    return [flag for flag, _ in _concerns(arm)]


def _concerns(arm: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(short flag, sentence) for everything that makes one arm's step less trustworthy."""
    out = []
    if arm.get("stable") is False:
        spread = (arm.get("stability") or {}).get("spread_pct") or {}
        detail = ", ".join(f"{k} {_fmt_pct(v)}" for k, v in spread.items())
        out.append(("unstable", "not stable" + (f" (spread: {detail})" if detail else "")))
    generator = arm.get("generator") or {}
    if generator.get("bound"):
        reason = generator.get("reason") or f"CPU {_fmt_pct(generator.get('cpu_pct'))}"
        out.append(("generator-bound", f"the load generator was the bottleneck ({reason})"))
    open_loop = arm.get("open_loop") or {}
    late = open_loop.get("late_pct")
    if is_number(late) and late > _LATE_PCT_WARNING:
        achieved, target = open_loop.get("achieved_rps"), open_loop.get("target_rps")
        out.append(
            (
                f"late {_fmt_pct(late)}",
                f"{_fmt_pct(late)} of requests sent late "
                f"(achieved {_fmt_rps(achieved)} of {_fmt_rps(target)} req/s)",
            )
        )
    if arm.get("failures"):
        errors = sorted((arm.get("errors") or {}).items(), key=lambda e: -e[1])[:3]
        detail = "; ".join(f"{message} ×{count}" for message, count in errors)
        out.append(
            (
                "failures",
                f"{arm['failures']} failed requests" + (f" ({detail})" if detail else ""),
            )
        )
    if (arm.get("latency_ms") or {}).get("p50") is None:
        out.append(("no successes", "no successful measured request"))
    counted, sent = (arm.get("server") or {}).get("requests"), arm.get("requests")
    if counted is not None and counted != sent:
        out.append(
            (
                "server count differs",
                f"the server counted {_fmt_count(counted)} requests, "
                f"the client sent {_fmt_count(sent)}",
            )
        )
    return out


def _generator(generator: Mapping[str, Any] | None) -> str:
    if not generator:
        return NONE
    if generator.get("bound"):
        return f"bound: {generator.get('reason') or 'no reason given'}"
    return "ok"


def _breakdown(server: Mapping[str, Any] | None) -> str:
    """'0.322 / 0.093 / 0.596'; a part clamped at 0 shows its raw value: '0 (raw −13.6)'."""
    parts = (server or {}).get("breakdown_ms") or {}
    if not parts:
        return NONE
    clamped = (server or {}).get("clamped_ms") or {}
    keys = ("model", "server", "client_and_network")
    return " / ".join(
        _fmt_ms(parts.get(k)) + (f" (raw {_fmt_ms(clamped[k])})" if k in clamped else "")
        for k in keys
    )


# --- rendering the document ------------------------------------------------------------------


def _markdown_block(block: _Block) -> str:
    if isinstance(block, _Heading):
        return "#" * block.level + " " + _md_inline(block.text)
    if isinstance(block, _Paragraph):
        text = _md_inline(block.text)
        return f"**{text}**" if block.tone else text
    if isinstance(block, _Warnings):
        return "## Warnings\n\n" + "\n".join(f"- ⚠ {_md_inline(w)}" for w in block.items)
    lines = [
        "| " + " | ".join(_md_inline(h) for h in block.headers) + " |",
        "|" + "|".join("---:" if n else "---" for n in block.numeric) + "|",
    ]
    lines += ["| " + " | ".join(_md_inline(c) for c in row) + " |" for row in block.rows]
    return "\n".join(lines)


def _markdown_files(report: Report) -> list[str]:
    names = _file_names(report)
    return [f"Files: {', '.join(f'[{n}]({n})' for n in names)}"] if names else []


def _md_inline(text: str) -> str:
    # A pipe ends a table cell, a newline ends the table, and GitHub drops what looks like an
    # HTML tag ("<connection refused>"); error messages may hold all three.
    for char in "\\|<":
        text = text.replace(char, "\\" + char)
    return " ".join(text.splitlines())


def _html_block(block: _Block) -> str:
    esc = html.escape
    if isinstance(block, _Heading):
        return f"<h{block.level}>{esc(block.text)}</h{block.level}>"
    if isinstance(block, _Paragraph):
        if block.tone:
            return f'<p class="{block.tone}"><strong>{esc(block.text)}</strong></p>'
        return f"<p>{esc(block.text)}</p>"
    if isinstance(block, _Warnings):
        items = "".join(f"<li>{esc(w)}</li>" for w in block.items)
        return f'<div class="warnings"><h2>Warnings</h2><ul>{items}</ul></div>'

    def cells(tag: str, row: Sequence[str]) -> str:
        return "".join(
            f'<{tag} class="num">{esc(c)}</{tag}>' if n else f"<{tag}>{esc(c)}</{tag}>"
            for c, n in zip(row, block.numeric, strict=True)
        )

    classes = block.row_classes or ("",) * len(block.rows)
    body = "".join(
        (f'<tr class="{cls}">' if cls else "<tr>") + cells("td", row) + "</tr>"
        for row, cls in zip(block.rows, classes, strict=True)
    )
    return (
        f'<div class="scroll"><table><thead><tr>{cells("th", block.headers)}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


_CSS = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328;
       background: #fff; margin: 0; }
main { max-width: 1200px; margin: 0 auto; padding: 1.5rem 2rem 3rem; }
h1 { font-size: 1.6rem; border-bottom: 1px solid #d0d7de; padding-bottom: .3rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: 14px; }
th, td { border: 1px solid #d0d7de; padding: .3rem .6rem; text-align: left; white-space: nowrap; }
th { background: #f6f8fa; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) { background: #fafbfc; }
tr.warn td { background: #fff8e1; }
tr.fail td { background: #ffebe9; color: #b42318; font-weight: 600; }
p.lead { font-size: 1.1rem; }
p.pass { color: #1a7f37; }
p.fail { color: #b42318; }
.warnings { border: 1px solid #e3b341; border-left: 5px solid #d4a72c; background: #fff8e1;
            border-radius: 6px; padding: .2rem 1rem .6rem; margin: 1.5rem 0; }
.warnings h2 { margin-top: .6rem; }
figure { margin: 1.5rem 0; }
img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
figcaption { color: #57606a; font-size: 13px; }
p.files { color: #57606a; font-size: 13px; }
"""


# --- reading the report ----------------------------------------------------------------------


def _step_arms(report: Report, step: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    arms = step.get("arms") or {}
    return [(name, arms[name]) for name in arm_order(report) if name in arms]


def _file_names(report: Report) -> list[str]:
    files = report.get("files") or {}
    names = [files.get("json"), files.get("raw"), *(files.get("locust_csv") or [])]
    return [str(n) for n in names if n]


def _image_title(name: str) -> str:
    return IMAGE_TITLES.get(name, Path(name).stem.replace("_", " "))


def _json_default(value: Any) -> Any:
    # numpy scalars and arrays (np.int64 is not an int) from the statistics code.
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"report value of type {type(value).__name__} is not JSON serialisable")


# --- number formatting -----------------------------------------------------------------------


def _fmt_ms(value: Any) -> str:
    """Three significant digits (0.473, 12.4, 153); whole numbers with separators from 1000."""
    if not is_number(value):
        return NONE
    if value == 0:
        return "0"
    rounded = float(f"{value:.3g}")
    if abs(rounded) >= 1000:
        return f"{value:,.0f}"
    if abs(rounded) >= 100:
        return f"{rounded:.0f}"
    return f"{rounded:#.3g}"


def _fmt_rps(value: Any) -> str:
    if not is_number(value):
        return NONE
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.1f}"


def _fmt_count(value: Any) -> str:
    return f"{int(value):,}" if is_number(value) and float(value).is_integer() else NONE


def _fmt_pct(value: Any) -> str:
    return f"{value:.1f} %" if is_number(value) else NONE


def _fmt_times(value: Any) -> str:
    return f"{value:.3g}×" if is_number(value) else NONE


def _fmt_interval(bounds: Sequence[Any], fmt: Callable[[Any], str]) -> str:
    """'0.44–0.46'; a bound that is missing shows as '–'."""
    low, high = [*bounds, None, None][:2]
    return f"{fmt(low)}–{fmt(high)}"


def _fmt_sig(value: Any) -> str:
    return f"{value:.3g}" if is_number(value) else NONE


def _fmt_ratio(ratio: Mapping[str, Any] | None) -> str:
    """'0.45× [0.44–0.46]', or '2.1×' without a confidence interval."""
    if not ratio or not is_number(ratio.get("value")):
        return NONE
    ci = ratio.get("ci95")
    interval = f" [{_fmt_interval(ci, _fmt_sig)}]" if ci else ""
    return _fmt_times(ratio["value"]) + interval


def _fmt_yes_no(value: Any) -> str:
    return NONE if value is None else ("yes" if value else "no")


def _fmt_check(passed: Any) -> str:
    return "✓" if passed else "✗"
