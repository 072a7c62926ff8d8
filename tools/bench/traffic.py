"""`python -m tools.bench traffic` (`make bench`): what request logging costs, and how well real
traffic is replayed and checked (issue 50's goals T1-T5).

Every server is a `graphserve serve` process of its own on loopback serving the exported example
mlp; this process is the client (so the client's CPU is not the server's).

    T1  server CPU per request with logging at rate 1.0 and 0.1 against logging off: three graph
        servers alike but for --request-log, 16 closed-loop clients over gRPC and REST, in
        windows whose order reverses each round (the CPU window of tools/bench/measure.py)
    T2  the locust generator's req/s per core (`loadtest compare`'s sweep, one locust process)
        with a traffic file of distinct requests (`traffic make`, batch 1) against one payload,
        sent every time: 16 closed-loop users against the graph server, over gRPC and REST, an
        untimed run of each, then three rounds of the two in an order reversed each round (one
        run after the other favoured the second by as much as the goal's margin), the
        generator's CPU per request from the report, the median of the rounds' ratios
    T3  `graphserve loadtest replay` (a process of its own, as a user runs it) of a 500 req/s
        recording (`traffic make --rate 500`) against the graph server, over gRPC and REST,
        after an untimed replay of its first second: the share of requests sent within 2 ms of
        their time
    T4  a server logging to a full file system (a tmpfs of 64 KiB, mounted here: root only)
        under 16 clients over both APIs: failed requests, and the records it counted as dropped
    T5  traffic of mixed shapes (1-16 rows) sent through a server logging every request, its log
        replayed against the graph and the eager server (answers against the log's and across
        arms), and against a version whose one output bias moved by 1: every answer found
        different, and named
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from graphserve.core.processes import ServerProcess
from tools.bench.clients import Load, grpc_caller, merge, rest_caller
from tools.bench.measure import CpuWindow, cpu_window
from tools.bench.served import Requests, encode_requests

__all__ = ["TrafficPlan", "render_traffic", "run_traffic", "traffic_goals", "write_traffic"]

MODEL = "mlp"
PROTOCOLS = ("grpc", "rest")
LOG_ARMS = {"off": None, "rate 0.1": 0.1, "rate 1.0": 1.0}
GOAL_T1_FULL = 1.10  # CPU per request at rate 1.0 over logging off, at most
GOAL_T1_SAMPLED = 1.02  # at rate 0.1
GOAL_T2 = 0.9  # the generator's req/s per core with a traffic file over one payload, at least
GOAL_T3_ON_TIME = 0.995
FULL_DISK_BYTES = 64 << 10

Say = Callable[[str], None]


@dataclass(frozen=True)
class TrafficPlan:
    clients: int = 16
    window_s: float = 5.0
    rounds: int = 3
    warmup_s: float = 2.0
    replay_rate: float = 500.0
    replay_s: float = 10.0
    disk_s: float = 10.0
    mixed_requests: int = 300
    distinct_requests: int = 1000
    t2_rounds: int = 3
    t2_windows: int = 2


def _stem(arm: str) -> str:
    return arm.replace(" ", "")


def _serve(args: list[str], work: Path, name: str) -> ServerProcess:
    log = work / f"{name.replace(' ', '-')}.log"
    return ServerProcess.on_free_ports(args, MODEL, log).start()


@contextlib.contextmanager
def _servers(specs: Mapping[str, list[str]], work: Path) -> Iterator[dict[str, ServerProcess]]:
    started: dict[str, ServerProcess] = {}
    try:
        for name, args in specs.items():
            started[name] = _serve(args, work, name)
        yield started
    finally:
        for process in started.values():
            process.stop()


def _caller(protocol: str, server: ServerProcess, requests: Requests) -> Callable[[], bytes]:
    if protocol == "grpc":
        return grpc_caller(server.grpc_address, requests.grpc)
    return rest_caller(str(server.rest_address), requests.rest_path, requests.rest_body)


def _pid(server: ServerProcess) -> int:
    assert server.process is not None
    return server.process.pid


def _cpu(windows: list[CpuWindow]) -> dict[str, Any]:
    load: Load = merge([w.load for w in windows])
    cpu = sum(w.cpu_s for w in windows)
    return {
        **load.summary(),
        "server_cpu_s": cpu,
        "server_cpu_us_per_request": cpu / load.requests * 1e6 if load.requests else None,
    }


def _t1(models: Path, work: Path, plan: TrafficPlan, requests: Requests, say: Say) -> dict:
    """Three graph servers, logging off, at 0.1 and at 1.0, under the same closed loop."""
    graph = ["graph", "--model-base-path", str(models / MODEL), "--model-name", MODEL]
    specs = {}
    for arm, rate in LOG_ARMS.items():
        extra = [] if rate is None else ["--request-log", str(work / "t1" / _stem(arm)),
                                         "--request-log-rate", str(rate)]  # fmt: skip
        specs[arm] = [*graph, *extra]
    (work / "t1").mkdir(exist_ok=True)
    order = [(protocol, arm) for protocol in PROTOCOLS for arm in LOG_ARMS]
    windows: dict[tuple[str, str], list[CpuWindow]] = {key: [] for key in order}
    with _servers(specs, work) as servers:

        def run(protocol: str, arm: str, seconds: float) -> CpuWindow:
            server = servers[arm]
            return cpu_window(lambda: _caller(protocol, server, requests), _pid(server),
                              clients=plan.clients, seconds=seconds)  # fmt: skip

        for protocol, arm in order:
            run(protocol, arm, plan.warmup_s)
        for round_ in range(plan.rounds):
            say(f"T1: {plan.clients} clients, round {round_ + 1} of {plan.rounds}")
            for protocol, arm in order:
                windows[(protocol, arm)].append(run(protocol, arm, plan.window_s))
            order.reverse()
        logged = {
            arm: sum(p.stat().st_size for p in (work / "t1").glob(f"{_stem(arm)}-*.tfrecord"))
            for arm, rate in LOG_ARMS.items()
            if rate is not None
        }
    # The logs go, and the kernel writes back what is dirty now, not during T3's schedule: a
    # run that left a few hundred MB to flush made T3's server twice as slow at its start.
    shutil.rmtree(work / "t1", ignore_errors=True)
    os.sync()
    return {
        "clients": plan.clients,
        "arms": {p: {arm: _cpu(windows[(p, arm)]) for arm in LOG_ARMS} for p in PROTOCOLS},
        "logged_bytes": logged,
    }


def _replay(traffic: Path, arms: dict[str, str], protocol: str, **options: Any) -> Any:
    from graphserve.loadtest.replay import ReplaySpec, replay

    return replay(ReplaySpec(traffic=traffic, arms=arms, protocol=protocol, **options))


def _replay_command(
    traffic: Path, address: str, protocol: str, work: Path, *extra: str
) -> dict[str, Any]:
    """`graphserve loadtest replay` as a user runs it, in a process of its own; its report."""
    import json
    import sys

    out = work / f"t3-{protocol}"
    done = subprocess.run(
        [sys.executable, "-m", "graphserve", "loadtest", "replay", str(traffic), "--arm",
         f"graph={address}", "--protocol", protocol, "--out", str(out), "--output", "json",
         *extra],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"loadtest replay exited {done.returncode}: {done.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _t3(models: Path, work: Path, plan: TrafficPlan, say: Say) -> dict:
    """A recording of `replay_rate` req/s, replayed at its times against the graph server."""
    from graphserve.loadtest.traffic.make import MakeSpec, make_traffic, parse_distribution

    recording = work / "t3.tfrecord"
    count = int(plan.replay_rate * plan.replay_s)
    make_traffic(MakeSpec(models / MODEL, recording, count=count, rate=plan.replay_rate,
                          batch_sizes=parse_distribution("1", "--batch-sizes")))  # fmt: skip
    graph = ["graph", "--model-base-path", str(models / MODEL), "--model-name", MODEL]
    out: dict[str, Any] = {"rate": plan.replay_rate, "requests": count}
    with _servers({"graph": graph}, work) as servers:
        server = servers["graph"]
        for protocol in PROTOCOLS:
            say(f"T3: {count} requests at {plan.replay_rate:g} req/s over {protocol}")
            address = server.grpc_address if protocol == "grpc" else str(server.rest_address)
            # its first second untimed: the server's first requests, and the replay's own
            _replay_command(recording, address, protocol, work, "--limit", str(count // 10))
            (arm,) = _replay_command(recording, address, protocol, work)["arms"]
            adherence = arm["adherence"]
            out[protocol] = {
                "adherence": {**adherence,
                              "on_time_share": adherence["on_time"] / adherence["sent"]},
                "latency_ms": arm["latency_ms"],
                "failed": arm["failed"],
            }  # fmt: skip
    return out


T2_ARMS = ("one payload", "traffic file")


def _t2(models: Path, work: Path, plan: TrafficPlan, say: Say) -> dict:
    """Each protocol: an untimed run of each arm, then `plan.t2_rounds` rounds of the two, their
    order reversed each round (AB BA AB), so that a machine slowing or speeding up over the
    minutes favours neither: the goal is the median of the rounds' ratios."""
    from graphserve.loadtest.comparison.run import Arm, CompareSpec, LoadSpec, compare
    from graphserve.loadtest.traffic.make import MakeSpec, make_traffic

    distinct = work / "t2.tfrecord"
    make_traffic(MakeSpec(models / MODEL, distinct, count=plan.distinct_requests, seed=2))
    files = {"one payload": None, "traffic file": distinct}
    load = LoadSpec(loads=(plan.clients,), warmup_s=plan.warmup_s, window_s=plan.window_s,
                    min_windows=plan.t2_windows, max_windows=plan.t2_windows)  # fmt: skip
    untimed = LoadSpec(loads=(plan.clients,), warmup_s=plan.warmup_s, window_s=plan.window_s,
                       min_windows=1, max_windows=1)  # fmt: skip
    out: dict[str, Any] = {"requests": plan.distinct_requests, "users": plan.clients,
                           "rounds": plan.t2_rounds, "windows": plan.t2_windows}  # fmt: skip
    graph = ["graph", "--model-base-path", str(models / MODEL), "--model-name", MODEL]
    with _servers({"graph": graph}, work) as servers:
        server = servers["graph"]
        for protocol in PROTOCOLS:
            address = server.grpc_address if protocol == "grpc" else server.rest_address
            assert address is not None

            def run(name: str, label: str, spec_load: LoadSpec, to: str = str(address),
                    p: str = protocol) -> dict[str, Any]:  # fmt: skip
                say(f"T2 {p}: {name}, {label}")
                spec = CompareSpec(arms=(Arm("graph", to),), protocol=p, model_name=MODEL,
                                   load=spec_load, traffic=files[name])  # fmt: skip
                report = compare(spec, work / f"t2-{p}-{_stem(name)}-{_stem(label)}")
                arm = report.steps[0].arms["graph"]
                us = arm.generator.cpu_us_per_request if arm.generator else None
                return {
                    "throughput_rps": arm.throughput_rps,
                    "generator_cpu_us_per_request": us,
                    "rps_per_core": 1e6 / us if us else None,
                    "failures": arm.failures,
                    "answers_mismatched": (
                        sum(a["mismatched"] for a in report.answers.agreements["graph"])
                        if report.answers else None
                    ),
                }  # fmt: skip

            for name in T2_ARMS:
                run(name, "untimed", untimed)
            rounds = []
            for index in range(plan.t2_rounds):
                order = T2_ARMS if index % 2 == 0 else T2_ARMS[::-1]
                runs = {name: run(name, f"round {index + 1}", load) for name in order}
                one, many = (runs[name]["rps_per_core"] for name in T2_ARMS)
                ratio = many / one if many is not None and one else None
                rounds.append({"order": list(order), **runs, "ratio": ratio})
            out[protocol] = rounds
    return out


