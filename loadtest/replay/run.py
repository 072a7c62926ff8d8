"""`graphserve loadtest replay`: a traffic file sent again, open loop, to each arm in turn.

`replay(spec)` reads the file whole (graphserve.model.traffic: a truncated, corrupt or empty file
is refused before anything is sent), keeps the records asked for, encodes each once for the
protocol, and sends the same schedule to every arm, one arm at a time so that no arm shares the
machine with another's load. Then it reads every answer and judges them against the answer the
log holds for the request (the version that served it then) and against the baseline arm's (the
last arm, as in `loadtest compare`), and `write_report` writes replay.json, replay.md,
shapes.png and the requests that disagree most.
"""

from __future__ import annotations

import shlex
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from graphserve.core.errors import SloError
from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.reach import check_tls
from graphserve.loadtest.generator.recorded import Prepared, describe_skipped, prepare
from graphserve.loadtest.generator.targets import check_loopback, dial
from graphserve.loadtest.replay.plan import ON_TIME_S, ReplayError, ReplaySpec, schedule
from graphserve.loadtest.replay.report import (
    Adherence,
    ArmReplay,
    ReplayGate,
    ReplayReport,
    ShapeLatency,
    render_markdown,
    shapes_png,
)
from graphserve.loadtest.replay.send import Outcome, send_schedule
from graphserve.loadtest.results.answers import (
    DEFAULT_TOLERANCES,
    Agreement,
    Answer,
    answers_value,
    grpc_answer,
    judge,
    rest_answer,
)
from graphserve.loadtest.results.slo import Gate, parse_gate, passes
from graphserve.loadtest.results.stats import percentile, summarize
from graphserve.model.traffic import TrafficError, read_traffic

__all__ = ["replay", "write_report"]

Say = Callable[[str], None]


def _selected(spec: ReplaySpec) -> tuple[list[int], list, int, list[str]]:
    """The numbers and records to send, the file's record count, and what was left out."""
    records = list(read_traffic(spec.traffic).records)
    total = len(records)
    numbers = list(range(total))
    if spec.from_model is not None:
        numbers = [n for n in numbers if records[n].model == spec.from_model]
        if not numbers:
            models = sorted({r.model for r in records})
            raise TrafficError(
                f"traffic file {spec.traffic} holds no record of model {spec.from_model!r}: it "
                f"has {', '.join(map(repr, models))}"
            )
    if spec.records is not None:
        missing = [n for n in spec.records if not 0 <= n < total]
        if missing:
            raise ReplayError(
                f"--records {','.join(map(str, missing))}: the file's records are 0 to {total - 1}"
            )
        chosen = set(spec.records)
        numbers = [n for n in numbers if n in chosen]
    notes: list[str] = []
    if spec.protocol == "rest":
        left = Counter(records[n].kind for n in numbers if records[n].kind == "multi_inference")
        notes += describe_skipped(left)
        numbers = [n for n in numbers if records[n].kind != "multi_inference"]
        if not numbers:
            raise ReplayError("no record of the file can be sent over REST: replay it over gRPC")
    return numbers, [records[n] for n in numbers], total, notes


