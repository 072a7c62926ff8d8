# The report prints the multiplication sign for ratios and the en dash for ranges and gaps.
# ruff: noqa: RUF001, RUF002
"""The load-test report: report.json, markdown, self-contained HTML, a terminal table.

    files = write_report(report, Path("out"))   # report.json, report.md, report.html, *.png

`report` is the typed run (loadtest.results.Report): title, headline (one sentence per load
step, see `headline`), settings, environment, arms, steps (per-arm results, windows and ratios
against the baseline), calibration, cold_start, workers, slo, files. Markdown, HTML and the
terminal table open with the headline. Markdown and HTML are rendered from one document model
(headings, paragraphs, tables, warnings) built by `_document`, so both say the same thing. A
number that was not measured (an arm with no successful request, an arm without a metrics
endpoint) is None in the model and shows as "–".

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

from graphserve.core.execution import EXECUTION_FIELD, EXECUTIONS, RUNNER_FIELD, arm_warning
from graphserve.loadtest.results.labels import NONE, fmt_plain, is_number, load_label
from graphserve.loadtest.results.run import (
    ArmSearch,
    ArmStep,
    FindMax,
    GeneratorLoad,
    Ratio,
    RatioValue,
    Report,
    ReportFiles,
    ServerBreakdown,
    Step,
    check_report,
)
from graphserve.loadtest.results.slo import NOT_JUDGED, every_request_failed
from graphserve.loadtest.results.slo import parse_gate as _parse_gate
from graphserve.loadtest.results.stats import PERCENTILES

__all__ = [
    "IMAGE_TITLES",
    "REPORT_CSS",
    "Block",
    "Heading",
    "Paragraph",
    "TableBlock",
    "WarningsBlock",
    "fmt_check",
    "fmt_count",
    "fmt_ms",
    "fmt_rps",
    "headline",
    "html_block",
    "html_figure",
    "html_page",
    "load_label",
    "markdown_block",
    "opening",
    "render_html",
    "render_markdown",
    "render_table",
    "slo_section",
    "slo_verdict",
    "write_report",
]

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
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str
    tone: str = ""  # "" | "lead" | "pass" | "fail": shown bold (markdown), styled (HTML)


@dataclass(frozen=True)
class TableBlock:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]  # right-aligned columns
    row_classes: tuple[str, ...] = ()  # per row "" | "warn" | "fail" (HTML colours)


@dataclass(frozen=True)
class WarningsBlock:
    items: tuple[str, ...]


Block = Heading | Paragraph | TableBlock | WarningsBlock


# --- public API ------------------------------------------------------------------------------


def write_report(
    report: Report, out_dir: Path, records: Mapping[str, Any] | None = None
) -> ReportFiles:
    """Write report.json, report.md, report.html and the PNG plots into `out_dir`.

    The latency CDF needs the raw records: `records` when the caller has them already, else
    `out_dir/raw/records.npz`; without either that plot is skipped. Locust's CSVs in `out_dir`
    (`locust*.csv`) are listed. Sets `report.files` and `report.headline` and returns the files.
    Raises OSError when a file cannot be written, ValueError when raw/records.npz is malformed,
    and LoadTestError (after writing) when report.json does not read back as the same shape.
    """
    from graphserve.loadtest.report import plots  # matplotlib: only when plots are drawn
    from graphserve.loadtest.report.analysis import load_records

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

    report.files = ReportFiles(
        json="report.json",
        markdown="report.md",
        html="report.html",
        plots=list(images),
        locust_csv=sorted(p.name for p in out_dir.glob("locust*.csv")),
        raw="raw/records.npz" if records is not None else None,
    )
    report.headline = headline(report)
    text = json.dumps(report.to_json(), indent=2, ensure_ascii=False)
    (out_dir / "report.json").write_text(text + "\n", encoding="utf-8")
    markdown = render_markdown(report, {name: name for name in images})
    (out_dir / "report.md").write_text(markdown, encoding="utf-8")
    (out_dir / "report.html").write_text(render_html(report, images), encoding="utf-8")
    check_report(json.loads(text))  # after writing: a report that does not fit is still kept
    return report.files


def render_markdown(report: Report, images: Mapping[str, str] | None = None) -> str:
    """The report as GitHub markdown; `images` maps plot file names to paths relative to it."""
    blocks = _document(report)
    parts = [markdown_block(b) for b in blocks]
    if images:
        parts.append("## Plots")
        parts += [f"![{_image_title(name)}]({path})" for name, path in images.items()]
    parts += _markdown_files(report)
    return "\n\n".join(parts) + "\n"


def render_html(report: Report, images: Mapping[str, bytes]) -> str:
    """The report as one self-contained HTML page: inline CSS, PNGs (name -> bytes) as data URIs.

    No script, no external URL: the file can be mailed or attached to a ticket as it is.
    """
    body = [html_block(b) for b in _document(report)]
    if images:
        body.append("<h2>Plots</h2>")
        body += [html_figure(png, _image_title(name)) for name, png in images.items()]
    files = report.files.names() if report.files else []
    if files:
        body.append(f'<p class="files">Files: {html.escape(", ".join(files))}</p>')
    return html_page(report.title or "graphserve load test", body)


def opening(title: str, lead: str, warnings: Sequence[str]) -> list[Block]:
    """The top of a rollout's or a many-models report: its title, the lead, the warnings."""
    blocks: list[Block] = [Heading(1, title), Paragraph(lead, "lead")]
    return blocks + ([WarningsBlock(tuple(warnings))] if warnings else [])