@contextlib.contextmanager
def _full_disk(where: Path) -> Iterator[str | None]:
    """A tmpfs of FULL_DISK_BYTES at `where` (yields None), or why there cannot be one."""
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        yield "not root: mounting a small file system to fill needs root"
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FULL_DISK_BYTES}", "tmpfs",
                           str(where)], capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        yield f"mount -t tmpfs failed: {done.stderr.strip()}"
        return
    try:
        yield None
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _log_counts(server: ServerProcess) -> dict[str, float]:
    from graphserve.loadtest.generator.scrape import fetch, samples

    text = fetch(f"http://{server.rest_address}/monitoring/prometheus/metrics", 5.0) or ""
    _, found = samples(text, ["graphserve_request_log_records"])
    counts: dict[str, float] = {}
    for name, labels, value in found:
        if name.endswith("_total"):
            key = labels["outcome"] + (f" ({labels['reason']})" if labels.get("reason") else "")
            counts[key] = counts.get(key, 0.0) + value
    return counts


def _t4(models: Path, work: Path, plan: TrafficPlan, requests: Requests, say: Say) -> dict:
    """A server whose log's file system is full, under load over both APIs."""
    with _full_disk(work / "full") as why_not:
        if why_not is not None:
            return {"measured": False, "why": why_not}
        graph = ["graph", "--model-base-path", str(models / MODEL), "--model-name", MODEL,
                 "--metrics", "--request-log", str(work / "full" / MODEL)]  # fmt: skip
        out: dict[str, Any] = {"measured": True, "file_system_bytes": FULL_DISK_BYTES}
        with _servers({"full": graph}, work) as servers:
            server = servers["full"]
            for protocol in PROTOCOLS:
                say(f"T4: {plan.clients} clients over {protocol} for {plan.disk_s:g} s, log full")

                def make(p: str = protocol) -> Callable[[], bytes]:
                    return _caller(p, server, requests)

                window = cpu_window(make, _pid(server), clients=plan.clients, seconds=plan.disk_s)
                out[protocol] = window.load.summary()
            time.sleep(1.0)  # the writer's last attempts
            out["records"] = _log_counts(server)
            out["served_after"] = _caller("grpc", server, requests)() != b""
    return out


