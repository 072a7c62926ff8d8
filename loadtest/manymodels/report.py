"""A many-models run's report: many.json, many.md, many.html (self-contained), many_models.csv
(every model's row) and the plots (many_memory.png, many_latency.png).

    write_many(report, Path("out"))

Markdown and HTML are rendered from the comparison report's document model
(loadtest/report/render.py) with its styles; they show the first `report.top` models one by one
and the rest as one row, and the CSV has them all. matplotlib loads only in `write_many`.
"""

from __future__ import annotations

import csv
import html
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

from graphserve.loadtest.report.render import (
    Block,
    Heading,
    Paragraph,
    TableBlock,
    fmt_count,
    fmt_ms,
    fmt_rps,
    html_block,
    html_figure,
    html_page,
    markdown_block,
    opening,
    slo_section,
    slo_verdict,
)
from graphserve.loadtest.results.labels import NONE, fmt_plain
from graphserve.loadtest.results.many import ManyReport, ModelRow

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["render_html", "render_markdown", "render_table", "write_many"]

_PLOTS = {
    "many_latency.png": "cold and warm latency per second, and the requests",
    "many_memory.png": "the server's memory: RSS, resident bytes and versions, from its scrapes",
}
_RAW_FILES = ("raw/records.npz", "raw/scrapes.jsonl", "locust.log")
_MODEL_HEADERS = ("rank", "model", "weight", "requests", "failures", "cold", "warm p50 ms",
                  "warm p99 ms", "cold p50 ms", "cold p99 ms", "loads", "evictions")  # fmt: skip


def write_many(report: ManyReport, out_dir: Path) -> list[str]:
    """Write many.json, many.md, many.html, many_models.csv and the plots into `out_dir`; set
    and return report.files. Raises OSError when a file cannot be written."""
    from graphserve.loadtest.report.plots import many_latency, many_memory

    images = {"many_latency.png": many_latency(report)}
    if report.memory:
        images["many_memory.png"] = many_memory(report)
    for name, png in images.items():
        (out_dir / name).write_bytes(png)
    (out_dir / "many_models.csv").write_text(models_csv(report), encoding="utf-8")
    written = ("many.json", "many.md", "many.html", "many_models.csv", *images)
    payloads = [p.file for p in report.settings.payloads]
    report.files = [*written, *payloads, *(n for n in _RAW_FILES if (out_dir / n).exists())]
    text = json.dumps(report.to_json(), indent=2, ensure_ascii=False)
    (out_dir / "many.json").write_text(text + "\n", encoding="utf-8")
    (out_dir / "many.md").write_text(render_markdown(report, list(images)), encoding="utf-8")
    (out_dir / "many.html").write_text(render_html(report, images), encoding="utf-8")
    return report.files


def render_markdown(report: ManyReport, images: list[str]) -> str:
    parts = [markdown_block(b) for b in _document(report)]
    if images:
        parts.append("## Plots")
        parts += [f"![{_PLOTS[name]}]({name})" for name in images]
    parts.append("Files: " + ", ".join(f"[{n}]({n})" for n in report.files))
    return "\n\n".join(parts) + "\n"


def render_html(report: ManyReport, images: dict[str, bytes]) -> str:
    body = [html_block(b) for b in _document(report)]
    if images:
        body.append("<h2>Plots</h2>")
        body += [html_figure(png, _PLOTS[name]) for name, png in images.items()]
    body.append(f'<p class="files">Files: {html.escape(", ".join(report.files))}</p>')
    return html_page(report.title, body)


def models_csv(report: ManyReport) -> str:
    """Every model's row, most requested first."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(list(ModelRow.model_fields))
    for row in report.models:
        writer.writerow(["" if v is None else v for v in row.model_dump().values()])
    return out.getvalue()


def render_table(report: ManyReport) -> RenderableType:
    """The terminal summary: the lead, warm against cold, the most requested models, the SLO."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[RenderableType] = [Text(report.title, style="bold"), Text(_lead(report))]
    classes = _classes(report)
    table = Table()
    for header, numeric in zip(classes.headers, classes.numeric, strict=True):
        table.add_column(header, justify="right" if numeric else "left")
    for row in classes.rows:
        table.add_row(*row)
    parts.append(table)
    models = Table(title="the most requested models", title_justify="left")
    for header in ("model", "requests", "cold", "warm p99 ms", "cold p99 ms"):
        models.add_column(header, justify="left" if header == "model" else "right")
    for r in report.models[:10]:
        models.add_row(r.name, fmt_count(r.requests), fmt_count(r.cold), fmt_ms(r.warm_p99_ms),
                       fmt_ms(r.cold_p99_ms), style="red" if r.failures else None)  # fmt: skip
    parts.append(models)
    if report.slo is not None:
        parts.append(slo_verdict(report.slo.passed))
    return Group(*parts)


# --- the document ------------------------------------------------------------------------------


