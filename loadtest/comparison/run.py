"""The A/B comparison: one locust sweep over every arm, then the report.

    spec = CompareSpec(arms=(Arm("graph", "127.0.0.1:8500"), Arm("eager", "127.0.0.1:9500")))
    report = compare(spec, Path("out"))

The payload is built once (from a payload file, the SavedModel's signature or the first arm's
metadata, with a fixed seed) and encoded once into OUT/request.bin, so every arm gets exactly the
same bytes; or, under `--traffic FILE`, a traffic file's requests are encoded once into
OUT/requests.bin and every arm is sent them in order, cycling, its answers checked
(comparison/traffic.py).

Locust runs in a subprocess on loadtest/generator/sweepfile.py (or as a master with N local
workers and M that join from other machines: `graphserve loadtest worker --master-host ...`),
alternating the arms window by window; its raw records become the report
(loadtest/report/analysis.py), rendered by loadtest/report/render.py and checked against the SLO
gates (loadtest/results/slo.py).

TLS: an arm carries the ClientTls it is dialed with (`Arm.tls`: the command's --tls-* options,
or the system's CAs for a `grpcs://` / `https://` address alone); the plan's targets say by
their scheme which arms are TLS, and the locust processes get the options in their environment.
Before any load each arm is asked once, so that a TLS failure stops the run with its reason
(loadtest/generator/reach.py) instead of failing every request.

TensorFlow (through the payload and metadata modules) is imported inside `compare`, not at import.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from graphserve.core.client import rest_path
from graphserve.core.contract import SignatureContract
from graphserve.core.defaults import DEFAULT_METRICS_PATH
from graphserve.core.errors import LoadTestError, LocustRunError, PayloadError, SloError
from graphserve.core.execution import EXECUTION_FIELD, RUNNER_FIELD, arm_warning
from graphserve.core.inputs import InputSource
from graphserve.core.manifest import read_manifest
from graphserve.core.signature import SERVING_DEFAULT
from graphserve.core.tls import ClientTls
from graphserve.loadtest.generator.framed import REQUESTS
from graphserve.loadtest.generator.reach import check_metrics_tls, check_tls
from graphserve.loadtest.generator.targets import check_loopback, dial, scheme_tls, tls_env
from graphserve.loadtest.results.plan import PLAN_ENV, PLAN_FROM_MASTER, ArmTarget, Plan
from graphserve.loadtest.results.run import (
    REPORT_SCHEMA,
    ArmInfo,
    Calibration,
    CalibrationStep,
    ColdStartRun,
    ColdStarts,
    Environment,
    Payload,
    PayloadInput,
    Report,
    Settings,
    Step,
    TrafficPayload,
    Workers,
)

__all__ = [
    "SWEEPFILE",
    "Arm",
    "CompareSpec",
    "LoadSpec",
    "check_payload_protocol",
    "compare",
    "environment",
    "locust_commands",
    "model_name_of",
    "payload_specs",
    "run_tls",
    "with_metrics_probe",
    "worker_command",
    "worker_env",
]

SWEEPFILE = Path(__file__).parent.parent / "generator" / "sweepfile.py"
# Beyond the plan's longest run: locust start-up and shut-down; a run still alive is stuck.
_MARGIN_S = 120
_STOP_TIMEOUT_S = 5
_VERSIONED = ("graphserve", "tensorflow", "tensorflow-serving-api", "grpcio", "locust", "numpy")
# locust's own default master port: where `graphserve loadtest worker` looks without --master-port
DEFAULT_MASTER_PORT = 5557
_WORKER_ALLOW_REMOTE_ENV = (
    "GRAPHSERVE_WORKER_ALLOW_REMOTE"  # read by loadtest/generator/sweepfile.py
)


@dataclass(frozen=True)
class Arm:
    """A server to load: its name in the report, its address for the chosen protocol, where
    its Prometheus metrics are (None: no server-side breakdown), and the TLS it is dialed with
    (None: plaintext; see graphserve.loadtest.generator.targets.dial). Every TLS arm of a run
    has the same options (one set per locust process); an https:// metrics URL is scraped with
    them."""

    name: str
    address: str
    metrics_url: str | None = None
    details: dict[str, Any] = field(default_factory=dict)  # runner, server command, ...
    tls: ClientTls | None = None


@dataclass(frozen=True)
class LoadSpec:
    """How hard and how long: closed loop over `loads` users, or open loop at `loads` req/s."""

    mode: str = "closed"
    loads: tuple[float, ...] = (1,)
    arrivals: str = "constant"
    max_in_flight: int = 64
    warmup_s: float = 2.0
    window_s: float = 5.0
    min_windows: int = 3
    max_windows: int = 10
    stability_pct: float = 10.0


@dataclass(frozen=True)
class CompareSpec:
    """One comparison: the arms, the request (protocol, REST body format, model, signature,
    batch size, payload), the load, the locust workers, and the run's bounds and SLO gates.
    `model_name` defaults to the directory name of `model_base_path`, `baseline` to the last
    arm; `cold_start` holds cold starts measured beforehand, copied into the report."""

    arms: tuple[Arm, ...]
    protocol: str = "grpc"
    rest_format: str = "row"
    model_name: str | None = None  # None: the directory name of model_base_path (see below)
    signature_name: str = "serving_default"
    batch_size: int = 1
    payload_file: Path | None = None
    model_base_path: Path | None = None  # payload from the SavedModel, manifest in the report
    seed: int = 0
    load: LoadSpec = LoadSpec()
    workers: int = 0  # locust worker processes started here (0 and no expect_workers: one process)
    expect_workers: int = 0  # workers that join from elsewhere (`graphserve loadtest worker`)
    master_bind_host: str = "127.0.0.1"  # where the locust master listens for its workers
    master_bind_port: int | None = None  # None: DEFAULT_MASTER_PORT with expect_workers, else free
    workers_timeout_s: float = 60.0  # how long to wait for every worker to join
    max_requests: int | None = None
    allow_remote: bool = False
    baseline: str | None = None  # default: the last arm
    slo: tuple[str, ...] = ()
    max_failures: int | None = None
    cold_start: list[ColdStartRun] | None = None
    traffic: Path | None = None  # a traffic file's predict requests, cycled, answers checked
    traffic_model: str | None = None  # the file's model to send [default: the run's model]


def compare(
    spec: CompareSpec, out_dir: Path, progress: Callable[[dict[str, Any]], None] | None = None
) -> Report:
    """Run the sweep, write OUT/report.{json,md,html}, plots and raw data; return the report.

    `progress` gets an event (a dict with "event") as the run goes. Raises LoadTestError for a
    spec that cannot work (no arms, a bad arm name, bad loads or windows, no model name),
    RemoteTargetError for a non-loopback target without `allow_remote`, SloError for an
    unreadable gate, PayloadError when no payload can be built, LocustRunError when locust fails
    or leaves no results, ServerUnreachable when TLS is why an arm (or its metrics) cannot be
    reached. A missed SLO is not raised: it is in report.slo.passed.
    """
    from graphserve.loadtest.comparison.traffic import answers_check
    from graphserve.loadtest.results.slo import parse_gate

    spec = replace(spec, model_name=model_name_of(spec))
    _check(spec)
    gates = [parse_gate(text) for text in spec.slo]  # a bad gate fails before any load
    if spec.traffic is None and any(g.metric.startswith("answers.") for g in gates):
        raise SloError("--slo answers.*: the answers are checked under --traffic FILE only")
    _check_tls(spec)
    out_dir.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda _event: None)
    say({"event": "payload"})
    requests = None
    if spec.traffic is not None:
        requests, traffic = _traffic(spec, out_dir)
        inputs: dict[str, Any] = {}
        payload_source = f"--traffic {traffic.file}"
    else:
        inputs, payload_source = _payload(spec, out_dir)
        words = _words_only(spec, inputs)
        if words:
            say({"event": "warning", "message": words})
    plan = _plan(spec, out_dir)
    plan.dump(out_dir / "plan.json")
    served = _served(spec, say)
    started = time.time()
    _run_locust(spec, plan, out_dir, say)

    from graphserve.loadtest.report.analysis import analyze, read_raw
    from graphserve.loadtest.report.render import write_report
    from graphserve.loadtest.results.slo import evaluate

    raw = read_raw(out_dir)
    baseline = spec.baseline or spec.arms[-1].name
    steps = analyze(raw, plan, baseline)
    report = Report(
        schema=REPORT_SCHEMA,
        title=_title(spec, baseline),
        headline=[],  # one sentence per step, written with the report (loadtest/report/render.py)
        settings=_settings(spec, baseline, inputs, payload_source, traffic if requests else None),
        environment=environment(),
        arms={arm.name: _arm_info(arm, spec, served[arm.name]) for arm in spec.arms},
        steps=steps,
        truncated=raw.truncated or None,
        workers=_workers(spec, out_dir),
        elapsed_s=round(time.time() - started, 1),
        cold_start=ColdStarts(runs=spec.cold_start) if spec.cold_start else None,
        manifest=_manifest(spec.model_base_path),
        calibration=_calibration(steps, plan),
        slo=None,
    )
    if requests is not None:
        report.answers = answers_check(spec, requests, out_dir, baseline, report.manifest)
    report.slo = evaluate(gates, report, spec.max_failures)
    write_report(report, out_dir, raw.records)
    return report


def locust_commands(
    plan: Plan,
    out_dir: Path,
    master_port: int = 0,
    local_workers: int | None = None,
    bind_host: str = "127.0.0.1",
) -> list[list[str]]:
    """The locust command lines: one local process, or a master waiting for `plan.workers`
    workers and the `local_workers` of them (default: all) started here."""
    head = [
        *_locust_base(),
        "--headless",
        "--csv", str(out_dir / "locust"),
        "--only-summary",
        "--stop-timeout", str(_STOP_TIMEOUT_S),
    ]  # fmt: skip
    if not plan.workers:
        return [head]
    master = [
        *head,
        "--master",
        "--master-bind-host", bind_host,
        "--master-bind-port", str(master_port),
        "--expect-workers", str(plan.workers),
        # locust gives up a little after we do (our error names who came; its exit does not)
        "--expect-workers-max-wait", str(int(plan.workers_timeout_s) + 30),
        "--enable-rebalancing",  # a lost worker's users move to the others
    ]  # fmt: skip
    here = plan.workers if local_workers is None else local_workers
    worker = worker_command(_connect_host(bind_host), master_port)
    return [master, *([worker] * here)]


def worker_command(master_host: str, master_port: int = DEFAULT_MASTER_PORT) -> list[str]:
    """One locust worker of a comparison, run with `worker_env()`: it gets the plan and the
    request from the master when it joins, so it needs no file from the master's machine."""
    return [
        *_locust_base(),
        "--worker",
        "--master-host",
        master_host,
        "--master-port",
        str(master_port),
    ]