def replay(spec: ReplaySpec, say: Say = lambda _: None) -> ReplayReport:
    """Replay `spec.traffic` against every arm; the report (gates judged). Raises TrafficError
    or ReplayError before anything is sent when the file or the options cannot be used,
    ServerUnreachable when TLS is why an arm cannot be reached."""
    if not spec.arms:
        raise ReplayError("no arm to replay against: give --graph, --eager or --arm NAME=ADDR")
    gates = [_parse(g) for g in spec.slo]
    for gate in gates:  # before any load
        if gate.arm is not None and gate.arm not in spec.arms:
            raise SloError(f"--slo {gate.expression!r} names arm {gate.arm!r}; the replay has "
                           f"{', '.join(map(repr, spec.arms))}")  # fmt: skip
    numbers, records, total, notes = _selected(spec)
    order, due = schedule(
        records, speed=spec.speed, rate=spec.rate, arrivals=spec.arrivals, seed=spec.seed
    )
    if spec.duration_s is not None:
        kept = [i for i, t in enumerate(due) if t <= spec.duration_s]
        if len(kept) < len(due):
            notes.append(f"{len(due) - len(kept)} requests scheduled after --duration "
                         f"{spec.duration_s:g} s were not sent")  # fmt: skip
        order, due = [order[i] for i in kept], [due[i] for i in kept]
    if spec.limit is not None and len(order) > spec.limit:
        notes.append(f"{len(order) - spec.limit} requests past --limit {spec.limit} not sent")
        order, due = order[: spec.limit], due[: spec.limit]
    columnar = None if spec.rest_format is None else spec.rest_format == "columnar"
    prepared_all = prepare(records, indices=numbers, model=spec.model, columnar=columnar)
    requests = [prepared_all[i] for i in order]
    targets = {}
    for name, address in spec.arms.items():
        check_loopback(address, spec.allow_remote)
        target, tls = dial(spec.protocol, address, spec.tls)
        check_tls(f"arm {name}", spec.protocol, target, tls, _model_of(requests[0]))
        targets[name] = (target, tls)
    outcomes: dict[str, list[Outcome]] = {}
    traces: dict[str, dict[str, float] | None] = {}
    for name, (target, tls) in targets.items():
        say(f"{name}: {len(requests)} requests to {target} over {spec.protocol}")
        before = _traces(spec.metrics.get(name), spec.tls)
        outcomes[name] = send_schedule(
            spec.protocol, target, requests, due, tls=tls,
            max_in_flight=spec.max_in_flight, timeout_s=spec.timeout_s,
        )  # fmt: skip
        after = _traces(spec.metrics.get(name), spec.tls)
        traces[name] = (
            None if before is None or after is None
            else {k: v - before.get(k, 0.0) for k, v in after.items() if v != before.get(k)}
        )  # fmt: skip
    tolerances = {**DEFAULT_TOLERANCES, **spec.tolerances}
    baseline = list(spec.arms)[-1]
    answers = {name: _answers(spec.protocol, requests, got) for name, got in outcomes.items()}
    agreements, chosen = judge(
        baseline, answers, [r.logged for r in requests], [(r.index, r.shape) for r in requests],
        tolerances, spec.worst,
    )  # fmt: skip
    arms = []
    for name, (target, _) in targets.items():
        arm = _arm(
            name, target, requests, due, outcomes[name], agreements[name], spec.max_in_flight
        )
        arm.traces_added = traces[name]
        arms.append(arm)
    warnings = notes + _warnings(arms)
    report = ReplayReport(
        traffic=str(spec.traffic),
        protocol=spec.protocol,
        schedule=(
            f"{spec.rate:g} req/s, {spec.arrivals}"
            if spec.rate is not None
            else f"at the recorded times, speed {spec.speed:g}"
        ),
        records=total,
        sent=len(requests),
        span_s=due[-1] if due else 0.0,
        baseline=baseline,
        tolerances={k: list(v) for k, v in sorted(tolerances.items())},
        tolerances_from=spec.tolerances_from,
        arms=arms,
        worst=chosen,
        warnings=warnings,
    )
    report.gates = [_judge(g, report) for g in gates]
    return report


def _traces(url: str | None, tls: ClientTls | None) -> dict[str, float] | None:
    """The graphserve_function_traces gauge at `url`, by model:version:signature; None without
    a URL or an answer."""
    if url is None:
        return None
    from graphserve.loadtest.generator.scrape import fetch, samples
    from graphserve.loadtest.generator.targets import scheme_tls

    text = fetch(url, 5.0, scheme_tls(url, tls))
    if text is None:
        return None
    _, found = samples(text, ["graphserve_function_traces"])
    return {f"{k['model']}:{k['version']}:{k['signature']}": v for _, k, v in found}


def _model_of(request: Prepared) -> str:
    """The model `request` goes to, for the TLS probe's status call."""
    from tensorflow_serving.apis import inference_pb2, predict_pb2

    if request.kind == "multi_inference":
        message = inference_pb2.MultiInferenceRequest.FromString(request.grpc)
        return message.tasks[0].model_spec.name if message.tasks else ""
    return predict_pb2.PredictRequest.FromString(request.grpc).model_spec.name


def _answers(protocol: str, requests: Sequence[Prepared], got: Sequence[Outcome]) -> list:
    """Each request's answer as arrays (None: failed); an answer that cannot be read is a
    failure of its own (its text kept in the outcome)."""
    read = grpc_answer if protocol == "grpc" else rest_answer
    out: list[Answer | None] = []
    for request, outcome in zip(requests, got, strict=True):
        if outcome.answer is None:
            out.append(None)
            continue
        try:
            out.append(read(request.kind, outcome.answer))
        except (ValueError, KeyError, TypeError) as exc:
            outcome.error = f"answer not readable as a {request.kind} answer: {exc}"
            out.append(None)
    return out


