"""The most load each arm holds within a latency budget: `loadtest compare --find-max --slo ...`.

Triton's perf_analyzer stops a sweep at `--latency-threshold`; this searches instead. Each arm is
probed on its own, one load at a time, by a single-arm comparison (loadtest.comparison.run: the same
payload, warm-up, windows and exact latencies as any run), and the arms take turns, probe by
probe, so drift on a shared machine falls on both. An arm *holds* a load when every `--slo` gate
that applies to it passes at that load, no request failed (or no more than --max-failures), and,
in open loop, the generator sent at least 95% of the target rate.

The search per arm, perf_analyzer's binary search with a ramp in front of it:

    ramp     from the first load, double while the arm holds (up to --max-load)
    back off when the first load misses, halve until one holds (down to 1 user, or 1/64 of it)
    bisect   between the highest load held and the lowest missed, until they are within
             --precision (10%; users: 1 apart), or the arm has had --max-probes probes

The probes are the report's steps (each with one arm), so every table, plot and the raw
records of each probe (OUT/probes/NN-ARM-LOAD/) say what was measured; `Report.find_max` says
what was searched and found, and the headline reads "graph holds 3.2× the load of eager at
p99 < 20 ms".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from graphserve.core.errors import LoadTestError, SloError
from graphserve.loadtest.comparison.run import CompareSpec, compare, environment
from graphserve.loadtest.results.labels import load_label
from graphserve.loadtest.results.run import (
    REPORT_SCHEMA,
    AnswersCheck,
    ArmSearch,
    FindMax,
    GateCheck,
    Probe,
    Report,
    SloResult,
    Step,
)
from graphserve.loadtest.results.slo import NOT_JUDGED

__all__ = ["SearchSpec", "find_max", "first_gate_value", "held_load", "next_load"]

_OPEN_LOOP_REACH = 0.95  # an open-loop probe holds only if this share of the rate was sent
_MIN_RATE_SHARE = 1 / 64  # backing off from a first rate that misses stops this far down


@dataclass(frozen=True)
class SearchSpec:
    """How far and how finely to search; loads are users (closed loop) or req/s (open loop)."""

    max_load: float | None = None  # None: no cap (the probes bound the search)
    max_probes: int = 8  # per arm
    precision_pct: float = 10.0  # stop when the highest held and lowest missed are this close


def find_max(
    spec: CompareSpec,
    out_dir: Path,
    progress: Callable[[dict[str, Any]], None] | None = None,
    *,
    search: SearchSpec = SearchSpec(),
) -> Report:
    """Search the largest load each arm of `spec` holds within its `--slo` gates; return and
    write the report (OUT/report.json, .md, .html; every probe under OUT/probes/).

    The first of `spec.load.loads` is where each search starts. Raises SloError when there is
    no gate to hold or a gate is a ratio (a ratio needs both arms at one load), LoadTestError
    for a search that cannot run (bad bounds), and what `compare` raises for a probe.
    """
    from graphserve.loadtest.report.render import write_report
    from graphserve.loadtest.results.slo import parse_gate

    gates = [parse_gate(text) for text in spec.slo]
    _check(spec, search, gates)
    say = progress or (lambda _event: None)
    start = spec.load.loads[0]
    searches = {arm.name: _Search(arm.name, start, spec.load.mode, search) for arm in spec.arms}
    probes: list[tuple[str, Report, Probe]] = []
    while any(not s.done for s in searches.values()):
        for arm in spec.arms:
            state = searches[arm.name]
            if state.done:
                continue
            load = state.next()
            say({"event": "probe_start", "arm": arm.name, "load": load, "probe": len(probes) + 1})
            applies = tuple(g.expression for g in gates if g.arm in (None, arm.name))
            probe_spec = replace(
                spec,
                arms=(arm,),
                baseline=arm.name,
                slo=applies,
                load=replace(spec.load, loads=(load,)),
            )
            name = f"{len(probes) + 1:02d}-{arm.name}-{load:g}"
            report = compare(probe_spec, out_dir / "probes" / name, progress)
            probe = _probe(len(probes), arm.name, report, spec.max_failures)
            state.record(load, probe.held)
            probes.append((arm.name, report, probe))
            say({"event": "probe", "arm": arm.name, **probe.model_dump()})
    report = _combine(spec, search, probes, searches)
    write_report(report, out_dir)
    return report


def next_load(
    mode: str,
    start: float,
    held: Sequence[float],
    missed: Sequence[float],
    search: SearchSpec,
) -> float | None:
    """The next load to probe after the loads `held` and `missed` so far; None when the search
    is over (bracketed within the precision, at the cap, or nothing lower to try)."""
    whole = mode == "closed"
    floor = 1.0 if whole else start * _MIN_RATE_SHARE
    lo = max(held, default=None)
    hi = min((m for m in missed if lo is None or m > lo), default=None)
    if lo is None and hi is None:
        return start
    if hi is None:  # ramping up: every load so far held
        assert lo is not None
        cap = search.max_load
        if cap is not None and lo >= cap:
            return None
        up = lo * 2
        return min(up, cap) if cap is not None else up
    if lo is None:  # backing off: every load so far missed
        down = math.floor(hi / 2) if whole else hi / 2
        return down if down >= floor and down < hi else None
    close = (
        hi - lo <= max(1.0, lo * search.precision_pct / 100)
        if whole
        else (hi / lo <= 1 + search.precision_pct / 100)
    )
    if close:
        return None
    middle = (lo + hi) / 2
    return float(math.floor(middle)) if whole else middle


class _Search:
    """One arm's search: the loads it held and missed, and whether it is over (and why)."""

    def __init__(self, arm: str, start: float, mode: str, search: SearchSpec) -> None:
        self.arm, self.start, self.mode, self.search = arm, start, mode, search
        self.held: list[float] = []
        self.missed: list[float] = []
        self.stopped: str | None = None
        self.upcoming = next_load(mode, start, [], [], search)

    @property
    def done(self) -> bool:
        return self.upcoming is None or self.stopped is not None

    def next(self) -> float:
        assert self.upcoming is not None
        return self.upcoming

    def record(self, load: float, held: bool) -> None:
        (self.held if held else self.missed).append(load)
        self.upcoming = next_load(self.mode, self.start, self.held, self.missed, self.search)
        probed = len(self.held) + len(self.missed)
        if self.upcoming is not None and probed >= self.search.max_probes:
            self.stopped = "probes"

    def limit(self) -> str:
        """Why the search ended: the SLO bracketed, the cap, the probe budget, or no load held."""
        if self.stopped:
            return self.stopped
        if not self.held:
            return "nothing held"
        return "slo" if self.missed else "max load"