def worker_env(allow_remote: bool = False, tls: ClientTls | None = None) -> dict[str, str]:
    """The environment of a worker: the plan comes from the master; remote targets only when
    both this worker and the master's plan allow them; the plan's TLS targets (grpcs://,
    https://) dialed with `tls` (its own options: their files are on its own machine)."""
    from graphserve.core.logs import QUIET_TF_LOG_LEVEL, TF_LOG_LEVEL

    environ = {TF_LOG_LEVEL: QUIET_TF_LOG_LEVEL, **os.environ}
    return {
        **tls_env(environ, tls),
        PLAN_ENV: PLAN_FROM_MASTER,
        _WORKER_ALLOW_REMOTE_ENV: "1" if allow_remote else "0",
    }


def _locust_base() -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(SWEEPFILE), "--loglevel", "WARNING"]


def _connect_host(bind_host: str) -> str:
    """Where a worker on this machine reaches a master bound to `bind_host`."""
    if bind_host in ("", "*", "0.0.0.0"):
        return "127.0.0.1"
    if bind_host == "::":
        return "::1"
    return bind_host


def model_name_of(spec: CompareSpec) -> str:
    """The model the arms are asked for: `model_name` as given, else the directory name of
    `model_base_path` (models/mobilenet -> mobilenet, as `graphserve serve graph` names it).

    Raises LoadTestError when there is neither: TF Serving's APIs address a model by name and
    have no call that lists the models a server holds.
    """
    if spec.model_name:
        return spec.model_name
    if spec.model_base_path is not None:
        base = spec.model_base_path
        return base.name or base.resolve().name
    raise LoadTestError(
        "which model? pass --model-name NAME (the name the servers serve it under), or "
        "--model-base-path BASE/NAME, whose directory name is used"
    )