def _document(report: ManyReport) -> list[Block]:
    blocks = opening(report.title, _lead(report), _warnings(report)) + _slo(report)
    blocks += [Heading(2, "Warm and cold requests"), _classes(report)]
    blocks += [Heading(2, "The server's counters"), *_server(report)]
    shown = min(report.top, len(report.models))
    title = f"Models: the {shown} most requested" + (", then the rest" if report.tail else "")
    blocks += [Heading(2, title), _models(report, report.top)]
    notes = ["A weight is the model's share of the requests asked for."]
    if report.models and report.models[0].loads is None:
        notes.append(f"Loads and evictions: {NONE} where the server does not report them.")
    if report.tail is not None:
        notes.append("Every model's row is in many.json and many_models.csv.")
    blocks.append(Paragraph(" ".join(notes)))
    if report.errors:
        rows = tuple((status, fmt_count(n)) for status, n in report.errors.items())
        blocks += [
            Heading(2, "Failed requests by status"),
            TableBlock(("status", "requests"), rows, (False, True)),
        ]
    blocks += [Heading(2, "How it was run"), Paragraph(_how(report))]
    return blocks


def _lead(report: ManyReport) -> str:
    t, lat, server = report.totals, report.latency_ms, report.server
    sentences = [
        f"{fmt_count(t.requests)} requests to {fmt_count(t.models_requested)} of "
        f"{fmt_count(report.settings.models)} models: {fmt_count(t.cold)} cold "
        f"({fmt_count(t.models_cold)} models), hit ratio {_ratio(t.hit_ratio)}, "
        f"{fmt_count(t.failures)} failed, {fmt_rps(t.throughput_rps)} req/s answered.",
        f"Warm p50 / p99 {fmt_ms(lat['warm'].p50)} / {fmt_ms(lat['warm'].p99)} ms; cold "
        f"{fmt_ms(lat['cold'].p50)} / {fmt_ms(lat['cold'].p99)} ms.",
    ]
    if server is not None and server.loads_ok is not None:
        evictions = sum(server.evictions.values()) if server.evictions is not None else None
        sentences.append(
            f"The server loaded {fmt_count(server.loads_ok)} versions "
            f"({fmt_count(server.loads_failed)} failed) and evicted {fmt_count(evictions)}."
        )
    return " ".join(sentences)