def _arm(
    name: str,
    address: str,
    requests: Sequence[Prepared],
    due: Sequence[float],
    outcomes: Sequence[Outcome],
    agreements: list[Agreement],
    senders: int,
) -> ArmReplay:
    ok = [o for o in outcomes if o.error is None]
    latencies = [o.latency_ms for o in ok]
    lateness = np.sort(np.asarray([max(0.0, o.sent_s - o.due_s) * 1e3 for o in outcomes]))
    span = (outcomes[-1].sent_s - outcomes[0].sent_s) if len(outcomes) > 1 else 0.0
    ends = [o.sent_s + o.latency_ms / 1e3 for o in ok]
    busy = (max(ends) - min(o.sent_s for o in ok)) if ok else 0.0
    planned_span = due[-1] - due[0] if len(due) > 1 else 0.0
    adherence = Adherence(
        scheduled=len(due),
        sent=len(outcomes),
        on_time=int(np.count_nonzero(lateness <= ON_TIME_S * 1e3)),
        on_time_ms=ON_TIME_S * 1e3,
        lateness_p50_ms=percentile(lateness, 0.5) if lateness.size else None,
        lateness_p99_ms=percentile(lateness, 0.99) if lateness.size else None,
        lateness_max_ms=float(lateness[-1]) if lateness.size else None,
        planned_rps=(len(due) - 1) / planned_span if planned_span > 0 else None,
        sent_rps=(len(outcomes) - 1) / span if span > 0 else None,
        late_senders_busy=_late_and_busy(outcomes, senders),
        late_cpu_wait=_late_waiting_for_cpu(outcomes),
    )
    by_shape: dict[str, list[Outcome]] = defaultdict(list)
    rows: dict[str, int] = {}
    dims: dict[str, tuple[tuple[int, ...], ...]] = {}
    for request, outcome in zip(requests, outcomes, strict=True):
        by_shape[request.shape].append(outcome)
        rows[request.shape], dims[request.shape] = request.rows, request.dims
    shapes = []
    for shape, items in sorted(by_shape.items(), key=lambda kv: (rows[kv[0]], dims[kv[0]])):
        good = np.sort(np.asarray([o.latency_ms for o in items if o.error is None]))
        first = items[0]
        shapes.append(ShapeLatency(
            shape=shape, rows=rows[shape], requests=len(items),
            failed=sum(1 for o in items if o.error is not None),
            p50_ms=percentile(good, 0.5) if good.size else None,
            p99_ms=percentile(good, 0.99) if good.size else None,
            first_ms=first.latency_ms if first.error is None else None,
        ))  # fmt: skip
    errors = Counter(o.error for o in outcomes if o.error is not None)
    return ArmReplay(
        name=name,
        address=address,
        requests=len(outcomes),
        failed=sum(errors.values()),
        errors=dict(errors.most_common()),
        latency_ms=summarize(latencies),
        throughput_rps=(len(ok) / busy) if busy > 0 else None,
        adherence=adherence,
        shapes=shapes,
        answers=agreements,
    )


def _late_and_busy(outcomes: Sequence[Outcome], senders: int) -> int:
    """The late requests whose time came while every sender was waiting on an answer."""
    sent = np.sort(np.asarray([o.sent_s for o in outcomes]))
    ends = np.sort(np.asarray([o.sent_s + o.latency_ms / 1e3 for o in outcomes]))
    busy = 0
    for o in outcomes:
        if o.sent_s - o.due_s > ON_TIME_S:
            in_flight = np.searchsorted(sent, o.due_s, "right") - np.searchsorted(
                ends, o.due_s, "right"
            )
            busy += int(in_flight >= senders)
    return busy


def _late_waiting_for_cpu(outcomes: Sequence[Outcome]) -> int | None:
    """The late requests whose sending thread waited for a CPU at least half their lateness;
    None when the waits are not known (no schedstat)."""
    known = [(o, o.cpu_wait_ms) for o in outcomes if o.cpu_wait_ms is not None]
    if not outcomes or len(known) < len(outcomes):
        return None
    on_time_ms = ON_TIME_S * 1e3
    return sum(
        1
        for o, wait in known
        if (late_ms := (o.sent_s - o.due_s) * 1e3) > on_time_ms and wait >= late_ms / 2
    )