# ---------------------------------------------------------------------------------------------


def _check(spec: CompareSpec) -> None:
    if not spec.arms:
        raise LoadTestError("no arms to compare: pass at least one --arm NAME=HOST:PORT")
    names = [arm.name for arm in spec.arms]
    for name in names:
        # The name becomes a file name and a locust request name.
        if not name or not name.replace("-", "").replace("_", "").isalnum():
            raise LoadTestError(f"arm name {name!r}: use letters, digits, '-' and '_' only")
    if len(set(names)) != len(names):
        raise LoadTestError(f"arm names must be unique, got {', '.join(names)}")
    if spec.baseline is not None and spec.baseline not in names:
        raise LoadTestError(f"baseline {spec.baseline!r} is not an arm: {', '.join(names)}")
    if spec.protocol not in ("grpc", "rest"):
        raise LoadTestError(f"protocol {spec.protocol!r}: expected grpc or rest")
    load = spec.load
    if load.mode not in ("closed", "open") or not load.loads or min(load.loads) <= 0:
        raise LoadTestError("loads must be positive numbers of users (closed) or req/s (open)")
    if load.min_windows < 1 or load.max_windows < load.min_windows:
        raise LoadTestError(
            f"windows: need 1 <= min ({load.min_windows}) <= max ({load.max_windows})"
        )
    if load.window_s <= 0 or load.warmup_s < 0:
        raise LoadTestError("the window must be longer than 0 s and the warm-up at least 0 s")
    if spec.workers < 0 or spec.expect_workers < 0 or spec.workers_timeout_s <= 0:
        raise LoadTestError(
            "workers: --workers and --expect-workers take 0 or more, --workers-timeout more than 0"
        )
    port = spec.master_bind_port
    if port is not None and not 0 <= port <= 65535:
        raise LoadTestError(f"--master-bind-port {port}: expected a port, 0 to 65535")
    for arm in spec.arms:
        check_loopback(arm.address, spec.allow_remote)
        if arm.metrics_url:
            check_loopback(arm.metrics_url, spec.allow_remote)
    run_tls(spec.arms)
    _check_traffic(spec)