def slo_verdict(passed: bool) -> RenderableType:
    """The terminal's last line: "SLO: passed" in green or "SLO: FAILED" in red."""
    from rich.text import Text

    return Text(f"SLO: {'passed' if passed else 'FAILED'}", style="green" if passed else "bold red")


def slo_section(
    passed: bool, judged: str, gates: Sequence[tuple[str, str, str, str, bool]]
) -> list[Block]:
    """The SLO section of a rollout's or a many-models report: the verdict, then one row per
    gate (expression, what it judged, value, threshold, passed), a missed one in red."""
    rows = tuple((e, what, v, t, fmt_check(ok)) for e, what, v, t, ok in gates)
    classes = tuple("" if gate[4] else "fail" for gate in gates)
    verdict = Paragraph(f"SLO {'passed ✓' if passed else 'failed ✗'}", "pass" if passed else "fail")
    headers = ("gate", judged, "value", "threshold", "result")
    numeric = (False, False, True, True, False)
    return [Heading(2, "SLO"), verdict, TableBlock(headers, rows, numeric, classes)]


def html_page(title: str, body: Sequence[str]) -> str:
    """One self-contained page of the reports' look: `body` (HTML) in <main>, inline CSS, no
    script and no external URL."""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>{REPORT_CSS}</style>\n</head>\n<body>\n"
        "<main>\n" + "\n".join(body) + "\n</main>\n</body>\n</html>\n"
    )


def html_figure(png: bytes, alt: str, caption: str | None = None) -> str:
    """A PNG as a data URI in a <figure>, captioned (by default with its alt text)."""
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'
        f"<figcaption>{html.escape(caption or alt)}</figcaption></figure>"
    )