def _warnings(arms: Sequence[ArmReplay]) -> list[str]:
    out = []
    for arm in arms:
        a = arm.adherence
        share = a.on_time_share
        if share is not None and share < 0.99:
            late = a.sent - a.on_time
            if a.late_senders_busy >= late / 2:
                why = (
                    f"for {a.late_senders_busy} of the {late} late, every sender was waiting on "
                    "an answer (the server fell behind: raise --max-in-flight to keep sending)"
                )
            elif (
                a.late_cpu_wait is not None and a.late_cpu_wait >= (late - a.late_senders_busy) / 2
            ):
                why = (
                    f"{a.late_cpu_wait} of the {late} late waited for a CPU at least half their "
                    "lateness: this machine's cores were busy (the server's among them, on one "
                    "machine; replay from another, or at a lower rate)"
                )
            else:
                why = (
                    f"{late - a.late_senders_busy} of the {late} late went out late with a "
                    "sender free and a CPU to run on: the replaying process itself fell behind"
                )
            out.append(
                f"{arm.name} kept the schedule for {100 * share:.1f} % of its requests only "
                f"(late p99 {a.lateness_p99_ms:.1f} ms): {why}; the load it saw was lighter "
                "than the recording's"
            )
        if arm.requests and arm.failed == arm.requests:
            out.append(f"every request to {arm.name} failed: {next(iter(arm.errors))}")
    return out


# -- gates ----------------------------------------------------------------------------------


def _parse(text: str) -> Gate:
    """`loadtest compare`'s latency, throughput and errors gates (slo.py), or an answers gate
    (results.answers); no ratio gates."""
    gate = parse_gate(text)
    if gate.ratio:
        raise SloError(f"--slo {text!r}: a replay judges each arm alone, no ratio gates")
    return gate


def _judge(gate: Gate, report: ReplayReport) -> ReplayGate:
    names = [a.name for a in report.arms]
    if gate.arm is not None and gate.arm not in names:
        raise SloError(f"--slo {gate.expression!r} names arm {gate.arm!r}; the replay has "
                       f"{', '.join(map(repr, names))}")  # fmt: skip
    if gate.metric.startswith("answers."):
        arms = [a for a in report.arms if gate.arm in (None, a.name)]
        value = answers_value(gate.metric, (g for a in arms for g in a.answers))
        label = gate.arm or "every arm"
        why = "" if value is not None else "not judged: no answer could be compared"
        return ReplayGate(gate.expression, label, value, gate.threshold, passes(gate, value), why)
    arm = next(a for a in report.arms if a.name == (gate.arm or names[0]))
    if gate.metric == "errors":
        value = float(arm.failed)
    elif gate.metric == "throughput":
        value = arm.throughput_rps
    else:
        value = arm.latency_ms.get(gate.metric)
    return ReplayGate(gate.expression, arm.name, value, gate.threshold, passes(gate, value))


# -- files ----------------------------------------------------------------------------------


def write_report(report: ReplayReport, spec: ReplaySpec, out: Path, command: str) -> list[Path]:
    """OUT/replay.json, replay.md, shapes.png and, under OUT/answers, each of the requests that
    disagree most (its REST body, its gRPC bytes); the paths written."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    report.command = command
    saved = out / "answers"
    by_record: dict[int, Prepared] = {}
    if report.worst:
        numbers = sorted({d.record for d in report.worst})
        spec_one = replace(spec, records=tuple(numbers), from_model=None)
        _, records, _, _ = _selected(spec_one)
        columnar = None if spec.rest_format is None else spec.rest_format == "columnar"
        by_record = {p.index: p for p in prepare(records, indices=numbers, model=spec.model,
                                                  columnar=columnar)}  # fmt: skip
        saved.mkdir(exist_ok=True)
    written = []
    for d in report.worst:
        request = by_record[d.record]
        files = [saved / f"request-{d.record}.pb"]
        files[0].write_bytes(request.grpc)
        if request.rest_body is not None:
            files.append(saved / f"request-{d.record}.json")
            files[-1].write_bytes(request.rest_body)
        d.files = [str(f.relative_to(out)) for f in files]
        d.command = _again(spec, d.record)
        address = spec.arms.get(d.arm, "")
        if request.rest_body is not None and spec.protocol == "rest":
            base = address if "://" in address else f"http://{address}"
            d.curl = request.curl(base.rstrip("/"))
        written += files
    (out / "replay.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    (out / "replay.md").write_text(render_markdown(report))
    written += [out / "replay.json", out / "replay.md"]
    png = shapes_png(report)
    if png is not None:
        (out / "shapes.png").write_bytes(png)
        written.append(out / "shapes.png")
    return written


def _again(spec: ReplaySpec, record: int) -> str:
    """The command that replays `record` alone against the same arms."""
    words = ["graphserve", "loadtest", "replay", str(spec.traffic), "--records", str(record),
             "--rate", "1", "--protocol", spec.protocol]  # fmt: skip
    for name, address in spec.arms.items():
        words += ["--arm", f"{name}={address}"]
    if spec.model:
        words += ["--model", spec.model]
    return shlex.join(words)