def _changed_weight(models: Path, work: Path) -> Path:
    """BASE/mlp with one version: the export's, one bias of the last layer moved by 1."""
    import tensorflow as tf

    from graphserve.core.versions import version_dirs

    source = version_dirs(models / MODEL)
    loaded = tf.saved_model.load(str(source[max(source)]))
    serving = loaded.signatures["serving_default"]
    bias = next(v for v in serving.variables if v.shape == (10,))
    bias.assign_add(tf.one_hot(3, 10))
    base = work / "changed" / MODEL
    tf.saved_model.save(loaded, str(base / "1"), signatures={"serving_default": serving})
    return base


def _t5(models: Path, work: Path, plan: TrafficPlan, say: Say) -> dict:
    """Mixed traffic logged by the graph server, replayed against graph, eager and a version
    with one weight changed."""
    from graphserve.loadtest.traffic.make import MakeSpec, make_traffic, parse_distribution

    mixed = work / "t5-mixed.tfrecord"
    make_traffic(MakeSpec(models / MODEL, mixed, count=plan.mixed_requests, rate=200.0,
                          batch_sizes=parse_distribution("1-16", "--batch-sizes")))  # fmt: skip
    logs = work / "t5-log"
    logs.mkdir(exist_ok=True)
    graph = ["graph", "--model-base-path", str(models / MODEL), "--model-name", MODEL]
    changed = _changed_weight(models, work)
    specs = {
        "logging": [*graph, "--request-log", str(logs / MODEL), "--request-log-file-size", "1g"],
        "graph": graph,
        "eager": ["eager", "examples:mlp", "--model-name", MODEL],
        "changed": ["graph", "--model-base-path", str(changed), "--model-name", MODEL],
    }
    out: dict[str, Any] = {"requests": plan.mixed_requests, "batch_sizes": "1-16"}
    with _servers(specs, work) as servers:
        say(f"T5: {plan.mixed_requests} mixed requests through the logging server")
        _replay(mixed, {"logging": servers["logging"].grpc_address}, "grpc")
        servers["logging"].stop()  # its log flushed and closed
        (log,) = logs.glob(f"{MODEL}-*.tfrecord")
        for protocol in PROTOCOLS:

            def address(name: str, p: str = protocol) -> str:
                s = servers[name]
                return s.grpc_address if p == "grpc" else str(s.rest_address)

            say(f"T5: the log against graph and eager over {protocol}")
            same = _replay(log, {"graph": address("graph"), "eager": address("eager")}, protocol,
                           rate=100.0)  # fmt: skip
            say(f"T5: the log against the changed version over {protocol}")
            other = _replay(log, {"changed": address("changed")}, protocol, rate=100.0)
            out[protocol] = {
                "same": _answers(same),
                "changed": {**_answers(other), "worst": [d.to_json() for d in other.worst]},
            }
    return out