def render_table(report: Report) -> RenderableType:
    """The terminal summary: one rich Table per step (arms as rows), then its ratio lines."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    mode, baseline = report.settings.mode, report.settings.baseline
    parts: list[RenderableType] = [Text(report.title, style="bold")]
    parts += [Text(sentence, style="bold") for sentence in headline(report)]
    for step in report.steps:
        table = Table(title=load_label(step.load, mode), title_justify="left")
        table.add_column("arm")
        for header in ("req/s", "p50 ms", "p99 ms", "p99.9 ms", "failures"):
            table.add_column(header, justify="right")
        table.add_column("flags")
        for name, arm in report.step_arms(step):
            concerns = _flags(arm)
            flags = [*(["baseline"] if name == baseline else []), *concerns]
            table.add_row(
                name,
                fmt_rps(arm.throughput_rps),
                fmt_ms(arm.latency_ms.p50),
                fmt_ms(arm.latency_ms.p99),
                fmt_ms(arm.latency_ms.p99_9),
                fmt_count(arm.failures),
                ", ".join(flags),
                style="yellow" if concerns else None,
            )
        parts.append(table)
        for name, ratio in step.ratios.items():
            cells = [f"{key} {_fmt_ratio(ratio.of(key))}" for key in ("p50", "p99", "throughput")]
            parts.append(Text(f"{name}: " + ", ".join(cells)))
    slo = report.slo
    if slo:
        failed = [g for g in slo.gates if not g.passed]
        verdict = "passed" if slo.passed else f"FAILED ({len(failed)} gate(s))"
        if every_request_failed(report):
            verdict = NOT_JUDGED
        parts.append(Text(f"SLO: {verdict}", style="green" if slo.passed else "bold red"))
    return Group(*parts)


def headline(report: Report) -> list[str]:
    """One sentence per load step: how each arm's p50 compares with the baseline's, with the
    95% CI of that ratio, and the throughput ratio. For example "graph answers in 0.084× the
    time of eager at 1 user (p50 ratio, 95% CI 0.081–0.087), with 11.3× the throughput."

    Steps without ratios (a single arm) get no sentence; a ratio that cannot be computed says
    which arm had no successful request; a step with warnings says so.
    """
    mode = report.settings.mode
    if report.find_max is not None:
        return _find_max_headline(report, report.find_max)
    sentences = []
    for step in report.steps:
        if not step.ratios:
            continue
        load = load_label(step.load, mode)
        if len(step.ratios) == 1:
            ((name, ratio),) = step.ratios.items()
            sentence = _headline_clause(name, ratio, step, f" at {load}")
        else:
            clauses = [_headline_clause(n, r, step, "") for n, r in step.ratios.items()]
            sentence = f"At {load}, " + "; ".join(clauses)
        concerns = any(_concerns(arm) for _, arm in report.step_arms(step))
        if concerns or any(arm_warning(n, *_said(report, n)) for n in step.arms):
            sentence += " (read with the warnings below)"
        sentences.append(sentence + ".")
    return sentences


def _headline_clause(name: str, ratio: Ratio, step: Step, at: str) -> str:
    """'graph answers in 0.084× the time of eager{at} (p50 ratio, ...), with 11.3× ...'."""
    arm, _, base = name.partition("/")
    p50 = ratio.p50.value
    if not is_number(p50):
        empty = [n for n in (arm, base) if n in step.arms and step.arms[n].latency_ms.p50 is None]
        why = f"{' and '.join(empty) or 'an arm'} had no successful request"
        return f"{arm} and {base} cannot be compared{at}: {why}"
    ci = ratio.p50.ci95
    detail = "p50 ratio"
    if ci is not None:
        detail += f", 95% CI {_fmt_interval(ci, _fmt_sig)}"
        if ci[0] <= 1 <= ci[1]:
            detail += ": no clear difference"
    clause = f"{arm} answers in {_fmt_times(p50)} the time of {base}{at} ({detail})"
    if is_number(ratio.throughput.value):
        clause += f", with {_fmt_times(ratio.throughput.value)} the throughput"
    return clause


def _find_max_headline(report: Report, search: FindMax) -> list[str]:
    """'graph holds 3.2× the load of eager at p99 < 20 ms (64 users against 20 users).'"""
    budget = _budget(search.slo)
    baseline = report.settings.baseline
    base = search.arms.get(baseline)
    sentences = []
    for name, arm in search.arms.items():
        if name == baseline or base is None:
            continue
        if arm.max_load is None or base.max_load is None:
            empty = [n for n, a in ((name, arm), (baseline, base)) if a.max_load is None]
            lowest = min(p.load for a in (arm, base) for p in a.probes)
            held = ", ".join(
                f"{n} {_held_load(a, search.mode)}"
                for n, a in ((name, arm), (baseline, base))
                if a.max_load is not None
            )
            sentences.append(
                f"{' and '.join(empty)} held none of the loads tried at {budget} (down to "
                f"{load_label(lowest, search.mode)})" + (f"; {held}" if held else "") + "."
            )
            continue
        capped = (arm.limit == "max load", base.limit == "max load")
        if all(capped):
            sentences.append(
                f"{name} and {baseline} both hold {_held_load(arm, search.mode)} at {budget}."
            )
            continue
        bound = {(True, False): "at least ", (False, True): "at most "}.get(capped, "")
        sentences.append(
            f"{name} holds {bound}{_fmt_times(arm.max_load / base.max_load)} the load of "
            f"{baseline} at {budget} ({_held_load(arm, search.mode)} against "
            f"{_held_load(base, search.mode)})."
        )
    if not sentences:  # one arm: what it holds
        sentences = [
            f"{name} holds {_held_load(arm, search.mode)} at {budget}."
            for name, arm in search.arms.items()
        ]
    return sentences


def _held_load(arm: ArmSearch, mode: str) -> str:
    """'64 users' / 'at least 64 users (the --max-load)' / 'nothing'."""
    if arm.max_load is None:
        return "nothing"
    held = load_label(arm.max_load, mode)
    if arm.limit == "max load":
        return f"at least {held} (the --max-load)"
    return held


def _budget(expressions: Sequence[str]) -> str:
    """'p99 < 20 ms' from 'p99<20ms': the gates as a reader says them."""
    said = []
    for expression in expressions:
        gate = _parse_gate(expression)
        unit = " req/s" if gate.metric == "throughput" else " ms"
        arm = f"{gate.arm}'s " if gate.arm else ""
        said.append(f"{arm}{gate.metric} {gate.op} {fmt_plain(gate.threshold)}{unit}")
    return " and ".join(said)


# --- building the document -------------------------------------------------------------------


def _document(report: Report) -> list[Block]:
    blocks: list[Block] = [
        Heading(1, report.title or "graphserve load test"),
        *(Paragraph(sentence, "lead") for sentence in headline(report)),
        Paragraph(_how_it_was_run(report)),
    ]
    blocks += _find_max(report)
    for step in report.steps:
        blocks.append(Heading(2, _step_title(report, step)))
        blocks.append(_step_table(report, step))
        if step.ratios:
            blocks.append(
                Paragraph(
                    "Ratios, arm / baseline (below 1× is faster for latencies, "
                    "above 1× is more throughput):"
                )
            )
            blocks.append(_ratio_table(step.ratios))
    blocks += _answers(report)
    blocks += _cold_start(report) + _calibration(report) + _workers(report) + _slo(report)
    warnings = _warnings(report) + _lost_workers(report)
    if warnings:
        blocks.append(WarningsBlock(tuple(warnings)))
    return blocks


def _step_title(report: Report, step: Step) -> str:
    """'4 users'; a find-max probe: 'Probe 3: eager at 4 users'."""
    load = load_label(step.load, report.settings.mode)
    if report.find_max is None:
        return load
    return f"Probe {step.index + 1}: {' and '.join(step.arms)} at {load}"


def _find_max(report: Report) -> list[Block]:
    """The searches: what each arm held, and every probe with its verdict."""
    search = report.find_max
    if search is None:
        return []
    mode = search.mode
    budget = _budget(search.slo)
    limits = {
        "slo": "bracketed by the SLO",
        "max load": "reached --max-load",
        "probes": "ran out of probes",
        "nothing held": "nothing held",
    }
    summary = tuple(
        (
            name,
            load_label(arm.max_load, mode) if arm.max_load is not None else NONE,
            load_label(arm.first_miss, mode) if arm.first_miss is not None else NONE,
            str(len(arm.probes)),
            limits.get(arm.limit, arm.limit),
        )
        for name, arm in search.arms.items()
    )
    probes = sorted(
        ((p, name) for name, arm in search.arms.items() for p in arm.probes),
        key=lambda item: item[0].step,
    )
    first = _parse_gate(search.slo[0]) if search.slo else None
    unit = "req/s" if first and first.metric == "throughput" else "ms"
    metric = f"{first.metric} ({unit})" if first else "value"
    rows = tuple(
        (
            str(p.step + 1),
            name,
            load_label(p.load, mode),
            "held ✓" if p.held else "missed ✗",
            fmt_ms(p.value),
            fmt_rps(p.throughput_rps),
            "; ".join(filter(None, [p.why, "generator-bound" if p.generator_bound else ""])),
        )
        for p, name in probes
    )
    note = (
        f"The most load each arm holds at {budget}: probes of one arm at a time, the arms in "
        f"turn, from {load_label(search.start, mode)}, doubling while it holds, then halving the "
        f"gap between the most held and the least missed until they are within "
        f"{fmt_plain(search.precision_pct)} % (at most {search.max_probes} probes an arm"
        + (f", up to {load_label(search.max_load, mode)}" if search.max_load else "")
        + ")."
    )
    return [
        Heading(2, f"Most load within {budget}"),
        Paragraph(note),
        TableBlock(
            ("arm", "most load held", "least missed", "probes", "search"),
            summary,
            (False, True, True, True, False),
        ),
        TableBlock(
            ("probe", "arm", "load", "result", metric, "req/s", "why"),
            rows,
            (True, False, True, False, True, True, False),
            tuple("" if p.held else "warn" for p, _ in probes),
        ),
    ]


def _how_it_was_run(report: Report) -> str:
    s, env = report.settings, report.environment
    transport = {"grpc": "gRPC", "rest": f"REST ({s.rest_format} format)"}
    loads = ", ".join(fmt_plain(x) for x in s.loads) or NONE
    if s.mode == "open":
        loop = (
            f"open loop at {loads} req/s ({s.arrivals} arrivals, "
            f"at most {fmt_plain(s.max_in_flight)} requests in flight)"
        )
    else:
        loop = f"closed loop with {loads} concurrent users"
    inputs = "; ".join(f"{k} {v.dtype} {v.shape}" for k, v in s.payload.inputs.items())
    traffic = s.payload.traffic
    if traffic is not None:
        shapes = ", ".join(f"{shape} ×{n}" for shape, n in list(traffic.shapes.items())[:8])
        more = len(traffic.shapes) - 8
        inputs = (
            f"{fmt_count(traffic.requests)} predict requests of model {traffic.model} (of "
            f"{fmt_count(traffic.records)} records), sent in order, cycling: {shapes}"
            + (f" and {more} more shapes" if more > 0 else "")
        )
    versions = ", ".join(f"{k} {v}" for k, v in env.versions.items())
    workers = s.workers + s.expect_workers
    sentences = [
        f"{transport.get(s.protocol, s.protocol)}, {loop}, one step per load.",
        f"Arms {', '.join(_arm_words(report, n) for n in report.arm_order()) or NONE}; "
        f"ratios are arm / {s.baseline}.",
        f"Each step: {fmt_plain(s.warmup_s)} s warm-up, then "
        f"{fmt_plain(s.window_s)} s windows ({fmt_plain(s.min_windows)}–"
        f"{fmt_plain(s.max_windows)} per arm) until the last windows agree within "
        f"{fmt_plain(s.stability_pct)} %.",
        f"Model {s.model_name} ({s.signature_name}), "
        + ("" if traffic else f"batch size {fmt_plain(s.batch_size)}, ")
        + f"payload {s.payload.file}: {s.payload.source}"
        + (f"; {inputs}" if inputs else "")
        + ".",
        f"Locust workers: {fmt_plain(workers)}, seed {fmt_plain(s.seed)}"
        + (f", at most {s.max_requests} requests" if s.max_requests else "")
        + ".",
        f"Run {env.timestamp} on {env.hostname} ({fmt_plain(env.cpus)} CPUs, {env.platform}"
        + (f"; {versions}" if versions else "")
        + ").",
        "Latencies in ms; req/s counts successful measured requests.",
    ]
    return " ".join(sentences)


def _step_table(report: Report, step: Step) -> TableBlock:
    arms = report.step_arms(step)
    baseline = report.settings.baseline
    servers = [arm.server for _, arm in arms if arm.server is not None]
    with_late = any(arm.open_loop for _, arm in arms)
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
    if servers:
        headers.append(f"{servers[0].statistic}: model / server / client+network")
    rows, classes = [], []
    for name, arm in arms:
        latency = arm.latency_ms
        # An interval around a missing p50 would read as a measurement.
        p50_ci = arm.ci95_ms.p50 if latency.p50 is not None else None
        row = [
            f"{name} (baseline)" if name == baseline else name,
            fmt_count(arm.measured_requests),
            fmt_count(arm.failures),
            fmt_rps(arm.throughput_rps),
            fmt_ms(latency.p50) + (f" [{_fmt_interval(p50_ci, fmt_ms)}]" if p50_ci else ""),
            *(fmt_ms(latency.of(p)) for p in _PERCENTILE_KEYS[1:]),
            fmt_ms(latency.mean),
            _fmt_yes_no(arm.stable),
            _generator(arm.generator),
        ]
        if with_late:
            row.append(_fmt_pct(arm.open_loop.late_pct if arm.open_loop else None))
        if servers:
            row.append(_breakdown(arm.server))
        rows.append(tuple(row))
        classes.append("warn" if _flags(arm) else "")
    numeric = tuple(h not in ("arm", "stable", "generator") for h in headers)
    return TableBlock(tuple(headers), tuple(rows), numeric, tuple(classes))


def _ratio_table(ratios: Mapping[str, Ratio]) -> TableBlock:
    keys = ("throughput", *_PERCENTILE_KEYS, "mean")
    rows = tuple((name, *(_fmt_ratio(r.of(k)) for k in keys)) for name, r in ratios.items())
    return TableBlock(("arm / baseline", *keys), rows, (False, *(True for _ in keys)))


def _answers(report: Report) -> list[Block]:
    """`--traffic`: each arm's answers against the log's and the baseline's, and the requests
    that disagree most, with the command that sends each again."""
    a = report.answers
    if a is None:
        return []
    answered = ", ".join(f"{name} {fmt_count(n)}" for name, n in a.answered.items())
    said = (
        f"Each arm's first answer to each of the {fmt_count(a.requests)} requests of the "
        f"traffic file (answered: {answered}), judged with the exporter's parity rule and "
        f"{a.tolerances_from}'s tolerances against the answer the log holds and the "
        f"{report.settings.baseline} arm's."
    )
    rows = []
    for arm, agreements in a.agreements.items():
        for g in agreements:
            changed = [o["top_class_changed"] for o in g["outputs"]
                       if o.get("top_class_changed") is not None]  # fmt: skip
            counted = sum(o["rows"] for o in g["outputs"] if o.get("top_class_changed") is not None)
            worst_abs = max((o["max_abs_error"] for o in g["outputs"]), default=None)
            worst_rel = max((o["max_rel_error"] for o in g["outputs"]), default=None)
            rows.append((
                arm, g["reference"], f"{fmt_count(g['mismatched'])} of {fmt_count(g['compared'])}",
                _fmt_sig(worst_abs), _fmt_sig(worst_rel),
                f"{100 * sum(changed) / counted:.2f} %" if counted else "-",
            ))  # fmt: skip
    blocks: list[Block] = [Heading(2, "Answers"), Paragraph(said)]
    if rows:
        blocks.append(TableBlock(
            ("arm", "against", "mismatched", "max abs error", "max rel error", "top class changed"),
            tuple(rows), (False, False, True, True, True, True),
        ))  # fmt: skip
    else:
        blocks.append(Paragraph("No answer could be compared: no request had two answers."))
    unread = ", ".join(f"{name} {fmt_count(n)}" for name, n in a.unread.items())
    if unread:
        blocks.append(Paragraph(f"Answers that could not be read as predict answers: {unread}."))
    for w in a.worst:
        why = w["why"] or f"max abs error {_fmt_sig(w['max_abs_error'])}"
        text = (
            f"Record {w['record']} ({w['shape']}), {w['arm']} against {w['reference']}, "
            f"output {w['output']}: {why}. Saved as {', '.join(w['files'])}; sent again by "
            f"`{w['command']}`" + (f", or `{w['curl']}`" if w.get("curl") else "") + "."
        )
        blocks.append(Paragraph(text))
    return blocks


def _cold_start(report: Report) -> list[Block]:
    runs = report.cold_start.runs if report.cold_start else []
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
            r.server,
            _fmt_yes_no(r.warmup_records),
            fmt_ms(r.ready_s),
            fmt_ms(r.first_request_ms),
            fmt_ms(r.steady_p50_ms),
            _fmt_times(r.first_over_steady),
        )
        for r in runs
    )
    return [Heading(2, "Cold start"), TableBlock(headers, rows, (False, False, *(True,) * 4))]


def _calibration(report: Report) -> list[Block]:
    calibration = report.calibration
    if calibration is None:
        return []
    rows = tuple(
        (
            load_label(c.load, report.settings.mode),
            fmt_rps(c.throughput_rps),
            fmt_ms(c.p50_ms),
        )
        for c in calibration.steps
    )
    note = (
        f"The load generator against the null endpoint {calibration.null_endpoint}, which "
        "answers at once: the most this machine can drive and measure."
    )
    return [
        Heading(2, "Calibration"),
        Paragraph(note),
        TableBlock(("load", "req/s", "p50 (ms)"), rows, (False, True, True)),
    ]


def _workers(report: Report) -> list[Block]:
    """The locust workers that generated the load: where, how busy, and whether one was lost."""
    section = report.workers
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
        Heading(2, "Load generator"),
        Paragraph(note),
        TableBlock(headers, rows, numeric, rows_classes),
    ]


def _lost_workers(report: Report) -> list[str]:
    warnings = []
    for node in report.workers.nodes if report.workers else []:
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


def _slo(report: Report) -> list[Block]:
    slo = report.slo
    if slo is None:
        return []
    rows, classes = [], []
    for gate in slo.gates:
        plain = gate.step < 0  # an answers gate: a count or a share, once over the run
        rows.append(
            (
                gate.expression,
                gate.arm or "all",
                load_label(gate.load, report.settings.mode) if gate.load is not None else "all",
                _fmt_sig(gate.value) if plain else fmt_ms(gate.value),
                _fmt_sig(gate.threshold) if plain else fmt_ms(gate.threshold),
                fmt_check(gate.passed),
            )
        )
        classes.append("" if gate.passed else "fail")
    allowed = slo.max_failures
    failures_ok = allowed is None or slo.failures <= allowed
    rows.append(
        (
            "failures ≤ max",
            "all",
            "all",
            fmt_count(slo.failures),
            fmt_count(allowed),
            fmt_check(failures_ok),
        )
    )
    classes.append("" if failures_ok else "fail")
    shown = "passed ✓" if slo.passed else "failed ✗"
    if every_request_failed(report):
        shown = f"{NOT_JUDGED} ✗"
    verdict = Paragraph(f"SLO {shown}", "pass" if slo.passed else "fail")
    headers = ("gate", "arm", "load", "value", "threshold", "result")
    table = TableBlock(
        headers, tuple(rows), (False, False, False, True, True, False), tuple(classes)
    )
    return [Heading(2, "SLO"), verdict, table]


def _warnings(report: Report) -> list[str]:
    """What a reader must know before trusting a number, collected from the data: first an
    arm that does not run as its name says (an "eager" server that runs graphs)."""
    return _arm_warnings(report) + [
        f"{name} at {load_label(step.load, report.settings.mode)}: {sentence}"
        for step in report.steps
        for name, arm in report.step_arms(step)
        for sentence in [*(s for _, s in _concerns(arm)), *_breakdown_notes(arm.server)]
    ]


def _said(report: Report, name: str) -> tuple[str, str]:
    """What arm `name`'s server said of how it runs (runner, execution); empty where not."""
    info = report.arms.get(name)
    extra = (info.model_extra or {}) if info is not None else {}
    return str(extra.get(RUNNER_FIELD) or ""), str(extra.get(EXECUTION_FIELD) or "")


