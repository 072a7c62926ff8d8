"""A replay's typed report and its pages: replay.json, replay.md and shapes.png.

Per arm: what was sent and failed, the latencies, how well the schedule was kept, the latency of
each request shape (with the first request of each shape: where an eager server traces a new
shape, or a graph server pads one), and the answers against the log and the baseline arm. Then
the requests that disagree most, each with the files and the one command that sends it again,
and the gates.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from graphserve.core.results import JsonResult
from graphserve.loadtest.results.answers import Agreement, Disagreement, OutputAgreement

__all__ = [
    "Adherence",
    "Agreement",
    "ArmReplay",
    "Disagreement",
    "OutputAgreement",
    "ReplayGate",
    "ReplayReport",
    "ShapeLatency",
    "render_markdown",
    "shapes_png",
]


@dataclass
class Adherence(JsonResult):
    """How well an arm's replay kept its schedule."""

    scheduled: int
    sent: int
    on_time: int  # sent within on_time_ms of their time
    on_time_ms: float
    lateness_p50_ms: float | None
    lateness_p99_ms: float | None
    lateness_max_ms: float | None
    planned_rps: float | None  # the schedule's rate over its span
    sent_rps: float | None  # the rate the requests went out at
    late_senders_busy: int = 0  # late requests whose time came with every sender in flight
    # late requests whose sender waited for a CPU half their lateness or more (None: not known)
    late_cpu_wait: int | None = None

    @property
    def on_time_share(self) -> float | None:
        return self.on_time / self.sent if self.sent else None


@dataclass
class ShapeLatency(JsonResult):
    """The requests of one shape on one arm."""

    shape: str
    rows: int
    requests: int
    failed: int
    p50_ms: float | None
    p99_ms: float | None
    first_ms: float | None  # the first request of this shape in the schedule


@dataclass
class ArmReplay(JsonResult):
    """One arm's replay."""

    name: str
    address: str
    requests: int
    failed: int
    errors: dict[str, int]
    latency_ms: dict[str, float | None]
    throughput_rps: float | None
    adherence: Adherence
    shapes: list[ShapeLatency] = field(default_factory=list)
    answers: list[Agreement] = field(default_factory=list)
    # with --metrics: traces of each signature's tf.function the replay added (an eager server
    # in function mode: one per new shape); None without a metrics URL or the gauge
    traces_added: dict[str, float] | None = None


@dataclass
class ReplayGate(JsonResult):
    expression: str
    arm: str
    value: float | None
    threshold: float
    passed: bool
    why: str = ""


@dataclass
class ReplayReport(JsonResult):
    """A replay of a traffic file against one or more arms."""

    traffic: str
    protocol: str
    schedule: str  # "recorded times, speed 1", "500 req/s, constant"
    records: int  # in the file
    sent: int  # scheduled to each arm
    span_s: float
    baseline: str
    tolerances: dict[str, list[float]]
    tolerances_from: str
    arms: list[ArmReplay] = field(default_factory=list)
    worst: list[Disagreement] = field(default_factory=list)
    gates: list[ReplayGate] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    command: str = ""

    @property
    def passed(self) -> bool:
        return all(gate.passed for gate in self.gates)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f} %"


