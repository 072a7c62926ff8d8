"""SLO gates for CI: `--slo 'p99<50ms'`, `--slo 'ratio.p50<0.6'`, `--slo errors==0`.

A gate is read once (`parse_gate`), checked against every step of a report (`evaluate`, which
gives the report's SloResult) and missed gates are told to people (`describe`).

Grammar, whitespace allowed around the parts:

    [ARM.]METRIC OP NUMBER[UNIT]     p99<50ms, graph.p99.9 <= 2.5ms, throughput>500
    ratio[.ARM].METRIC OP NUMBER     ratio.p50<0.6, ratio.graph.p99<0.7
    [ARM.]errors OP COUNT            errors==0, graph.errors<=5
    [ARM.]answers.mismatch OP N      answers.mismatch==0 (under a traffic file: requests whose
    [ARM.]answers.top_changed OP S   answers were past tolerance; the share of rows whose top
                                     class changed), judged once over the run

METRIC is p50, p90, p95, p99, p99.9, mean, min or max (latency: ms by default, or s or us) or
throughput / rps (req/s; unit rps or /s optional). Ratios take p50 ... p99.9, mean or throughput
and no unit. `errors` counts failed requests (no unit, no ratio). OP is <, <=, >, >= or ==. A gate
without ARM checks the first arm of the report; a ratio gate without ARM checks the first arm that
is not the baseline. `graphserve loadtest rollout` reads the same gates, with the windows of the
swap (before, during, after) in place of arms (loadtest/rollouts/analysis.py).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from graphserve.core.errors import SloError
from graphserve.loadtest.results.labels import load_label
from graphserve.loadtest.results.run import GateCheck, Report, SloResult, Step
from graphserve.loadtest.results.stats import PERCENTILES

__all__ = [
    "NOT_JUDGED",
    "Gate",
    "describe",
    "evaluate",
    "every_request_failed",
    "parse_gate",
    "passes",
]

# Without one successful request no latency, throughput or ratio was measured: nothing to judge.
NOT_JUDGED = "not judged: every request failed"

_PERCENTILE_KEYS = [name for name, _ in PERCENTILES]
_LATENCY_METRICS = frozenset([*_PERCENTILE_KEYS, "mean", "min", "max"])
_RATIO_METRICS = frozenset([*_PERCENTILE_KEYS, "mean", "throughput"])
_LATENCY_UNITS_MS = {"": 1.0, "ms": 1.0, "s": 1000.0, "us": 0.001}
_THROUGHPUT_UNITS = frozenset(["", "rps", "/s"])
_OPS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}

# Metric alternatives longest first, so "p99.9" is not read as "p99" followed by ".9".
_METRIC_PATTERN = "|".join(
    re.escape(m)
    for m in sorted([*_LATENCY_METRICS, "throughput", "rps", "errors"], key=len, reverse=True)
)
_GATE = re.compile(
    rf"""
    \s*(?:(?P<ratio>ratio)\s*\.\s*)?
    (?:(?P<arm>[A-Za-z0-9_-]+)\s*\.\s*)?
    (?P<metric>{_METRIC_PATTERN})
    \s*(?P<op>==|<=|>=|<|>)
    \s*(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)
    \s*(?P<unit>[A-Za-z/]*)\s*
    """,
    re.VERBOSE,
)
# `[ARM.]answers.mismatch OP N` (requests past tolerance) or `[ARM.]answers.top_changed OP SHARE`
# (the largest share of rows whose top class changed): judged once over a run under a traffic
# file, from loadtest/results/answers.py's agreements
_ANSWERS_GATE = re.compile(
    r"\s*(?:(?P<arm>[A-Za-z0-9_-]+)\s*\.\s*)?answers\s*\.\s*(?P<metric>mismatch|top_changed)"
    r"\s*(?P<op>==|<=|>=|<|>)\s*(?P<number>\d+(?:\.\d*)?|\.\d+)\s*"
)
_EXPECTED = (
    "expected [ARM.]METRIC<VALUE such as p99<50ms, graph.p50<=2ms, throughput>500, "
    "ratio.p50<0.6, errors==0 (METRIC: p50, p90, p95, p99, p99.9, mean, min, max, throughput, "
    "errors; OP: <, <=, >, >=, ==), or under --traffic answers.mismatch==0, "
    "answers.top_changed<0.01"
)


@dataclass(frozen=True)
class Gate:
    """One `--slo` gate. threshold is in ms for latencies, req/s for throughput, plain for ratios
    and error counts; arm is None when the gate names none; metric "rps" is stored as
    "throughput"."""

    expression: str
    arm: str | None
    ratio: bool
    metric: str
    op: str
    threshold: float


def _bad(text: str, reason: str = "") -> SloError:
    return SloError(f"--slo {text!r}: {reason + '; ' if reason else ''}{_EXPECTED}")


def parse_gate(text: str) -> Gate:
    """Read one `--slo` gate; see the module docstring for the grammar.

    Raises SloError naming the text and the expected forms when it does not fit the grammar,
    uses a unit the metric does not take, or asks a ratio of min or max.
    """
    answers = _ANSWERS_GATE.fullmatch(text)  # under a traffic file: the answers check's gates
    if answers is not None:
        return Gate(
            expression=text.strip(),
            arm=answers["arm"],
            ratio=False,
            metric="answers." + answers["metric"],
            op=answers["op"],
            threshold=float(answers["number"]),
        )
    match = _GATE.fullmatch(text)
    if match is None:
        raise _bad(text)
    ratio = match["ratio"] is not None
    metric = "throughput" if match["metric"] == "rps" else match["metric"]
    unit = match["unit"]
    threshold = float(match["number"])
    if ratio:
        if metric not in _RATIO_METRICS:
            raise _bad(text, f"a ratio gate takes p50 to p99.9, mean or throughput, not {metric}")
        if unit:
            raise _bad(text, f"a ratio has no unit, got {unit!r}")
    elif metric == "errors":
        if unit:
            raise _bad(text, f"errors is a count of failed requests, no unit, got {unit!r}")
    elif metric == "throughput":
        if unit not in _THROUGHPUT_UNITS:
            raise _bad(text, f"throughput is in req/s (unit rps or /s), got {unit!r}")
    else:
        if unit not in _LATENCY_UNITS_MS:
            raise _bad(text, f"{metric} takes a unit of ms, s or us, got {unit!r}")
        threshold *= _LATENCY_UNITS_MS[unit]
    return Gate(
        expression=text.strip(),
        arm=match["arm"],
        ratio=ratio,
        metric=metric,
        op=match["op"],
        threshold=threshold,
    )


def _resolve_arm(gate: Gate, arm_order: Sequence[str], baseline: str | None) -> str:
    if gate.arm is not None and gate.arm not in arm_order:
        raise SloError(
            f"--slo {gate.expression!r} names arm {gate.arm!r}; "
            f"the report has {', '.join(map(repr, arm_order))}"
        )
    if not gate.ratio:
        if gate.arm is not None:
            return gate.arm
        if not arm_order:
            raise SloError(f"--slo {gate.expression!r}: the report has no arms")
        return arm_order[0]
    if baseline is None:
        raise SloError(f"--slo {gate.expression!r}: a ratio needs a baseline arm, the run has none")
    if gate.arm == baseline:
        raise SloError(
            f"--slo {gate.expression!r}: {baseline!r} is the baseline; a ratio is ARM/{baseline}"
        )
    if gate.arm is not None:
        return gate.arm
    others = [arm for arm in arm_order if arm != baseline]
    if not others:
        raise SloError(f"--slo {gate.expression!r}: a ratio needs an arm besides the baseline")
    return others[0]


def _value(step: Step, gate: Gate, arm: str, baseline: str | None) -> float | None:
    # Missing data anywhere on the path is None, and None fails the gate.
    if gate.ratio:
        ratio = step.ratios.get(f"{arm}/{baseline}")
        return ratio.of(gate.metric).value if ratio is not None else None
    arm_step = step.arms.get(arm)
    if arm_step is None:
        return None
    if gate.metric == "throughput":
        return arm_step.throughput_rps
    if gate.metric == "errors":
        return float(arm_step.failures)
    value: float | None = arm_step.latency_ms.of(gate.metric)
    return value


def _failures(steps: Sequence[Step]) -> int:
    return sum(sum(arm.errors.values()) for step in steps for arm in step.arms.values())


def every_request_failed(report: Report) -> bool:
    """Whether the report has arms and not one successful measured request on any of them."""
    arms = [arm for step in report.steps for arm in step.arms.values()]
    return bool(arms) and all(arm.latency_ms.p50 is None for arm in arms)


def evaluate(gates: Sequence[Gate], report: Report, max_failures: int | None) -> SloResult:
    """The report's SLO result: every gate checked at every step, and the failure bound.

    One row per gate and step. A value that is missing (None: no successful request, no ratio)
    fails its gate, gates given for a report without steps fail, and a run in which every
    request failed never passes, gates or none (`every_request_failed`), since an SLO that
    cannot be judged must not pass. Failures are the summed `errors` of every arm and step;
    `max_failures` None leaves them ungated. Raises SloError when a gate names an arm the report
    does not have, or asks a ratio that the report cannot have (no baseline, of the baseline).
    """
    arm_order = report.settings.arm_order
    baseline = report.settings.baseline
    rows: list[GateCheck] = [_answers_row(gate, report) for gate in gates if _on_answers(gate)]
    gates = [gate for gate in gates if not _on_answers(gate)]
    arms = [_resolve_arm(gate, arm_order, baseline) for gate in gates]
    for step in report.steps:
        for gate, arm in zip(gates, arms, strict=True):
            value = _value(step, gate, arm, baseline)
            rows.append(
                GateCheck(
                    expression=gate.expression,
                    arm=arm,
                    step=step.index,
                    load=step.load,
                    value=value,
                    threshold=gate.threshold,
                    passed=passes(gate, value),
                )
            )
    failures = _failures(report.steps)
    gates_passed = all(row.passed for row in rows) and (bool(rows) or not gates)
    failures_passed = max_failures is None or failures <= max_failures
    return SloResult(
        gates=rows,
        max_failures=max_failures,
        failures=failures,
        passed=gates_passed and failures_passed and not every_request_failed(report),
    )


def _on_answers(gate: Gate) -> bool:
    return gate.metric.startswith("answers.")


def _answers_row(gate: Gate, report: Report) -> GateCheck:
    """An answers gate, judged once over the run (load None: all): its arm's agreements, or
    every arm's; not judged (None, missed) when the run checked no answer."""
    from graphserve.loadtest.results.answers import Agreement, answers_value

    check = report.answers
    if check is None:
        raise SloError(f"--slo {gate.expression!r}: answers are checked under --traffic FILE only")
    if gate.arm is not None and gate.arm not in check.agreements:
        raise SloError(
            f"--slo {gate.expression!r} names arm {gate.arm!r}; the report has "
            + ", ".join(map(repr, check.agreements))
        )
    chosen = [gate.arm] if gate.arm is not None else list(check.agreements)
    found = [Agreement.from_json(a) for arm in chosen for a in check.agreements[arm]]
    value = answers_value(gate.metric, found)
    return GateCheck(
        expression=gate.expression, arm=gate.arm, step=-1, load=None, value=value,
        threshold=gate.threshold, passed=passes(gate, value),
    )  # fmt: skip