def _warnings(report: ManyReport) -> list[str]:
    said = []
    t, server = report.totals, report.server
    if t.failures:
        said.append(f"{fmt_count(t.failures)} of {fmt_count(t.requests)} requests failed")
    if report.settings.metrics_url is None:
        said.append(
            "no metrics URL (a gRPC target needs --rest-port or --metrics-url): the server's "
            "loads, evictions and memory are not in this report"
        )
    elif server is None:
        said.append(f"{report.settings.metrics_url} did not answer: no server counters")
    elif server.loads_ok is None:
        said.append(
            "the server reports no loads on demand (graphserve_model_loads): it loaded every "
            "model at start, or does not count them"
        )
    if server is not None and server.cold_requests is not None and server.cold_requests != t.cold:
        said.append(
            f"the server counted {fmt_count(server.cold_requests)} waits for a load, the clients "
            f"saw {fmt_count(t.cold)} requests marked cold: a request whose model was evicted "
            "again before it ran waits (and counts) again, and a failed one carries no mark"
        )
    took = sorted(s.scrape_ms for s in report.memory if s.scrape_ms is not None)
    period_ms = report.settings.scrape_every_s * 1000
    if took and took[len(took) // 2] > 0.05 * period_ms:
        said.append(
            f"a scrape of the metrics took the server {took[len(took) // 2]:,.0f} ms (median), "
            f"{took[len(took) // 2] / period_ms:.0%} of the time between scrapes: warm latencies "
            "that spike at each scrape are the scrapes' (raise --scrape-every)"
        )
    s = report.settings
    sending_s = min(t.duration_s, s.duration_s or t.duration_s)
    if s.rate is not None and sending_s and t.requests < 0.9 * s.rate * sending_s:
        said.append(
            f"{fmt_count(t.requests)} requests went out of the {s.rate * sending_s:,.0f} "
            f"that {fmt_plain(s.rate)} req/s asks for in {sending_s:.3g} s: all "
            f"{s.users} users were busy (a cold request holds its user while the model loads); "
            "raise --users"
        )
    unused = report.settings.models - t.models_requested
    if unused > 0:
        said.append(f"{fmt_count(unused)} models got no request (a longer run reaches more)")
    if any(not p.source.startswith("SavedModel") for p in report.settings.payloads):
        said.append(
            "some signatures were read from the server's metadata, which may have loaded those "
            "models before the load began"
        )
    return said


def _slo(report: ManyReport) -> list[Block]:
    slo = report.slo
    if slo is None:
        return []
    rows = [
        (g.expression, g.requests, _gate_value(g.expression, g.value),
         _gate_value(g.expression, g.threshold), g.passed)
        for g in slo.gates
    ]  # fmt: skip
    return slo_section(slo.passed, "requests", rows)


def _gate_value(expression: str, value: float | None) -> str:
    if value is None:
        return NONE
    if "ratio" in expression:
        return _ratio(value)
    if "errors" in expression:
        return fmt_count(value)
    if "throughput" in expression or "rps" in expression:
        return fmt_rps(value)
    return fmt_ms(value)


def _classes(report: ManyReport) -> TableBlock:
    counts = {"all": report.totals.answered, "warm": report.totals.warm}
    counts["cold"] = counts["all"] - counts["warm"]
    rows = tuple(
        (name, fmt_count(counts[name]), *(fmt_ms(p.of(k)) for k in ("p50", "p90", "p99", "max")))
        for name, p in report.latency_ms.items()
    )
    wait = report.load_wait_ms
    rows += (
        ("cold: the load wait the server marked", fmt_count(report.totals.cold),
         *(fmt_ms(wait.of(k)) for k in ("p50", "p90", "p99", "max"))),
    )  # fmt: skip
    headers = ("answered", "requests", "p50 ms", "p90 ms", "p99 ms", "max ms")
    return TableBlock(headers, rows, (False, *(True,) * 5))


def _server(report: ManyReport) -> list[Block]:
    server = report.server
    if server is None:
        return [Paragraph("Not reported: no metrics endpoint answered.")]
    evictions = server.evictions
    by_reason = ", ".join(f"{r} {fmt_count(n)}" for r, n in evictions.items()) if evictions else ""
    rows = (
        ("versions loaded", _reported(server.loads_ok)),
        ("loads failed", _reported(server.loads_failed)),
        ("evictions", _reported(None if evictions is None else sum(evictions.values()))
         + (f" ({by_reason})" if by_reason else "")),
        ("cold requests (the server's count)", _reported(server.cold_requests)),
        ("process RSS, highest", _mb(server.rss_bytes_max)),
        ("resident versions' bytes, highest", _mb(server.resident_bytes_max)),
        ("resident versions, most", _reported(server.resident_versions_max)),
    )  # fmt: skip
    return [
        Paragraph("Over the run (last scrape minus the first); highest of the scrapes."),
        TableBlock(("", "value"), rows, (False, True)),
    ]


def _models(report: ManyReport, top: int) -> TableBlock:
    shown = [*report.models[:top], *([report.tail] if report.tail and top >= report.top else [])]
    rows = tuple(
        (NONE if r.rank is None else str(r.rank), r.name, f"{r.weight:.2%}", fmt_count(r.requests),
         fmt_count(r.failures), fmt_count(r.cold), fmt_ms(r.warm_p50_ms), fmt_ms(r.warm_p99_ms),
         fmt_ms(r.cold_p50_ms), fmt_ms(r.cold_p99_ms), fmt_count(r.loads), fmt_count(r.evictions))
        for r in shown
    )  # fmt: skip
    classes = tuple("fail" if r.failures else "" for r in shown)
    return TableBlock(_MODEL_HEADERS, rows, (True, False, *(True,) * 10), classes)


def _how(report: ManyReport) -> str:
    s, env = report.settings, report.environment
    if s.zipf_s is not None:
        popularity = f"Zipf s={fmt_plain(s.zipf_s)} over the models in the order of {s.models_from}"
    else:
        popularity = f"the weights of {s.weights_file}"
    load = (
        f"open loop at {fmt_plain(s.rate)} req/s from {s.users} users"
        if s.mode == "open"
        else f"closed loop with {s.users} users"
    )
    bound = f"{fmt_plain(s.duration_s)} s" + (
        f" or {fmt_count(s.max_requests)} requests" if s.max_requests else ""
    )
    payloads = "; ".join(
        f"{p.models:,} models: {p.source}"
        + (
            f", a traffic file's {p.traffic_requests:,} requests that fit it, cycling ("
            + ", ".join(f"{shape} ×{n}" for shape, n in list(p.traffic_shapes.items())[:6])
            + ")"
            if p.traffic_requests and p.traffic_shapes
            else ""
        )
        for p in s.payloads
    )
    protocol = "gRPC Predict" if s.protocol == "grpc" else "REST :predict"
    return (
        f"{protocol} to {s.target}, {s.models:,} models chosen by {popularity} (seed {s.seed}), "
        f"{load}, for {bound}; batch size {s.batch_size}, signature {s.signature_name}, one "
        f"payload per signature ({payloads}). A request is cold when the server marked it "
        "(x-graphserve-cold-load), warm when it was answered without the mark; the hit ratio is "
        f"warm / requests. Latency {s.latency}. Metrics: "
        f"{s.metrics_url or 'none'}, every {fmt_plain(s.scrape_every_s)} s. Run "
        f"{env.timestamp} on {env.hostname} ({fmt_plain(env.cpus)} CPUs)."
    )


def _ratio(value: float | None) -> str:
    return NONE if value is None else f"{value:.1%}"


def _reported(value: float | None) -> str:
    return "not reported" if value is None else fmt_count(value)


def _mb(value: float | None) -> str:
    return "not reported" if value is None else f"{value / 1e6:,.1f} MB"