def render_markdown(report: ReplayReport) -> str:
    """replay.md: the report for people."""
    out = [
        f"# Replay of `{report.traffic}`",
        "",
        f"{report.sent} requests of {report.records} in the file over {report.protocol}, "
        f"{report.schedule}, over {report.span_s:.3f} s, to each arm in turn; the baseline is "
        f"{report.baseline}. Answers judged with the tolerances of {report.tolerances_from}.",
        "",
    ]
    if report.warnings:
        out += ["## Warnings", "", *(f"- {w}" for w in report.warnings), ""]
    out += [
        "## Latency and schedule",
        "",
        "| arm | sent | failed | p50 ms | p99 ms | req/s | on time | late p50 ms | late p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm in report.arms:
        a = arm.adherence
        rate = "-" if arm.throughput_rps is None else f"{arm.throughput_rps:.1f}"
        out.append(
            f"| {arm.name} | {arm.requests} | {arm.failed} | {_ms(arm.latency_ms.get('p50'))} "
            f"| {_ms(arm.latency_ms.get('p99'))} | {rate} | {_share(a.on_time_share)} "
            f"| {_ms(a.lateness_p50_ms)} | {_ms(a.lateness_p99_ms)} |"
        )
    out += ["", f"On time: sent within {report.arms[0].adherence.on_time_ms:g} ms of its "
            "time." if report.arms else "", ""]  # fmt: skip
    for arm in report.arms:
        a = arm.adherence
        if a.sent > a.on_time:
            out.append(f"- {arm.name}: {_late_causes(a)}")
    for arm in report.arms:
        for error, count in sorted(arm.errors.items(), key=lambda kv: -kv[1])[:5]:
            out.append(f"- {arm.name}: {count} × {error}")
    out += ["## Latency by request shape", "", "![latency by shape](shapes.png)", ""]
    out += ["| arm | shape | rows | requests | failed | p50 ms | p99 ms | first ms |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for arm in report.arms:
        for s in arm.shapes:
            out.append(
                f"| {arm.name} | {s.shape} | {s.rows} | {s.requests} | {s.failed} "
                f"| {_ms(s.p50_ms)} | {_ms(s.p99_ms)} | {_ms(s.first_ms)} |"
            )
    out += ["", "The first request of each shape is where an eager server traces a shape it "
            "has not seen, and a graph server pads or compiles for it.", ""]  # fmt: skip
    for arm in report.arms:
        if arm.traces_added is not None:
            added = ", ".join(f"{k} {v:g}" for k, v in sorted(arm.traces_added.items())) or "none"
            out.append(f"- {arm.name}: traces added by the replay "
                       f"(graphserve_function_traces): {added}")  # fmt: skip
    if any(arm.traces_added is not None for arm in report.arms):
        out.append("")
    out += _answers(report)
    if report.gates:
        out += ["## Gates", ""]
        for gate in report.gates:
            value = "no value" if gate.value is None else f"{gate.value:g}"
            verdict = "passed" if gate.passed else "**missed**"
            why = f" ({gate.why})" if gate.why else ""
            out.append(f"- `{gate.expression}` on {gate.arm}: {value}, {verdict}{why}")
        out.append("")
    if report.command:
        out += ["---", "", f"*Made by `{report.command}`.*", ""]
    return "\n".join(out)


def _answers(report: ReplayReport) -> list[str]:
    out = ["## Answers", ""]
    rows = [(arm, agreement) for arm in report.arms for agreement in arm.answers]
    if not rows:
        return [*out, "No answer could be compared: the file logs none and there is one arm.", ""]
    out += ["| arm | against | compared | mismatched | top class changed |",
            "|---|---|---:|---:|---:|"]  # fmt: skip
    for arm, agreement in rows:
        out.append(
            f"| {arm.name} | {agreement.reference} | {agreement.compared} "
            f"| {agreement.mismatched} | {_share(agreement.top_class_changed_share)} |"
        )
    out += ["", "| arm | against | output | dtype | mismatched | max abs error | max rel error |",
            "|---|---|---|---|---:|---:|---:|"]  # fmt: skip
    for arm, agreement in rows:
        for o in agreement.outputs:
            out.append(
                f"| {arm.name} | {agreement.reference} | {o.output or '(unnamed)'} | {o.dtype} "
                f"| {o.mismatched} of {o.compared} | {o.max_abs_error:.3g} "
                f"| {o.max_rel_error:.3g} |"
            )
    out.append("")
    if report.worst:
        out += ["### The requests that disagree most", ""]
        for d in report.worst:
            allowed = "exactly" if d.allowed_abs_error is None else f"{d.allowed_abs_error:.3g}"
            what = d.why or f"differs by {d.max_abs_error:.3g} (allowed {allowed})"
            out += [
                f"- record {d.record} ({d.shape}), {d.arm} against {d.reference}: output "
                f"`{d.output or '(unnamed)'}` {what}; saved as "
                + ", ".join(f"`{f}`" for f in d.files),
                f"  - again: `{d.command}`",
            ]
            if d.curl:
                out.append(f"  - over REST: `{d.curl}`")
        out.append("")
    return out


def shapes_png(report: ReplayReport) -> bytes | None:
    """p50 and p99 by request shape, one line per arm; None without a shape measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order: list[str] = []  # as the arms list them: by rows, then each input's dimensions
    for arm in report.arms:
        order += [s.shape for s in arm.shapes if s.shape not in order]
    if not order:
        return None
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(order) + 3), 4.5))
    for arm in report.arms:
        by: dict[str, Any] = {s.shape: s for s in arm.shapes}
        x = [i for i, label in enumerate(order) if label in by and by[label].p50_ms is not None]
        (line,) = ax.plot(x, [by[order[i]].p50_ms for i in x], marker="o", label=f"{arm.name} p50")
        ax.plot(x, [by[order[i]].p99_ms for i in x], linestyle="--", color=line.get_color(),
                label=f"{arm.name} p99")  # fmt: skip
    ax.set_xticks(range(len(order)), order, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency by request shape")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def _late_causes(a: Adherence) -> str:
    """What the late requests of an arm went out late for."""
    late = a.sent - a.on_time
    said = f"{late} late; {a.late_senders_busy} with every sender in flight (the server behind)"
    if a.late_cpu_wait is None:
        return said + "; this system does not say how long a thread waited for a CPU"
    return (
        f"{said}, {a.late_cpu_wait} waiting for a CPU half their lateness or more (this "
        "machine's cores busy)"
    )