def _check_traffic(spec: CompareSpec) -> None:
    from graphserve.loadtest.generator.recorded import TrafficLoadError

    if spec.traffic is not None and spec.payload_file is not None:
        raise TrafficLoadError(
            "--traffic and --payload-file both say what to send: give one (a traffic file's "
            "requests, or one payload sent every time)"
        )
    if spec.traffic_model is not None and spec.traffic is None:
        raise TrafficLoadError("--traffic-model picks records of a traffic file: pass --traffic")


def run_tls(arms: Sequence[Arm]) -> ClientTls | None:
    """The TLS options of a run's locust processes: those of its TLS arms (None: no arm is TLS).
    LoadTestError when two arms have different options: a process has one set."""
    options = {arm.tls for arm in arms if arm.tls is not None}
    if len(options) > 1:
        raise LoadTestError(
            "the arms are dialed with different TLS options: one set per run (--tls-ca, "
            "--tls-cert, --tls-key, --tls-server-name apply to every arm)"
        )
    return options.pop() if options else None


def _check_tls(spec: CompareSpec) -> None:
    """Ask every arm (and its metrics) once: ServerUnreachable when TLS is why one cannot be
    reached, before a run whose every request would fail for it."""
    tls = run_tls(spec.arms)
    for arm in spec.arms:
        target, dialed = dial(spec.protocol, arm.address, arm.tls)
        check_tls(f"arm {arm.name}", spec.protocol, target, dialed, model_name_of(spec))
        if arm.metrics_url:
            check_metrics_tls(arm.metrics_url, scheme_tls(arm.metrics_url, tls))