def _arm_warnings(report: Report) -> list[str]:
    found = (arm_warning(name, *_said(report, name)) for name in report.arm_order())
    return [w for w in found if w]


def _arm_words(report: Report, name: str) -> str:
    """The arm and what its server said runs it: "eager (eager Python, op by op)"."""
    words = EXECUTIONS.get(_said(report, name)[1])
    return f"{name} ({words})" if words else name


_PART_NAMES = {
    "model": "model",
    "server": "rest of the server",
    "client_and_network": "client + network",
}


def _breakdown_notes(server: ServerBreakdown | None) -> list[str]:
    """Why a part of the breakdown shows as 0: its difference of means came out negative."""
    if server is None:
        return []
    return [
        f"the {_PART_NAMES.get(part, part)} part of the server-side breakdown came out at "
        f"{fmt_ms(raw)} ms and shows as 0: the {server.statistic}s it is the difference of "
        "cover different requests (the server times those that end between its scrapes, the "
        "client those that start in a window and succeed)"
        for part, raw in server.clamped_ms.items()
    ]


def _flags(arm: ArmStep) -> list[str]:
    """Short flags for the terminal table; non-empty marks a row to read with care."""
    return [flag for flag, _ in _concerns(arm)]


def _concerns(arm: ArmStep) -> list[tuple[str, str]]:
    """(short flag, sentence) for everything that makes one arm's step less trustworthy."""
    out = []
    if not arm.stable:
        spread = arm.stability.spread_pct or {}
        detail = ", ".join(f"{k} {_fmt_pct(v)}" for k, v in spread.items())
        out.append(("unstable", "not stable" + (f" (spread: {detail})" if detail else "")))
    if arm.generator.bound:
        reason = arm.generator.reason or f"CPU {_fmt_pct(arm.generator.cpu_pct)}"
        out.append(("generator-bound", f"the load generator was the bottleneck ({reason})"))
    open_loop = arm.open_loop
    late = open_loop.late_pct if open_loop else None
    if open_loop and is_number(late) and late > _LATE_PCT_WARNING:
        out.append(
            (
                f"late {_fmt_pct(late)}",
                f"{_fmt_pct(late)} of requests sent late (achieved "
                f"{fmt_rps(open_loop.achieved_rps)} of {fmt_rps(open_loop.target_rps)} req/s)",
            )
        )
    if arm.failures:
        errors = sorted(arm.errors.items(), key=lambda e: -e[1])[:3]
        detail = "; ".join(f"{message} ×{count}" for message, count in errors)
        out.append(
            ("failures", f"{arm.failures} failed requests" + (f" ({detail})" if detail else ""))
        )
    if arm.latency_ms.p50 is None:
        out.append(("no successes", "no successful measured request"))
    counted = arm.server.requests if arm.server else None
    if counted is not None and counted != arm.requests:
        out.append(
            (
                "server count differs",
                f"the server counted {fmt_count(counted)} requests, "
                f"the client sent {fmt_count(arm.requests)}",
            )
        )
    return out