def passes(gate: Gate, value: float | None) -> bool:
    """Whether `value` meets the gate; a missing value (None) never does."""
    return value is not None and _OPS[gate.op](value, gate.threshold)


def _number(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"


def describe(result: SloResult, *, mode: str) -> list[str]:
    """One line per missed gate and one for too many failures, for people; [] when all passed.

    `mode` is the report's settings.mode: "closed" says loads in users, "open" in req/s.
    For example: "p99<50ms missed on graph at 16 users: 61.2 ms".
    """
    lines = []
    for row in result.gates:
        if row.passed:
            continue
        gate = parse_gate(row.expression)
        value = row.value
        if _on_answers(gate):
            said = "no answer compared" if value is None else _number(value)
            lines.append(f"{row.expression} missed on {row.arm or 'every arm'}: {said}")
            continue
        if value is None:
            shown = "no value (no successful request)"
        elif gate.ratio:
            shown = _number(value)
        elif gate.metric == "throughput":
            shown = f"{_number(value)} req/s"
        elif gate.metric == "errors":
            shown = f"{value:.0f} failed requests"
        else:
            shown = f"{_number(value)} ms"
        at = load_label(row.load, mode) if row.load is not None else "an unknown load"
        lines.append(f"{row.expression} missed on {row.arm} at {at}: {shown}")
    if result.max_failures is not None and result.failures > result.max_failures:
        lines.append(
            f"{result.failures} failed requests, more than --max-failures {result.max_failures}"
        )
    if not lines and not result.passed:
        # Failed without a row to show: gates given for a report without steps (no row, no
        # failure), or a run in which every request failed (evaluate).
        if not result.gates and not result.failures:
            lines.append("the gates were not checked: the report has no steps")
        else:
            lines.append(f"the SLO was {NOT_JUDGED}")
    return lines