def _payload(spec: CompareSpec, out_dir: Path) -> tuple[dict[str, Any], str]:
    """Write OUT/payload.npz and the encoded OUT/request.bin; return the inputs and their origin."""
    from graphserve.loadtest.generator.payloads import (
        build_payload,
        grpc_request_bytes,
        load_payload,
        rest_body,
        save_payload,
    )

    check_payload_protocol(spec.payload_file, spec.protocol)
    if spec.payload_file is not None and spec.payload_file.suffix == ".json":
        body = spec.payload_file.read_bytes()
        (out_dir / "request.bin").write_bytes(body)
        return {}, _given(spec.payload_file)
    if spec.payload_file is not None:
        inputs, source = load_payload(spec.payload_file), _given(spec.payload_file)
    else:
        specs, origin, recorded = payload_specs(spec)
        signature = spec.signature_name or SERVING_DEFAULT
        inputs = build_payload(specs, spec.batch_size, spec.seed, recorded, signature)
        how = f"rows of {recorded.label}" if recorded.given(signature) else "generated"
        source = f"{how} with seed {spec.seed} from {origin}"
    save_payload(out_dir / "payload.npz", inputs)
    if spec.protocol == "grpc":
        body = grpc_request_bytes(inputs, model_name_of(spec), spec.signature_name)
    else:
        body = rest_body(inputs, spec.signature_name, columnar=spec.rest_format == "columnar")
    (out_dir / "request.bin").write_bytes(body)
    return inputs, source


def _words_only(spec: CompareSpec, inputs: Mapping[str, Any]) -> str | None:
    """The warning for string inputs generated from a server's metadata alone, which says only
    "string": phrases of words, where the export's manifest would tell images (a model that
    decodes its strings then fails every request)."""
    if spec.model_base_path is not None or spec.payload_file is not None:
        return None
    strings = sorted(name for name, array in inputs.items() if array.dtype.kind in "OSU")
    if not strings:
        return None
    return (
        f"string input {', '.join(strings)}: phrases of words, from the server's metadata "
        "alone; if the model decodes it (images, tf.Examples), pass --model-base-path BASE "
        "(the export's manifest records what it takes) or --payload-file"
    )


def _traffic(spec: CompareSpec, out_dir: Path) -> tuple[list[Any], TrafficPayload]:
    """The traffic file's requests, checked against the signature and encoded (comparison/
    traffic.py)."""
    from graphserve.loadtest.comparison.traffic import traffic_requests

    specs, origin, _ = payload_specs(spec)
    return traffic_requests(spec, model_name_of(spec), specs, origin, out_dir)


def check_payload_protocol(payload_file: Path | None, protocol: str) -> None:
    """A `.json` payload is a REST predict body, which gRPC cannot send: PayloadError."""
    if payload_file is not None and payload_file.suffix == ".json" and protocol != "rest":
        raise PayloadError(
            f"{str(payload_file)!r} is a REST predict body (.json), which gRPC cannot send: "
            "--protocol grpc takes an .npz of inputs, one array per input name; send the .json "
            "with --protocol rest"
        )


def _given(payload_file: Path) -> str:
    """The payload's origin in the report: the file as given, absolute, so the report names it
    wherever it is read."""
    return f"--payload-file {payload_file.resolve()}"


def payload_specs(spec: CompareSpec) -> tuple[list[Any], str, InputSource]:
    """The payload's input specs, where they were read, and the inputs the export recorded in
    its manifest (samples file, ranges; empty for a server's metadata or no manifest)."""
    from graphserve.loadtest.generator.metadata import fetch_specs

    if spec.model_base_path is not None:
        from tensorflow_serving.apis import get_model_metadata_pb2

        from graphserve.core.errors import ExportError
        from graphserve.core.savedmodel import signature_defs
        from graphserve.loadtest.generator.metadata import specs_from_signature_map

        version = _latest_version(spec.model_base_path)
        try:
            signature_map = get_model_metadata_pb2.SignatureDefMap()
            for name, signature in signature_defs(version).items():
                signature_map.signature_def[name].CopyFrom(signature)
        except (ExportError, OSError) as exc:
            raise PayloadError(f"cannot read the signatures of {version}: {exc}") from None
        specs = specs_from_signature_map(signature_map, spec.signature_name)
        contract = SignatureContract(spec.signature_name or SERVING_DEFAULT, tuple(specs))
        try:
            recorded = InputSource.recorded(read_manifest(version), [contract])
        except (ExportError, OSError, ValueError) as exc:
            raise PayloadError(f"the inputs recorded in {version}'s manifest: {exc}") from None
        return specs, f"SavedModel {version}", recorded
    first = spec.arms[0]
    target, tls = dial(spec.protocol, first.address, first.tls)
    specs = fetch_specs(spec.protocol, target, model_name_of(spec), spec.signature_name, tls=tls)
    return specs, f"metadata of {first.name} ({first.address})", InputSource()