def _generator(generator: GeneratorLoad) -> str:
    cost = generator.cpu_us_per_request
    spent = f" ({cost:.0f} µs CPU/request)" if cost is not None else ""
    if generator.bound:
        return f"bound: {generator.reason or 'no reason given'}{spent}"
    return f"ok{spent}"


def _breakdown(server: ServerBreakdown | None) -> str:
    """'0.322 / 0.093 / 0.596'; a part clamped at 0 shows its raw value: '0 (raw −13.6)'."""
    if server is None or not server.breakdown_ms:
        return NONE
    keys = ("model", "server", "client_and_network")
    return " / ".join(
        fmt_ms(server.breakdown_ms.get(k))
        + (f" (raw {fmt_ms(server.clamped_ms[k])})" if k in server.clamped_ms else "")
        for k in keys
    )


# --- rendering the document ------------------------------------------------------------------


def markdown_block(block: Block) -> str:
    if isinstance(block, Heading):
        return "#" * block.level + " " + _md_inline(block.text)
    if isinstance(block, Paragraph):
        text = _md_inline(block.text)
        return f"**{text}**" if block.tone else text
    if isinstance(block, WarningsBlock):
        return "## Warnings\n\n" + "\n".join(f"- ⚠ {_md_inline(w)}" for w in block.items)
    lines = [
        "| " + " | ".join(_md_inline(h) for h in block.headers) + " |",
        "|" + "|".join("---:" if n else "---" for n in block.numeric) + "|",
    ]
    lines += ["| " + " | ".join(_md_inline(c) for c in row) + " |" for row in block.rows]
    return "\n".join(lines)