def _answers(report: Any) -> dict[str, Any]:
    return {
        "sent": report.sent,
        "failed": sum(arm.failed for arm in report.arms),
        "agreements": [
            {"arm": arm.name, **agreement.to_json()}
            for arm in report.arms
            for agreement in arm.answers
        ],
    }


def run_traffic(plan: TrafficPlan, work: Path, say: Say = print) -> dict[str, Any]:
    """T1-T5 on the example mlp exported into `work`; the results, goals included."""
    from graphserve.exporter import ExportSpec, export_model
    from graphserve.loadtest.generator.payloads import build_payload
    from graphserve.model.examples.mlp import INPUT_SIGNATURE

    models = work / "models"
    export_model(ExportSpec(source="examples:mlp", name=MODEL, base_path=models))
    requests = encode_requests(MODEL, build_payload(INPUT_SIGNATURE, batch_size=1, seed=0))
    started = time.perf_counter()
    results: dict[str, Any] = {"plan": asdict(plan), "model": MODEL}
    results["t1"] = _t1(models, work, plan, requests, say)
    results["t2"] = _t2(models, work, plan, say)
    results["t3"] = _t3(models, work, plan, say)
    results["t4"] = _t4(models, work, plan, requests, say)
    results["t5"] = _t5(models, work, plan, say)
    results["seconds"] = time.perf_counter() - started
    results["goals"] = traffic_goals(results)
    return results