def _latest_version(base: Path) -> Path:
    """The newest version the graph server serves under `base` (a bare SavedModel is one)."""
    from graphserve.core.versions import served_versions

    dirs = served_versions(base)
    if not dirs:
        raise PayloadError(
            f"{str(base)!r} holds no numbered version directory and is not a SavedModel"
        )
    return dirs[max(dirs)]


def _plan(spec: CompareSpec, out_dir: Path) -> Plan:
    arms = tuple(
        ArmTarget(
            name=arm.name,
            address=arm.address,
            target=dial(spec.protocol, arm.address, arm.tls)[0],
            metrics_url=arm.metrics_url,
        )
        for arm in spec.arms
    )
    load = spec.load
    return Plan(
        arms=arms,
        protocol=spec.protocol,
        body_file=str((out_dir / "request.bin").resolve()),
        bodies_file=str((out_dir / REQUESTS).resolve()) if spec.traffic is not None else "",
        rest_path=rest_path(model_name_of(spec), "predict"),
        model_name=model_name_of(spec),
        mode=load.mode,
        loads=tuple(load.loads),
        out_dir=str(out_dir.resolve()),
        arrivals=load.arrivals,
        max_in_flight=load.max_in_flight,
        warmup_s=load.warmup_s,
        window_s=load.window_s,
        min_windows=load.min_windows,
        max_windows=load.max_windows,
        stability_pct=load.stability_pct,
        seed=spec.seed,
        max_requests=spec.max_requests,
        workers=spec.workers + spec.expect_workers,
        workers_timeout_s=spec.workers_timeout_s,
        allow_remote=spec.allow_remote,
    )