def _check(spec: CompareSpec, search: SearchSpec, gates: Sequence[Any]) -> None:
    if not gates:
        raise SloError(
            "--find-max needs a latency budget to hold: add --slo, e.g. --slo 'p99<20ms'"
        )
    ratios = [g.expression for g in gates if g.ratio]
    if ratios:
        raise SloError(
            f"--find-max probes each arm on its own, so a ratio gate cannot be held: "
            f"{', '.join(ratios)}; use a latency or throughput gate such as 'p99<20ms'"
        )
    if search.max_probes < 1:
        raise LoadTestError(f"--max-probes {search.max_probes}: expected 1 or more")
    if search.max_load is not None and search.max_load < spec.load.loads[0]:
        raise LoadTestError(
            f"--max-load {search.max_load:g} is below the first load {spec.load.loads[0]:g}"
        )
    if search.precision_pct <= 0:
        raise LoadTestError(f"--precision {search.precision_pct:g}: expected more than 0 %")


def held_load(report: Report, max_failures: int | None = None) -> tuple[bool, str | None]:
    """Whether the one arm of a single-arm run held its load, and why not: a gate missed, more
    failed requests than `max_failures` (None: any), or in open loop the rate not reached.
    The batching tuner judges its trials by the same rule."""
    (step,) = report.steps
    (arm,) = step.arms.values()
    assert report.slo is not None
    if not report.slo.passed and report.slo.gates:
        missed = [g.expression for g in report.slo.gates if not g.passed]
        # Every gate met and still not passed: every request failed (slo.evaluate).
        return False, f"missed {', '.join(missed)}" if missed else f"SLO {NOT_JUDGED}"
    allowed = max_failures or 0
    if arm.failures > allowed:
        return False, f"{arm.failures} failed requests (at most {allowed})"
    if arm.open_loop is not None:
        achieved, target = arm.open_loop.achieved_rps or 0.0, arm.open_loop.target_rps
        if achieved < _OPEN_LOOP_REACH * target:
            return False, f"sent {achieved:.0f} of {target:g} req/s"
    return True, None


def first_gate_value(report: Report) -> float | None:
    """The first gate's measured value (what a search reads as "the latency" of a probe)."""
    gates = report.slo.gates if report.slo else []
    return gates[0].value if gates else None