# -- goals and page ---------------------------------------------------------------------------


def _ratio(results: dict[str, Any], protocol: str, arm: str) -> float | None:
    arms = results["t1"]["arms"][protocol]
    off, on = arms["off"]["server_cpu_us_per_request"], arms[arm]["server_cpu_us_per_request"]
    return on / off if on is not None and off else None


def not_run(results: dict[str, Any]) -> list[str]:
    """What this run could not measure, and why."""
    said = []
    if not results["t4"]["measured"]:
        said.append(f"T4 (logging to a full disk under load) is not run: {results['t4']['why']}")
    return said


def _t2_ratio(results: dict[str, Any], protocol: str) -> float | None:
    ratios = [r["ratio"] for r in results["t2"][protocol] if r["ratio"] is not None]
    return statistics.median(ratios) if ratios else None


def traffic_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """T1, T3, T4 (when measured) and T5 with pass or miss, from the measurements alone."""
    goals = []
    for protocol in PROTOCOLS:
        for key, arm, bound in (("T1a", "rate 1.0", GOAL_T1_FULL),
                                ("T1b", "rate 0.1", GOAL_T1_SAMPLED)):  # fmt: skip
            value = _ratio(results, protocol, arm)
            goals.append({
                "key": f"{key} {protocol}",
                "what": f"server CPU per request, logging at {arm} over logging off",
                "value": value, "goal": f"<= {bound:g}x",
                "passed": value is not None and value <= bound,
            })  # fmt: skip
    for protocol in PROTOCOLS:
        value = _t2_ratio(results, protocol)
        goals.append({
            "key": f"T2 {protocol}",
            "what": f"the generator's req/s per core with {results['t2']['requests']:,} distinct "
                    "requests over its figure with one payload (median of "
                    f"{results['t2']['rounds']} rounds)",
            "value": value, "goal": f">= {GOAL_T2:g}x",
            "passed": value is not None and value >= GOAL_T2,
        })  # fmt: skip
    for protocol in PROTOCOLS:
        share = results["t3"][protocol]["adherence"]["on_time_share"]
        goals.append({
            "key": f"T3 {protocol}",
            "what": f"replay of a {results['t3']['rate']:g} req/s recording: sent within 2 ms",
            "value": share, "goal": f">= {100 * GOAL_T3_ON_TIME:g} %",
            "passed": share is not None and share >= GOAL_T3_ON_TIME,
        })  # fmt: skip
    t4 = results["t4"]
    if t4["measured"]:
        failed = sum(t4[p]["errors"] for p in PROTOCOLS)
        dropped = sum(v for k, v in t4["records"].items() if k.startswith("dropped"))
        goals.append({"key": "T4", "what": "logging to a full disk under load: failed requests "
                      "(records counted dropped)", "value": failed,
                      "goal": "0 failed, drops counted",
                      "passed": failed == 0 and dropped > 0 and t4["served_after"]})  # fmt: skip
    for protocol in PROTOCOLS:
        t5 = results["t5"][protocol]
        mismatched = sum(a["mismatched"] for a in t5["same"]["agreements"])
        compared = sum(a["compared"] for a in t5["same"]["agreements"])
        goals.append({"key": f"T5a {protocol}", "what": "the graph server's log replayed against "
                      "graph and eager: answers past tolerance (of those compared)",
                      "value": mismatched, "goal": "0",
                      "passed": compared > 0 and mismatched == 0})  # fmt: skip
        found = t5["changed"]
        wrong = sum(a["mismatched"] for a in found["agreements"])
        goals.append({"key": f"T5b {protocol}", "what": "against a version with one weight "
                      "changed: answers found past tolerance, of those sent",
                      "value": wrong, "goal": f"{found['sent']} (all), named",
                      "passed": wrong == found["sent"] > 0 and bool(found["worst"])})  # fmt: skip
    return goals