def _run_locust(
    spec: CompareSpec, plan: Plan, out_dir: Path, say: Callable[[dict[str, Any]], None]
) -> None:
    """Run the sweep's locust processes to the end, relaying their progress events.

    Raises LoadTestError when the workers do not all join within `workers_timeout_s` (naming
    who came) or one refuses the plan's targets, LocustRunError when locust fails or stalls.
    """
    from graphserve.core.processes import free_port

    events = out_dir / "events.jsonl"
    events.unlink(missing_ok=True)
    for stale in (out_dir / "raw" / "records.npz", out_dir / "raw" / "phases.json"):
        stale.unlink(missing_ok=True)
    tls = run_tls(spec.arms)
    master_env = {
        **worker_env(spec.allow_remote, tls),
        PLAN_ENV: str((out_dir / "plan.json").resolve()),
    }
    port = spec.master_bind_port
    if port is None:
        port = DEFAULT_MASTER_PORT if spec.expect_workers else free_port()
    commands = locust_commands(plan, out_dir, port, spec.workers, spec.master_bind_host)
    log = (out_dir / "locust.log").open("wb")
    processes = [
        subprocess.Popen(
            command,
            env=master_env if index == 0 else worker_env(spec.allow_remote, tls),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for index, command in enumerate(commands)
    ]
    watch = _WorkerWatch(spec, port, say)
    started = time.monotonic()
    offset = 0
    try:
        while processes[0].poll() is None:
            waited = time.monotonic() - started
            watch.check(waited)
            if waited > plan.longest_s() + _MARGIN_S + spec.workers_timeout_s:
                raise LocustRunError(
                    f"locust did not finish within {plan.longest_s() + _MARGIN_S:.0f} s and was "
                    f"stopped; its output is in {out_dir / 'locust.log'}"
                )
            offset = _relay(events, offset, watch)
            time.sleep(0.2)
        _relay(events, offset, watch)
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        log.close()
    watch.check(0.0)
    if not (out_dir / "raw" / "phases.json").exists():
        tail = (out_dir / "locust.log").read_text(errors="replace").strip().splitlines()[-8:]
        raise LocustRunError(
            f"locust exited with code {processes[0].returncode} and wrote no results: "
            + (" | ".join(tail) or "(no output)")
        )


class _WorkerWatch:
    """Relays events and keeps count of the workers that joined, to fail clearly when they do
    not all come in time or one refuses the plan."""

    def __init__(self, spec: CompareSpec, port: int, say: Callable[[dict[str, Any]], None]):
        self.spec, self.port, self.say = spec, port, say
        self.expected = spec.workers + spec.expect_workers
        self.joined: list[str] = []
        self.refused: str | None = None
        self.started = False  # the first phase began: every worker was there

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "worker":
            self.joined.append(f"{event.get('host')} (pid {event.get('pid')})")
        elif kind == "worker_refused":
            self.refused = (
                f"a worker on {event.get('host')} refused the run: {event.get('message')}"
            )
        elif kind in ("step", "phase"):
            self.started = True
        self.say(event)

    def check(self, waited_s: float) -> None:
        if self.refused:
            raise LoadTestError(self.refused)
        late = self.expected and not self.started and len(self.joined) < self.expected
        if late and waited_s > self.spec.workers_timeout_s:
            came = ", ".join(self.joined) or "none"
            raise LoadTestError(
                f"waited {self.spec.workers_timeout_s:g} s for {self.expected} load-test workers; "
                f"{len(self.joined)} joined: {came}. Start the missing ones with `graphserve "
                f"loadtest worker --master-host <this machine> --master-port {self.port}` (the "
                f"master listens on {self.spec.master_bind_host}:{self.port})"
            )


def _relay(path: Path, offset: int, say: Callable[[dict[str, Any]], None]) -> int:
    if not path.exists():
        return offset
    with path.open("rb") as f:
        f.seek(offset)
        chunk = f.read()
    complete = chunk[: chunk.rfind(b"\n") + 1]
    for line in complete.splitlines():
        try:
            say(json.loads(line))
        except ValueError:
            continue
    return offset + len(complete)


def _title(spec: CompareSpec, baseline: str) -> str:
    others = [a.name for a in spec.arms if a.name not in (baseline, "null")]
    loop = "closed loop" if spec.load.mode == "closed" else f"open loop ({spec.load.arrivals})"
    protocol = "gRPC" if spec.protocol == "grpc" else f"REST ({spec.rest_format})"
    # One arm is measured, not compared: "graph", never "graph vs graph".
    arms = f"{' and '.join(others)} vs {baseline}" if others else baseline
    return f"{model_name_of(spec)}: {arms}, {protocol}, {loop}"


def _settings(
    spec: CompareSpec,
    baseline: str,
    inputs: dict[str, Any],
    payload_source: str,
    traffic: TrafficPayload | None = None,
) -> Settings:
    return Settings(
        protocol=spec.protocol,
        rest_format=spec.rest_format,
        **asdict(spec.load),
        model_name=model_name_of(spec),
        signature_name=spec.signature_name,
        batch_size=spec.batch_size,
        seed=spec.seed,
        workers=spec.workers,
        expect_workers=spec.expect_workers,
        max_requests=spec.max_requests,
        baseline=baseline,
        arm_order=[arm.name for arm in spec.arms],
        payload=Payload(
            source=payload_source,
            file="requests.bin" if traffic else "payload.npz" if inputs else "request.bin",
            inputs={
                name: PayloadInput(dtype=str(array.dtype), shape=list(array.shape))
                for name, array in inputs.items()
            },
            traffic=traffic,
        ),
        locust={"stop_timeout_s": _STOP_TIMEOUT_S, "sweepfile": SWEEPFILE.name},
    )


def environment() -> Environment:
    """Where a measurement ran: time, host, platform, CPUs and the versions that matter."""
    versions = {"python": sys.version.split()[0]}
    for dist in _VERSIONED:
        try:
            versions[dist] = importlib_metadata.version(dist)
        except importlib_metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return Environment(
        timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
        hostname=socket.gethostname(),
        platform=platform.platform(),
        cpus=os.cpu_count(),
        python=versions["python"],
        versions=versions,
        command=[Path(sys.argv[0]).name, *sys.argv[1:]],
    )


def _served(spec: CompareSpec, say: Callable[[dict[str, Any]], None]) -> dict[str, dict[str, str]]:
    """What each arm's server says it runs (`runner`, `execution`; empty for a server that does
    not say, such as TF Serving), with a warning for an eager arm that is not eager."""
    from graphserve.loadtest.generator.metadata import served_as

    model = model_name_of(spec)
    served = {}
    for arm in spec.arms:
        target, tls = dial(spec.protocol, arm.address, arm.tls)
        served[arm.name] = served_as(spec.protocol, target, model, tls=tls)
    for name, said in served.items():
        warning = arm_warning(name, said.get(RUNNER_FIELD, ""), said.get(EXECUTION_FIELD, ""))
        if warning:
            say({"event": "warning", "message": warning})
    return served


def _arm_info(arm: Arm, spec: CompareSpec, served: Mapping[str, str]) -> ArmInfo:
    tls = arm.tls
    dialed = {} if tls is None else {"tls": _tls_info(tls)}
    return ArmInfo(
        address=arm.address,
        protocol=spec.protocol,
        metrics_url=arm.metrics_url,
        **{**arm.details, **served},  # the server's own word on how it runs, where it says
        **dialed,
    )


def _tls_info(tls: ClientTls) -> dict[str, str | None]:
    """What a TLS arm was dialed with, for the report: the files' absolute paths (never their
    text, nor the key's path)."""
    return {
        "ca": str(tls.ca.resolve()) if tls.ca else None,
        "cert": str(tls.cert.resolve()) if tls.cert else None,
        "server_name": tls.server_name,
    }


def _calibration(steps: Sequence[Step], plan: Plan) -> Calibration | None:
    """The null endpoint's numbers per step: the ceiling of this generator and server stack."""
    from graphserve.loadtest.report.analysis import CALIBRATION_ARM

    arm = next((a for a in plan.arms if a.name == CALIBRATION_ARM), None)
    if arm is None:
        return None
    return Calibration(
        null_endpoint=arm.address,
        arm=CALIBRATION_ARM,
        steps=[
            CalibrationStep(
                load=step.load,
                throughput_rps=step.arms[CALIBRATION_ARM].throughput_rps,
                p50_ms=step.arms[CALIBRATION_ARM].latency_ms.p50,
            )
            for step in steps
        ],
    )


def _workers(spec: CompareSpec, out_dir: Path) -> Workers | None:
    """Who generated the load (loadtest/generator/workers.py); None for a single local process."""
    from graphserve.loadtest.generator.workers import workers_section

    document = json.loads((out_dir / "raw" / "phases.json").read_text())
    names = [arm.name for arm in spec.arms]
    return workers_section(document, names, remote=spec.expect_workers > 0)


def _manifest(base: Path | None) -> dict[str, Any] | None:
    if base is None:
        return None
    try:
        path = _latest_version(base) / "assets.extra" / "graphserve.json"
        document: dict[str, Any] = json.loads(path.read_text())
        return document
    except (PayloadError, OSError, ValueError):
        return None


def with_metrics_probe(arms: Sequence[Arm], protocol: str) -> tuple[Arm, ...]:
    """REST arms without a metrics URL get the TF Serving path on their own port if it answers
    (over HTTPS for a TLS arm)."""
    from graphserve.loadtest.generator.scrape import scrape

    probed = []
    for arm in arms:
        if arm.metrics_url is None and protocol == "rest":
            url = dial(protocol, arm.address, arm.tls)[0] + DEFAULT_METRICS_PATH
            if scrape(url, "", tls=arm.tls) is not None:
                arm = replace(arm, metrics_url=url)
        probed.append(arm)
    return tuple(probed)