def _probe(index: int, arm: str, report: Report, max_failures: int | None) -> Probe:
    """What the search keeps of probe `index` (the combined report's step of that index)."""
    (step,) = report.steps
    held, why = held_load(report, max_failures)
    return Probe(
        step=index,
        load=step.load,
        held=held,
        why=why,
        value=first_gate_value(report),
        throughput_rps=step.arms[arm].throughput_rps,
        generator_bound=step.arms[arm].generator.bound,
    )


def _combine(
    spec: CompareSpec,
    search: SearchSpec,
    probes: Sequence[tuple[str, Report, Probe]],
    searches: dict[str, _Search],
) -> Report:
    """One report of every probe: the probes are its steps, the searches its find_max."""
    first = probes[0][1]
    steps: list[Step] = []
    checks: list[GateCheck] = []
    found: dict[str, list[Probe]] = {arm.name: [] for arm in spec.arms}
    for index, (arm, report, probe) in enumerate(probes):
        (step,) = report.steps
        steps.append(step.model_copy(update={"index": index}))
        assert report.slo is not None
        checks += [g.model_copy(update={"step": index}) for g in report.slo.gates]
        found[arm].append(probe)
    arms = {
        name: ArmSearch(
            probes=found[name],
            max_load=max(searches[name].held, default=None),
            first_miss=min((m for m in searches[name].missed), default=None),
            limit=searches[name].limit(),
        )
        for name in found
    }
    baseline = spec.baseline or spec.arms[-1].name
    settings = first.settings.model_copy(
        update={
            "arm_order": [arm.name for arm in spec.arms],
            "baseline": baseline,
            "loads": sorted({p.load for probes_of in found.values() for p in probes_of}),
        }
    )
    failures = sum(sum(a.errors.values()) for step in steps for a in step.arms.values())
    return Report(
        schema=REPORT_SCHEMA,
        title=_title(first.title, spec, baseline),
        headline=[],
        settings=settings,
        environment=environment(),
        arms={name: info for _, report, _ in probes for name, info in report.arms.items()},
        steps=steps,
        truncated=None,
        workers=None,
        elapsed_s=round(sum(report.elapsed_s or 0.0 for _, report, _ in probes), 1),
        cold_start=first.cold_start,
        manifest=first.manifest,
        calibration=None,
        slo=SloResult(
            gates=checks,
            max_failures=spec.max_failures,
            failures=failures,
            passed=all(a.max_load is not None for a in arms.values()),
        ),
        answers=_answers(spec, probes),
        find_max=FindMax(
            slo=list(spec.slo),
            mode=spec.load.mode,
            start=spec.load.loads[0],
            max_load=search.max_load,
            max_probes=search.max_probes,
            precision_pct=search.precision_pct,
            arms=arms,
        ),
    )


def _answers(spec: CompareSpec, probes: Sequence[tuple[str, Report, Probe]]) -> AnswersCheck | None:
    """Under --traffic: every probe's answers check, each agreement named by its probe's load
    ("logged at 8 users"), the disagreements first found kept (their files under the probe's
    directory)."""
    checked = [report.answers for _, report, _ in probes if report.answers is not None]
    if not checked:
        return None
    agreements: dict[str, list[dict[str, Any]]] = {arm.name: [] for arm in spec.arms}
    answered: dict[str, int] = {}
    unread: dict[str, int] = {}
    worst: list[dict[str, Any]] = []
    for index, (arm, report, probe) in enumerate(probes):
        a = report.answers
        if a is None:
            continue
        at = load_label(probe.load, spec.load.mode)
        for g in a.agreements.get(arm, []):
            agreements[arm].append({**g, "reference": f"{g['reference']} at {at}"})
        answered[arm] = max(answered.get(arm, 0), a.answered.get(arm, 0))
        unread[arm] = unread.get(arm, 0) + a.unread.get(arm, 0)
        where = f"probes/{index + 1:02d}-{arm}-{probe.load:g}/"
        worst += [{**w, "files": [where + f for f in w["files"]]} for w in a.worst]
    first = checked[0]
    return AnswersCheck(
        requests=first.requests, answered=answered, tolerances=first.tolerances,
        tolerances_from=first.tolerances_from, agreements=agreements, worst=worst[:5],
        unread={k: v for k, v in unread.items() if v},
    )  # fmt: skip


def _title(probe_title: str, spec: CompareSpec, baseline: str) -> str:
    """'mlp: graph and eager, most load within p99<20ms, gRPC, closed loop'."""
    model, _, rest = probe_title.partition(": ")
    transport = rest.partition(", ")[2]  # the probe's title names its one arm first
    names = " and ".join(arm.name for arm in spec.arms)
    return f"{model}: {names}, most load within {' and '.join(spec.slo)}, {transport}"
