# The report prints the en dash for ranges and the arrow for the swap.
# ruff: noqa: RUF001
"""A rollout's report: rollout.json, rollout.md, rollout.html (self-contained) and rollout.png.

    report = build_report(spec, settings, records, moments, gates, warmup)
    write_rollout(report, Path("out"))

Markdown and HTML are rendered from the comparison report's document model
(loadtest/report/render.py: headings, paragraphs, tables, warnings) with its styles, so both
reports look and read alike.
matplotlib loads only in `write_rollout`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from graphserve.loadtest.results.labels import NONE, fmt_plain, load_label
from graphserve.loadtest.results.rollout import (
    ROLLOUT_SCHEMA,
    RolloutAnswers,
    RolloutGate,
    RolloutReport,
    RolloutSettings,
    RolloutSlo,
)
from graphserve.loadtest.rollouts.analysis import (
    Moments,
    check_gates,
    errors_by_status,
    first_requests,
    status_changes,
    swap_section,
    timeline,
    windows,
)

if TYPE_CHECKING:
    from rich.console import RenderableType

    from graphserve.loadtest.results.slo import Gate
    from graphserve.loadtest.rollouts.spec import RolloutSpec

__all__ = ["build_report", "render_markdown", "render_table", "write_rollout"]

_FILES = ("rollout.json", "rollout.md", "rollout.html", "rollout.png", "payload.npz")
_RAW_FILES = ("raw/records.npz", "events.jsonl", "locust.log")


def build_report(
    spec: RolloutSpec,
    settings: RolloutSettings,
    records: Mapping[str, Any],
    moments: Moments,
    gates: Sequence[Gate],
    warmup: tuple[bool | None, str | None],
    answers: Mapping[tuple[int, int], bytes] | None = None,
) -> RolloutReport:
    """The report of one rollout from its records and the moments the controller saw; with
    `answers` (under traffic: each version's first answer to each record), the new version's
    answers judged against the old one's."""
    from graphserve.loadtest.comparison.run import environment

    end = moments.load_end or moments.t0
    open_loop = settings.mode == "open"
    stats = windows(records, moments, end, open_loop)
    new = moments.new_version
    judged = (
        _answers(answers, records, moments.old_version, new, _new_manifest(spec))
        if answers is not None
        else None
    )
    answer_gates = [g for g in gates if g.metric.startswith("answers.")]
    slo = check_gates([g for g in gates if g not in answer_gates], stats)
    if answer_gates:
        rows = [_answer_gate(g, judged) for g in answer_gates]
        kept = slo.gates if slo is not None else []
        slo = RolloutSlo(gates=[*kept, *rows], passed=all(r.passed for r in [*kept, *rows]))
    old, arrow = f"v{moments.old_version}", f"v{new}" if new is not None else "no new version"
    return RolloutReport(
        schema=ROLLOUT_SCHEMA,
        title=(
            f"{settings.model_name}: {old} → {arrow} under "
            f"{load_label(settings.load, settings.mode)}"
        ),
        settings=settings,
        environment=environment(),
        swap=swap_section(records, moments, completed=moments.swap_end is not None),
        statuses=status_changes(moments),
        windows=stats,
        errors=errors_by_status(records["code"]),
        timeline=timeline(records, moments.t0, end, open_loop),
        new_version=(
            first_requests(records, new, *warmup, spec.first_requests, spec.steady_requests)
            if new is not None
            else None
        ),
        slo=slo,
        files=[],
        answers=judged,
    )


def _new_manifest(spec: Any) -> dict[str, Any] | None:
    """The manifest of the version the rollout pushed (None: none, or pushed from the base)."""
    from graphserve.core.manifest import read_manifest

    if spec.new_version is None:
        return None
    try:
        return read_manifest(spec.new_version)
    except (OSError, ValueError):
        return None


def _answers(
    answers: Mapping[tuple[int, int], bytes],
    records: Mapping[str, Any],
    old: int,
    new: int | None,
    manifest: Mapping[str, Any] | None = None,
) -> RolloutAnswers:
    """The new version's first answer to each record against the old one's, within the
    tolerances the new version was exported with (its manifest's; the defaults without)."""
    from graphserve.loadtest.results.answers import agreement, grpc_answer, manifest_tolerances

    tolerances, _ = manifest_tolerances(manifest)

    sent = sorted({int(r) for r in records.get("record", []) if r >= 0})
    newer = -1 if new is None else new  # no version -1 answered: nothing compared
    pairs = [
        (
            grpc_answer("predict", answers[(r, newer)]) if (r, newer) in answers else None,
            grpc_answer("predict", answers[(r, old)]) if (r, old) in answers else None,
        )
        for r in sent
    ]
    found, worst = agreement(f"v{old}", pairs, tolerances)
    worst.sort(key=lambda pair: -pair[1].excess)
    return RolloutAnswers(
        old_version=old,
        new_version=new if new is not None else -1,
        records=len(sent),
        compared=found.compared,
        mismatched=found.mismatched,
        top_class_changed_share=found.top_class_changed_share,
        outputs=[o.to_json() for o in found.outputs],
        worst=[
            {
                "record": sent[i],
                "output": d.output,
                "max_abs_error": d.max_abs_error,
                "allowed_abs_error": d.allowed_abs_error,
                "why": d.why,
            }
            for i, d in worst[:5]
        ],
        tolerances={k: list(v) for k, v in sorted(tolerances.items())},
    )


def _answer_gate(gate: Gate, judged: RolloutAnswers | None) -> RolloutGate:
    from graphserve.loadtest.results.answers import Agreement, answers_value
    from graphserve.loadtest.results.slo import passes

    found = (
        [Agreement.from_json({"reference": f"v{judged.old_version}", **judged.model_dump()})]
        if judged is not None
        else []
    )
    value = answers_value(gate.metric, found)
    return RolloutGate(
        expression=gate.expression,
        window="answers",
        value=value,
        threshold=gate.threshold,
        passed=passes(gate, value),
    )


def write_rollout(report: RolloutReport, out_dir: Path) -> list[str]:
    """Write rollout.json, rollout.md, rollout.html and rollout.png into `out_dir`; set and
    return report.files. Raises OSError when a file cannot be written."""
    from graphserve.loadtest.report.plots import rollout_timeline

    png = rollout_timeline(report)
    (out_dir / "rollout.png").write_bytes(png)
    written = ("rollout.json", "rollout.md", "rollout.html")  # below, after the list is made
    report.files = [n for n in (*_FILES, *_RAW_FILES) if n in written or (out_dir / n).exists()]
    text = json.dumps(report.to_json(), indent=2, ensure_ascii=False)
    (out_dir / "rollout.json").write_text(text + "\n", encoding="utf-8")
    (out_dir / "rollout.md").write_text(render_markdown(report), encoding="utf-8")
    (out_dir / "rollout.html").write_text(render_html(report, png), encoding="utf-8")
    return report.files


def render_markdown(report: RolloutReport) -> str:
    parts = [markdown_block(b) for b in _document(report)]
    parts += ["## Timeline", "![timeline of the rollout](rollout.png)"]
    parts.append("Files: " + ", ".join(f"[{n}]({n})" for n in report.files))
    return "\n\n".join(parts) + "\n"


def render_html(report: RolloutReport, png: bytes) -> str:
    """One self-contained page: inline CSS, the timeline as a data URI, no script."""
    body = [html_block(b) for b in _document(report)]
    caption = "per second: p50 and p99, versions that answered, failed requests; the swap shaded"
    body += [
        "<h2>Timeline</h2>",
        html_figure(png, "timeline of the rollout", caption),
        f'<p class="files">Files: {html.escape(", ".join(report.files))}</p>',
    ]
    return html_page(report.title, body)


def render_table(report: RolloutReport) -> RenderableType:
    """The terminal summary: the lead sentence, the windows, the first requests, the verdict."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title="windows", title_justify="left")
    for header in ("window", "span s", "requests", "errors", "req/s", "p50 ms", "p99 ms"):
        table.add_column(header, justify="left" if header == "window" else "right")
    table.add_column("versions")
    for w in report.windows:
        table.add_row(
            w.name, _span(w.start_s, w.end_s), fmt_count(w.requests), fmt_count(w.errors),
            fmt_rps(w.throughput_rps), fmt_ms(w.latency_ms.p50), fmt_ms(w.latency_ms.p99),
            _versions(w.versions), style="red" if w.errors else None,
        )  # fmt: skip
    parts: list[RenderableType] = [Text(report.title, style="bold"), Text(_lead(report)), table]
    if report.new_version is not None:
        parts.append(Text(_first_sentence(report)))
    if report.slo is not None:
        parts.append(slo_verdict(report.slo.passed))
    return Group(*parts)


# --- the document ------------------------------------------------------------------------------


def _document(report: RolloutReport) -> list[Block]:
    blocks = opening(report.title, _lead(report), _warnings(report)) + _slo(report)
    blocks += [Heading(2, "The swap"), _moments(report)]
    if report.statuses:
        blocks += [Paragraph("Version states as GetModelStatus reported them:"), _states(report)]
    blocks += [Heading(2, "Before, during and after"), _windows(report)]
    blocks += [Heading(2, "Errors by status"), *_errors(report)]
    blocks += _first(report)
    blocks += _answers_blocks(report)
    blocks += [Heading(2, "How it was run"), Paragraph(_how(report))]
    return blocks


def _answers_blocks(report: RolloutReport) -> list[Block]:
    a = report.answers
    if a is None:
        return []
    title = f"Answers: v{a.new_version} against v{a.old_version}"
    if not a.compared:
        said = (
            f"No record of the {fmt_count(a.records)} sent was answered by both versions, so "
            "no answer could be compared."
        )
        return [Heading(2, title), Paragraph(said)]
    share = a.top_class_changed_share
    said = (
        f"{fmt_count(a.mismatched)} of the {fmt_count(a.compared)} records both versions "
        f"answered (of {fmt_count(a.records)} sent) differ past the tolerance the new "
        "version was exported with (the defaults where its manifest names none; the exporter's "
        "parity rule)"
        + (f"; the top class changed in {100 * share:.2f} % of the rows" if share is not None
           else "")
        + "."
    )  # fmt: skip
    rows = tuple(
        (str(o["output"]), str(o["dtype"]), f"{o['mismatched']} of {o['compared']}",
         f"{o['max_abs_error']:.3g}", f"{o['max_rel_error']:.3g}")
        for o in a.outputs
    )  # fmt: skip
    table = TableBlock(
        ("output", "dtype", "mismatched", "max abs error", "max rel error"),
        rows,
        (False, False, True, True, True),
    )
    blocks: list[Block] = [Heading(2, title), Paragraph(said), table]
    if a.worst:
        worst = "; ".join(
            f"record {w['record']} ({w['output']}: {w['why'] or format(w['max_abs_error'], '.3g')})"
            for w in a.worst
        )
        blocks.append(Paragraph(f"The records that differ most: {worst}."))
    return blocks


def _lead(report: RolloutReport) -> str:
    swap, run = report.swap, report.window("run")
    sentences = []
    if swap.completed:
        sentences.append(
            f"v{swap.new_version} was AVAILABLE {_s(swap.time_to_available_s)} after the swap "
            f"began and v{swap.old_version} unloaded {_s(swap.old_unloaded_after_s)} after it "
            f"(both AVAILABLE for {_s(swap.both_available_s)}; answers from both for "
            f"{_s(swap.both_answered_s)})."
        )
    else:
        sentences.append(f"The swap did not complete: {swap.note}")
    if run is not None:
        sentences.append(
            f"{fmt_count(run.errors)} of {fmt_count(run.requests)} requests failed"
            + (f" ({_statuses(run.errors_by_status)})" if run.errors else "")
            + "."
        )
    p99 = [report.window(n) for n in ("before", "during", "after")]
    cells = " / ".join(fmt_ms(w.latency_ms.p99) if w else NONE for w in p99)
    sentences.append(f"p99 before / during / after: {cells} ms.")
    return " ".join(sentences)


def _first_sentence(report: RolloutReport) -> str:
    first = report.new_version
    assert first is not None
    warm = {True: "with warm-up records", False: "without warm-up records", None: "(warm-up ?)"}
    return (
        f"v{first.version} {warm[first.has_warmup]}: first request "
        f"{fmt_ms(first.first_request_ms)} ms, p50 of its first {len(first.first_ms)} "
        f"{fmt_ms(first.first_p50_ms)} ms (max "
        f"{fmt_ms(first.first_max_ms)}), steady p50 {fmt_ms(first.steady_p50_ms)} ms over its "
        f"last {first.steady_requests}."
    )


def _warnings(report: RolloutReport) -> list[str]:
    swap, said = report.swap, []
    if swap.note:
        said.append(swap.note)
    if report.new_version is not None and report.new_version.count == 0:
        said.append(f"v{swap.new_version} answered no request during the run")
    return said


def _slo(report: RolloutReport) -> list[Block]:
    slo = report.slo
    if slo is None:
        return []
    rows = [
        (g.expression, g.window, _value(g.expression, g.value), _value(g.expression, g.threshold),
         g.passed)
        for g in slo.gates
    ]  # fmt: skip
    return slo_section(slo.passed, "window", rows)


def _moments(report: RolloutReport) -> TableBlock:
    swap = report.swap
    pushed = [
        ("push started (copy into a temporary name)", swap.push_started_s),
        (f"v{swap.new_version} renamed into place", swap.pushed_s),
    ]
    rows = [
        *(pushed if swap.push_started_s is not None else []),
        ("swap began", swap.swap_start_s),
        (f"v{swap.new_version} listed by GetModelStatus", swap.new_listed_s),
        (f"v{swap.new_version} AVAILABLE", swap.new_available_s),
        (f"v{swap.old_version} unloaded (END or gone)", swap.old_unloaded_s),
        ("swap ended", swap.swap_end_s),
        ("load ended", swap.load_end_s),
    ]
    start = swap.swap_start_s
    cells = tuple(
        (what, _fmt_s(at), _fmt_s(at - start) if at is not None and start is not None else NONE)
        for what, at in rows
    )
    return TableBlock(("moment", "at s", "since the swap began s"), cells, (False, True, True))


def _states(report: RolloutReport) -> TableBlock:
    rows = tuple(
        (_fmt_s(c.at_s), "server" if c.version is None else f"v{c.version}", c.state)
        for c in report.statuses
    )
    return TableBlock(("at s", "version", "state"), rows, (True, False, False))


def _windows(report: RolloutReport) -> TableBlock:
    headers = ("window", "span s", "requests", "answered", "errors", "req/s", "p50 ms",
               "p99 ms", "p99.9 ms", "max ms", "answered by")  # fmt: skip
    rows, classes = [], []
    for w in report.windows:
        rows.append((
            w.name, _span(w.start_s, w.end_s), fmt_count(w.requests), fmt_count(w.answered),
            fmt_count(w.errors), fmt_rps(w.throughput_rps), fmt_ms(w.latency_ms.p50),
            fmt_ms(w.latency_ms.p99), fmt_ms(w.latency_ms.p99_9), fmt_ms(w.latency_ms.max),
            _versions(w.versions),
        ))  # fmt: skip
        classes.append("fail" if w.errors else "")
    numeric = (False, False, *(True,) * 8, False)
    return TableBlock(headers, tuple(rows), numeric, tuple(classes))


def _errors(report: RolloutReport) -> list[Block]:
    if not report.errors:
        return [Paragraph("No request failed.")]
    names = [w.name for w in report.windows if w.name != "run"]
    rows = tuple(
        (status, *(fmt_count(w.errors_by_status.get(status, 0)) for w in report.windows[1:]),
         fmt_count(count))
        for status, count in report.errors.items()
    )  # fmt: skip
    headers = ("status", *names, "whole run")
    return [TableBlock(headers, rows, (False, *(True,) * (len(names) + 1)))]


def _first(report: RolloutReport) -> list[Block]:
    first = report.new_version
    if first is None:
        return []
    if first.has_warmup is None:
        warm = "Whether its directory holds warm-up records is unknown (it could not be read)."
    else:
        warm = (
            f"Its directory {'has' if first.has_warmup else 'has no'} warm-up records "
            f"(assets.extra/tf_serving_warmup_requests), which the server replays before the "
            "version takes traffic"
            + ("." if first.has_warmup else ": its first requests pay the first-call cost.")
        )
    rows = (
        ("first request", fmt_ms(first.first_request_ms)),
        (f"p50 of the first {len(first.first_ms)}", fmt_ms(first.first_p50_ms)),
        (f"max of the first {len(first.first_ms)}", fmt_ms(first.first_max_ms)),
        (f"steady p50 (its last {first.steady_requests})", fmt_ms(first.steady_p50_ms)),
        ("first request / steady p50", f"{first.first_over_steady:.3g}×"
         if first.first_over_steady is not None else NONE),
    )  # fmt: skip
    firsts = ", ".join(fmt_ms(x) for x in first.first_ms) or NONE
    return [
        Heading(2, f"v{first.version}'s first requests against its steady state"),
        Paragraph(
            f"v{first.version} answered {fmt_count(first.count)} requests. {warm} "
            "Latencies from the send, in ms."
        ),
        TableBlock(("", "ms"), rows, (False, True)),
        Paragraph(f"Its first answers, in the order they were sent: {firsts}."),
    ]


def _how(report: RolloutReport) -> str:
    s, env = report.settings, report.environment
    if s.mode == "open":
        load = f"open loop at {fmt_plain(s.load)} req/s from {s.max_in_flight} threads"
    else:
        load = f"closed loop with {fmt_plain(s.load)} users"
    push = (
        "waited for a version someone else pushed (--push-existing)"
        if s.push_existing
        else f"copied {s.new_version_dir} into {s.model_base_path} as the next version "
        "(a temporary name, then renamed into place)"
    )
    return (
        f"gRPC Predict to {s.address}, model {s.model_name} ({s.signature_name}), batch size "
        f"{s.batch_size}, a fixed request (seed {s.seed}) built from the server's metadata; "
        f"{load}. After {fmt_plain(s.before_s)} s the controller {push}, asked GetModelStatus "
        f"every {fmt_plain(s.poll_s * 1000)} ms, and kept the load {fmt_plain(s.after_s)} s "
        f"after the swap ended (timeout {fmt_plain(s.timeout_s)} s). Windows hold the requests "
        f"sent in them; latency {s.latency}. Run {env.timestamp} on {env.hostname} "
        f"({fmt_plain(env.cpus)} CPUs)."
    )


# --- formatting ------------------------------------------------------------------------------


def _s(value: float | None) -> str:
    return NONE if value is None else f"{value:.3g} s"


def _fmt_s(value: float | None) -> str:
    return NONE if value is None else f"{value:.3f}"


def _span(start: float, end: float) -> str:
    return f"{start:.2f}–{end:.2f}"


def _versions(versions: Mapping[str, int]) -> str:
    return ", ".join(f"v{v}: {n:,}" for v, n in versions.items()) or NONE


def _statuses(errors: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {count:,}" for name, count in errors.items())


def _value(expression: str, value: float | None) -> str:
    from graphserve.loadtest.results.slo import parse_gate

    metric = parse_gate(expression).metric
    if metric == "answers.mismatch":
        return fmt_count(value)
    if metric == "answers.top_changed":
        return "-" if value is None else f"{100 * value:.2f} %"
    if metric == "errors":
        return fmt_count(value)
    if metric == "throughput":
        return fmt_rps(value)
    return fmt_ms(value)