def _number(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def render_traffic(results: dict[str, Any]) -> str:
    """traffic.md: the goals, then each measurement."""
    lines = ["# Request logging and real traffic (issue 50's goals)", "",
             "Graph servers of the example mlp, each a `graphserve serve` process; this process "
             "is the client. `python -m tools.bench traffic` regenerates this page.", "",
             "## Goals", "",
             "| goal | what | value | goal | verdict |", "|---|---|---:|---|---|"]  # fmt: skip
    for g in results["goals"]:
        verdict = "pass" if g["passed"] else "**miss**"
        value = _number(g["value"])
        if g["key"].startswith(("T1", "T2")) and g["value"] is not None:
            value = f"{g['value']:.3f}×"
        if g["key"].startswith("T3") and g["value"] is not None:
            value = f"{100 * g['value']:.2f} %"
        lines.append(f"| {g['key']} | {g['what']} | {value} | {g['goal']} | {verdict} |")
    lines += ["", *(f"{said}." for said in not_run(results))]
    t1 = results["t1"]
    lines += ["", f"## T1: the server's CPU per request, {t1['clients']} clients", "",
              "| protocol | logging | requests | req/s | p50 ms | p99 ms | server CPU µs/req |",
              "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for protocol, arms in t1["arms"].items():
        for arm, row in arms.items():
            lines.append(
                f"| {protocol} | {arm} | {row['requests']} | {row['rps']:.0f} "
                f"| {_number(row['p50_ms'])} | {_number(row['p99_ms'])} "
                f"| {_number(row['server_cpu_us_per_request'])} |"
            )
    lines += ["", "Bytes the logging servers wrote: " + ", ".join(
        f"{arm} {size:,}" for arm, size in t1["logged_bytes"].items()) + "."]  # fmt: skip
    t2 = results["t2"]
    lines += ["", f"## T2: the generator with {t2['requests']:,} distinct requests, "
              f"{t2['users']} users", "",
              f"Each protocol: an untimed run of each, then {t2['rounds']} rounds of "
              f"{t2['windows']} window{'s' * (t2['windows'] != 1)} each, the order reversed each "
              "round; the goal is the "
              "median of the rounds' ratios (the traffic file's req/s per core over one "
              "payload's).", "",
              "| protocol | round | sending | req/s | generator CPU µs/req | req/s per core "
              "| failed | answers mismatched | ratio |",
              "|---|---:|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for protocol in PROTOCOLS:
        for index, run in enumerate(t2[protocol], 1):
            for name in run["order"]:
                row = run[name]
                ratio = f"{run['ratio']:.3f}×" if name == "traffic file" and run["ratio"] else ""
                lines.append(
                    f"| {protocol} | {index} | {name} | {_number(row['throughput_rps'])} "
                    f"| {_number(row['generator_cpu_us_per_request'])} "
                    f"| {_number(row['rps_per_core'])} | {_number(row['failures'])} "
                    f"| {_number(row['answers_mismatched'])} | {ratio} |"
                )
    t3 = results["t3"]
    lines += ["", f"## T3: replay of {t3['requests']} requests at {t3['rate']:g} req/s", "",
              "| protocol | on time | late p50 ms | late p99 ms | late max ms | p50 ms | p99 ms "
              "| late | every sender in flight | waited for a CPU |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for protocol in PROTOCOLS:
        a, lat = t3[protocol]["adherence"], t3[protocol]["latency_ms"]
        lines.append(
            f"| {protocol} | {100 * a['on_time_share']:.2f} % | {_number(a['lateness_p50_ms'])} "
            f"| {_number(a['lateness_p99_ms'])} | {_number(a['lateness_max_ms'])} "
            f"| {_number(lat['p50'])} | {_number(lat['p99'])} | {a['sent'] - a['on_time']} "
            f"| {a['late_senders_busy']} | {_number(a.get('late_cpu_wait'))} |"
        )
    lines += ["", "A late request waited for a CPU when its sending thread was runnable and not "
              "running (Linux's schedstat) for half its lateness or more: the machine's two cores "
              "were busy, the server's threads among them.", ""]  # fmt: skip
    t4 = results["t4"]
    lines += ["", "## T4: logging to a full disk", ""]
    if t4["measured"]:
        lines += [f"A tmpfs of {t4['file_system_bytes'] // 1024} KiB holds the log.", "",
                  "| protocol | requests | failed | req/s |", "|---|---:|---:|---:|"]  # fmt: skip
        for protocol in PROTOCOLS:
            row = t4[protocol]
            lines.append(f"| {protocol} | {row['requests']} | {row['errors']} "
                         f"| {row['rps']:.0f} |")  # fmt: skip
        lines += ["", "Records by outcome: " + ", ".join(
            f"{k} {v:,.0f}" for k, v in sorted(t4["records"].items())) + "; answered after: "
            + ("yes" if t4["served_after"] else "**no**") + "."]  # fmt: skip
    else:
        lines.append(f"Not run: {t4['why']}.")
    t5 = results["t5"]
    lines += ["", f"## T5: {t5['requests']} requests of {t5['batch_sizes']} rows, logged and "
              "replayed", "", "| protocol | arm | against | compared | mismatched |",
              "|---|---|---|---:|---:|"]  # fmt: skip
    for protocol in PROTOCOLS:
        for part in ("same", "changed"):
            for a in t5[protocol][part]["agreements"]:
                lines.append(f"| {protocol} | {a['arm']} | {a['reference']} | {a['compared']} "
                             f"| {a['mismatched']} |")  # fmt: skip
        worst = t5[protocol]["changed"]["worst"]
        if worst:
            d = worst[0]
            lines.append(f"| {protocol} | worst | record {d['record']} ({d['shape']}), output "
                         f"`{d['output']}`: {d['max_abs_error']:.3g} | | |")  # fmt: skip
    lines += ["", f"The whole run took {results['seconds']:.0f} s."]
    return "\n".join(lines) + "\n"


def write_traffic(results: dict[str, Any], out: Path) -> list[Path]:
    """OUT/traffic.json and OUT/traffic.md."""
    from tools.bench.published import write

    return write("traffic", results, out)