def _markdown_files(report: Report) -> list[str]:
    names = report.files.names() if report.files else []
    return [f"Files: {', '.join(f'[{n}]({n})' for n in names)}"] if names else []


def _md_inline(text: str) -> str:
    # A pipe ends a table cell, a newline ends the table, and GitHub drops what looks like an
    # HTML tag ("<connection refused>"); error messages may hold all three.
    for char in "\\|<":
        text = text.replace(char, "\\" + char)
    return " ".join(text.splitlines())


def html_block(block: Block) -> str:
    esc = html.escape
    if isinstance(block, Heading):
        return f"<h{block.level}>{esc(block.text)}</h{block.level}>"
    if isinstance(block, Paragraph):
        if block.tone:
            return f'<p class="{block.tone}"><strong>{esc(block.text)}</strong></p>'
        return f"<p>{esc(block.text)}</p>"
    if isinstance(block, WarningsBlock):
        items = "".join(f"<li>{esc(w)}</li>" for w in block.items)
        return f'<div class="warnings"><h2>Warnings</h2><ul>{items}</ul></div>'

    def cells(tag: str, row: Sequence[str]) -> str:
        return "".join(
            _number_cell(tag, c) if n else f"<{tag}>{esc(c)}</{tag}>"
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


def _number_cell(tag: str, text: str) -> str:
    """A right-aligned cell. A data cell of several numbers ("0.236 / 0.142 / 0 (raw -13.6)",
    the server breakdown) keeps each whole in a span, so a line breaks only between them."""
    values = text.split(" / ")
    if tag == "th" or len(values) == 1:
        return f'<{tag} class="num">{html.escape(text)}</{tag}>'
    spans = " / ".join(f"<span>{html.escape(v)}</span>" for v in values)
    return f'<{tag} class="num values">{spans}</{tag}>'


# The tables fit a 1280 px wide screen without scrolling sideways (tests/test_report_browser.py
# measures it in Chromium): headers and text cells wrap at spaces; a number never wraps (Chromium
# would break a 95% CI after its en dash), and a cell of several numbers breaks only between
# them. Prose breaks even a long word (a URL in an error message) rather than overflow.
# .scroll still scrolls a table on a screen too narrow for it.
REPORT_CSS = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328;
       background: #fff; margin: 0; }
main { max-width: 1200px; margin: 0 auto; padding: 1.5rem 2rem 3rem; }
h1 { font-size: 1.6rem; border-bottom: 1px solid #d0d7de; padding-bottom: .3rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; }
h1, h2, p, li { overflow-wrap: anywhere; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: 13px; line-height: 1.4; }
th, td { border: 1px solid #d0d7de; padding: .3rem .45rem; text-align: left; }
th { background: #f6f8fa; font-weight: 600; vertical-align: bottom; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num { white-space: nowrap; }
td.values { white-space: normal; }
td.values span { white-space: nowrap; }
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


def _image_title(name: str) -> str:
    return IMAGE_TITLES.get(name, Path(name).stem.replace("_", " "))


# --- number formatting -----------------------------------------------------------------------


def fmt_ms(value: Any) -> str:
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


def fmt_rps(value: Any) -> str:
    if not is_number(value):
        return NONE
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.1f}"


def fmt_count(value: Any) -> str:
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


def _fmt_ratio(ratio: RatioValue) -> str:
    """'0.45× [0.44–0.46]', or '2.1×' without a confidence interval."""
    if not is_number(ratio.value):
        return NONE
    interval = f" [{_fmt_interval(ratio.ci95, _fmt_sig)}]" if ratio.ci95 else ""
    return _fmt_times(ratio.value) + interval


def _fmt_yes_no(value: Any) -> str:
    return NONE if value is None else ("yes" if value else "no")


def fmt_check(passed: Any) -> str:
    return "✓" if passed else "✗"
