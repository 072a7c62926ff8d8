"""`graphserve loadtest ...`: parses arguments and renders results; the work is in `compare`,
`rollout` and `many` (loadtest/comparison, rollouts, manymodels).

Only typer, rich and the standard library load here, so `graphserve --help` stays fast:
TensorFlow and locust are imported when a comparison actually runs.

Every command that loads a server takes the same four TLS options (graphserve.clikit.tls:
--tls-ca, --tls-cert, --tls-key, --tls-server-name) and `grpcs://` / `https://` addresses; the
options apply to every address given, which a `grpc://` or `http://` scheme contradicts (a
usage error). The servers a command starts itself serve plaintext.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from graphserve.clikit import (
    TlsCa,
    TlsCert,
    TlsKey,
    TlsServerName,
    client_tls,
    option_seconds,
    stderr,
)
from graphserve.core.errors import EXIT_MISSED, exit_epilog
from graphserve.core.logs import quiet_tensorflow
from graphserve.core.tls import ClientTls, TlsConfigError

if TYPE_CHECKING:
    from graphserve.loadtest.comparison.findmax import SearchSpec
    from graphserve.loadtest.comparison.run import CompareSpec
    from graphserve.loadtest.results.rollout import RolloutReport
    from graphserve.loadtest.results.run import Report

__all__ = ["EXIT_SLO", "app", "dialed_tls", "parse_loads"]

app = typer.Typer(help="Load-test TF Serving-compatible servers with locust.", no_args_is_help=True)

EXIT_SLO = EXIT_MISSED  # the run worked and a gate (--slo, --max-failures) was missed


class Protocol(StrEnum):
    grpc = "grpc"
    rest = "rest"


class RestFormat(StrEnum):
    row = "row"
    columnar = "columnar"


class Arrivals(StrEnum):
    constant = "constant"
    poisson = "poisson"


class OutputFormat(StrEnum):
    text = "text"
    json = "json"


def parse_loads(text: str, option: str) -> tuple[float, ...]:
    """`1,4,16,64` -> (1, 4, 16, 64); each a positive number (users must be whole)."""
    try:
        loads = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        loads = ()
    if not loads or min(loads) <= 0 or (option == "--users" and any(x % 1 for x in loads)):
        kind = "whole numbers of users" if option == "--users" else "request rates (req/s)"
        raise typer.BadParameter(
            f"{text!r}: expected a comma-separated list of positive {kind}, e.g. 1,4,16",
            param_hint=option,
        )
    return loads


def _pairs(values: list[str], option: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values:
        name, sep, address = value.partition("=")
        if not sep or not name.strip() or not address.strip():
            raise typer.BadParameter(f"{value!r}: expected NAME=ADDRESS", param_hint=option)
        pairs[name.strip()] = address.strip()
    return pairs


def dialed_tls(address: str, tls: ClientTls | None, option: str) -> ClientTls | None:
    """The TLS `address` is dialed with: the options `tls`, the system's CAs for `grpcs://` or
    `https://` alone, None (plaintext); a usage error naming `option` when its scheme
    contradicts the options (`grpc://`, `http://`) or is none of those."""
    try:
        return ClientTls.for_address(address.strip(), tls)[1]
    except (TlsConfigError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint=f"'{option}'") from None


# Options every command that loads named arms takes alike (compare, replay).
GraphArm = Annotated[str | None, typer.Option("--graph", help="shorthand for --arm graph=ADDR")]
EagerArm = Annotated[str | None, typer.Option("--eager", help="shorthand for --arm eager=ADDR")]
AllowRemote = Annotated[
    bool, typer.Option("--allow-remote", help="allow targets that are not on this machine")
]
# compare, rollout and many (what each checks of the answers, its docstring says)
TrafficFile = Annotated[
    Path | None,
    typer.Option(
        "--traffic",
        help="send a traffic file's predict requests (a request log, a warm-up file, "
        "`graphserve traffic make`) in place of one payload, in order, cycling",
        show_default=False,
    ),
]


def named_arms(arm: list[str] | None, graph: str | None, eager: str | None) -> dict[str, str]:
    """--arm NAME=ADDRESS (in order), then --graph and --eager: NAME -> address."""
    addresses = _pairs(arm or [], "--arm")
    for name, address in (("graph", graph), ("eager", eager)):
        if address:
            addresses[name] = address
    return addresses


@app.callback()
def loadtest() -> None:
    """Load-test TF Serving-compatible servers with locust."""


@app.command(
    epilog=exit_epilog(
        {
            EXIT_SLO: "an --slo or --max-failures gate was missed; with --find-max, an arm "
            "held none of the loads tried."
        }
    )
)
def compare(
    arm: Annotated[
        list[str] | None,
        typer.Option(help="an arm to load, NAME=HOST:PORT (repeat; the last is the baseline)"),
    ] = None,
    graph: GraphArm = None,
    eager: EagerArm = None,
    metrics: Annotated[
        list[str] | None,
        typer.Option(help="an arm's Prometheus URL, NAME=URL (server-side time breakdown)"),
    ] = None,
    model_base_path: Annotated[
        Path | None,
        typer.Option(help="self-managed: serve BASE/NAME (and read the payload from it)"),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            help="self-managed: the model source for the eager servers [default: the one the "
            "export's manifest records]"
        ),
    ] = None,
    serve: Annotated[
        str | None,
        typer.Option(
            help="self-managed servers: graph,eager,eager-predict,eager-function [default: "
            "graph,eager; graph alone when no source is given or recorded]"
        ),
    ] = None,
    calibrate: Annotated[
        bool, typer.Option(help="self-managed: add the null endpoint (same stack, no model)")
    ] = False,
    cold_start: Annotated[
        bool, typer.Option(help="self-managed: measure time to ready and first requests first")
    ] = False,
    protocol: Annotated[Protocol, typer.Option(help="API to load")] = Protocol.grpc,
    rest_format: Annotated[RestFormat, typer.Option(help="REST body format")] = RestFormat.row,
    users: Annotated[
        str | None, typer.Option(help="closed loop: concurrent users per step, e.g. 1,4,16,64")
    ] = None,
    rate: Annotated[
        str | None, typer.Option(help="open loop: target req/s per step, e.g. 100,200,400")
    ] = None,
    arrivals: Annotated[Arrivals, typer.Option(help="open loop arrivals")] = Arrivals.constant,
    max_in_flight: Annotated[
        int, typer.Option(min=1, help="open loop: users sending the arrivals")
    ] = 64,
    warmup: Annotated[str, typer.Option(help="per arm and step, not measured")] = "2s",
    window: Annotated[str, typer.Option(help="length of one measurement window")] = "5s",
    min_windows: Annotated[int, typer.Option(min=1, help="windows per arm and step")] = 3,
    max_windows: Annotated[int, typer.Option(min=1, help="until stable, at most this")] = 10,
    stability: Annotated[
        float, typer.Option(min=0, help="stable: last windows' rps and p50 within this %")
    ] = 10.0,
    duration: Annotated[
        str | None,
        typer.Option(help="fixed measured time per arm and step (sets the window count)"),
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="rows per request")] = 1,
    payload_file: Annotated[
        Path | None, typer.Option(help=".npz of inputs, or a REST .json body")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of the random payload and bootstrap")] = 0,
    traffic: TrafficFile = None,
    traffic_model: Annotated[
        str | None,
        typer.Option(help="with --traffic: the file's records of this model [default: the run's]"),
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option(help="model to call [default: the --model-base-path directory's name]"),
    ] = None,
    signature_name: Annotated[str, typer.Option(help="signature to call")] = "serving_default",
    workers: Annotated[
        int, typer.Option(min=0, help="locust worker processes here (0: one local process)")
    ] = 0,
    expect_workers: Annotated[
        int,
        typer.Option(
            min=0, help="also wait for this many workers from elsewhere (`loadtest worker`)"
        ),
    ] = 0,
    master_bind_host: Annotated[
        str, typer.Option(help="where the locust master listens (0.0.0.0: other machines)")
    ] = "127.0.0.1",
    master_bind_port: Annotated[
        int | None,
        typer.Option(
            min=0, max=65535, help="the master's port [default: 5557 with --expect-workers]"
        ),
    ] = None,
    workers_timeout: Annotated[
        str, typer.Option(help="how long to wait for every worker to join")
    ] = "60s",
    max_requests: Annotated[
        int | None, typer.Option(min=1, help="stop the run after this many requests")
    ] = None,
    baseline: Annotated[
        str | None, typer.Option(help="arm the ratios divide by [default: the last arm]")
    ] = None,
    slo: Annotated[
        list[str] | None,
        typer.Option(help="gate, e.g. 'p99<50ms', 'graph.p50<2ms', 'ratio.p50<0.6' (repeat)"),
    ] = None,
    max_failures: Annotated[
        int | None, typer.Option(min=0, help="gate: at most this many failed requests")
    ] = None,
    find_max: Annotated[
        bool,
        typer.Option(
            "--find-max",
            help="search the most load each arm holds within the --slo gates, from the first "
            "--users or --rate",
        ),
    ] = False,
    max_load: Annotated[
        float | None,
        typer.Option(min=0, help="find-max: the highest load to try (users or req/s)"),
    ] = None,
    max_probes: Annotated[
        int, typer.Option(min=1, help="find-max: at most this many probes per arm")
    ] = 8,
    precision: Annotated[
        float,
        typer.Option(min=0, help="find-max: stop when held and missed loads are this % apart"),
    ] = 10.0,
    allow_remote: AllowRemote = False,
    out: Annotated[
        Path | None, typer.Option(help="output directory [default: loadtest-reports/<UTC time>]")
    ] = None,
    output: Annotated[
        OutputFormat, typer.Option(help="json: only the report JSON on stdout")
    ] = OutputFormat.text,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    tls_server_name: TlsServerName = None,
) -> None:
    """Load every arm alike, in alternating windows, over a sweep of loads; write the report.

    Address mode loads running servers (--arm/--graph/--eager); self-managed mode
    (--model-base-path) starts the servers itself and stops them after: the eager servers run
    --source, else the source the export's manifest records, with the --input (and other
    signature flags) the export was given. The model is --model-name, else the directory name
    of --model-base-path (models/mobilenet: mobilenet).
    Writes OUT/report.json, report.md, report.html, PNG plots, locust CSVs and raw/records.npz.
    With --traffic every arm is sent a traffic file's predict requests in their order, cycling
    (each encoded once), and its first answer to each is checked against the log's and the
    baseline's (the report's Answers; --slo answers.mismatch==0 gates them).
    Over TLS: grpcs:// or https:// arms, or the --tls-* options (every address arm; the
    servers started here serve plaintext); https:// metrics URLs are scraped with them.
    Exits 1 when the run fails, an arm cannot be reached for TLS or gets no successful request,
    2 for bad arguments or a refused target, 3 when an --slo or --max-failures gate is missed.
    """
    from graphserve.core.errors import LoadTestError, PayloadError, ServerUnreachable
    from graphserve.loadtest.comparison.run import (
        Arm,
        CompareSpec,
        LoadSpec,
        check_payload_protocol,
    )
    from graphserve.model.traffic import TrafficError

    addresses = named_arms(arm, graph, eager)
    metrics_urls = _pairs(metrics or [], "--metrics")
    quiet = output is OutputFormat.json
    # Self-managed servers: the --serve kinds when asked for, with a source, or without addresses
    # (the source the export recorded serves then), and the null endpoint for --calibrate.
    kinds: list[str] = []
    if model_base_path is not None:
        if serve is not None or source or not addresses:
            kinds, alone = _serve_kinds(serve, model_base_path, source)
            if alone and not quiet:
                stderr.print(f"[yellow]warning:[/yellow] {alone}", highlight=False)
        if calibrate:
            kinds.append("null")
    elif calibrate or source or serve is not None:
        raise typer.BadParameter(
            "--source, --serve and --calibrate start servers on a SavedModel: add "
            "--model-base-path",
            param_hint="'--model-base-path'",
        )
    managed = bool(kinds)
    if not addresses and not managed:
        raise typer.BadParameter(
            "name the arms (--arm NAME=HOST:PORT, --graph, --eager) or let graphserve start "
            "them (--model-base-path BASE/NAME [--source SOURCE])",
            param_hint="'--arm'",
        )
    tls = client_tls(tls_ca, tls_cert, tls_key, tls_server_name)
    if tls is not None and not addresses:
        raise typer.BadParameter(
            "the servers `loadtest compare` starts serve plaintext: the --tls-* options are for "
            "servers already running (--arm NAME=HOST:PORT, --graph, --eager)",
            param_hint="'--tls-ca'",
        )
    dialed = {name: dialed_tls(address, tls, "--arm") for name, address in addresses.items()}
    try:  # before any work: a usage error, exit 2
        check_payload_protocol(payload_file, protocol.value)
    except PayloadError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--payload-file'") from None
    load = _load_spec(
        LoadSpec, users, rate, arrivals, max_in_flight, warmup, window, min_windows, max_windows,
        stability, duration,
    )  # fmt: skip
    if not model_name and model_base_path is None:
        # TF Serving's APIs address a model by name and cannot list what a server holds.
        raise typer.BadParameter(
            "which model do the servers serve? pass --model-name NAME, or --model-base-path "
            "BASE/NAME (its directory names the model)",
            param_hint="'--model-name'",
        )
    spec = CompareSpec(
        arms=tuple(Arm(n, a, metrics_urls.get(n), tls=dialed[n]) for n, a in addresses.items()),
        protocol=protocol.value,
        rest_format=rest_format.value,
        model_name=model_name,
        signature_name=signature_name,
        batch_size=batch_size,
        payload_file=payload_file,
        model_base_path=model_base_path,
        seed=seed,
        load=load,
        workers=workers,
        expect_workers=expect_workers,
        master_bind_host=master_bind_host,
        master_bind_port=master_bind_port,
        workers_timeout_s=option_seconds(workers_timeout, "--workers-timeout"),
        max_requests=max_requests,
        allow_remote=allow_remote,
        baseline=baseline,
        slo=tuple(slo or ()),
        max_failures=max_failures,
        traffic=traffic,
        traffic_model=traffic_model,
    )
    out_dir = out or Path("loadtest-reports") / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    search = None
    if find_max:
        from graphserve.loadtest.comparison.findmax import SearchSpec

        search = SearchSpec(max_load=max_load, max_probes=max_probes, precision_pct=precision)
    quiet_tensorflow()  # the payload and metadata code import it
    try:
        report = _run(spec, out_dir, managed, kinds, source, cold_start, quiet, search)
    except (LoadTestError, ServerUnreachable, TlsConfigError, TrafficError) as exc:
        stderr.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=exc.exit_code) from None
    finish(report, out_dir, quiet)


def _serve_kinds(
    serve: str | None, model_base_path: Path, source: str | None
) -> tuple[list[str], str | None]:
    """The --serve kinds; without --serve, graph and eager, or the graph server alone when no
    source is given and the newest version has no manifest recording one (a SavedModel that
    graphserve did not write), with why in words. An unreadable manifest keeps eager, to be
    reported with it."""
    if serve is not None:
        return [k.strip() for k in serve.split(",") if k.strip()], None
    if source is None:
        from graphserve.core.errors import LoadTestError
        from graphserve.loadtest.comparison.managed import export_record

        try:
            record = export_record(model_base_path)
        except LoadTestError:  # run_managed reads it again and says why it cannot
            return ["graph", "eager"], None
        if record is None or record.source is None:
            return ["graph"], (
                f"the graph server alone, no eager arm: {model_base_path} has no graphserve "
                "manifest naming the model's Python source (a SavedModel graphserve did not "
                "export); pass --source MODULE:FACTORY (or a .keras file) for the eager server, "
                "or --serve graph to ask for the graph server alone"
            )
    return ["graph", "eager"], None


def _run(
    spec: CompareSpec,
    out_dir: Path,
    managed: bool,
    kinds: list[str],
    source: str | None,
    cold_start: bool,
    quiet: bool,
    search: SearchSpec | None = None,
) -> Report:
    from functools import partial

    from graphserve.loadtest.comparison.findmax import find_max
    from graphserve.loadtest.comparison.managed import Run, run_managed
    from graphserve.loadtest.comparison.run import compare as run_compare
    from graphserve.loadtest.comparison.run import with_metrics_probe

    printer = None if quiet else ProgressPrinter()
    say = (lambda _m: None) if quiet else (lambda m: stderr.print(f"[dim]{m}[/dim]"))
    extra = with_metrics_probe(spec.arms, spec.protocol)
    run: Run = run_compare if search is None else partial(find_max, search=search)
    if managed:
        return run_managed(
            spec, out_dir, kinds=kinds, source=source, extra_arms=extra, cold_start=cold_start,
            say=say, progress=printer, run=run,
        )  # fmt: skip
    from dataclasses import replace

    return run(replace(spec, arms=extra), out_dir, printer)


def finish(report: Report, out_dir: Path, quiet: bool, print_json: bool = True) -> None:
    """Print the report (table, or JSON on stdout when quiet and `print_json`), then exit 1 when
    an arm got no successful request, 3 when a gate was missed."""
    from graphserve.loadtest.report.render import render_table
    from graphserve.loadtest.results.slo import describe

    if quiet:
        if print_json:
            typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        Console().print(render_table(report))
        stderr.print(f"report: {out_dir / 'report.html'} (and report.md, report.json)")
    empty = [
        name
        for step in report.steps
        for name, arm in step.arms.items()
        if arm.latency_ms.p50 is None
    ]
    if empty or not report.steps:
        names = ", ".join(sorted(set(empty))) or "every arm"
        stderr.print(
            f"[red]error:[/red] no successful request on {names}; see the errors in "
            f"{out_dir / 'report.md'} and {out_dir / 'locust.log'}",
            highlight=False,
        )
        raise typer.Exit(code=1)
    slo = report.slo
    if report.find_max is not None and slo is not None and not slo.passed:
        # A search misses gates on purpose; what fails it is an arm that held no load at all.
        for name, arm in report.find_max.arms.items():
            if arm.max_load is None:
                stderr.print(
                    f"[red]SLO missed:[/red] {name} held none of the loads tried "
                    f"({' and '.join(report.find_max.slo)})",
                    highlight=False,
                )
        raise typer.Exit(code=EXIT_SLO)
    if slo is not None and not slo.passed:
        for line in describe(slo, mode=report.settings.mode):
            stderr.print(f"[red]SLO missed:[/red] {line}", highlight=False)
        raise typer.Exit(code=EXIT_SLO)


def _load_spec(
    load_spec: Any,
    users: str | None,
    rate: str | None,
    arrivals: Arrivals,
    max_in_flight: int,
    warmup: str,
    window: str,
    min_windows: int,
    max_windows: int,
    stability: float,
    duration: str | None,
) -> Any:
    if users and rate:
        raise typer.BadParameter("use --users (closed loop) or --rate (open loop), not both")
    window_s = option_seconds(window, "--window", minimum=0.5)
    if duration is not None:
        # A fixed measured time: exactly this many windows, no extension for stability.
        min_windows = max_windows = max(1, math.ceil(option_seconds(duration) / window_s))
    if max_windows < min_windows:
        raise typer.BadParameter(
            f"--max-windows {max_windows} is below --min-windows {min_windows}",
            param_hint="'--max-windows'",
        )
    return load_spec(
        mode="open" if rate else "closed",
        loads=parse_loads(rate, "--rate") if rate else parse_loads(users or "1", "--users"),
        arrivals=arrivals.value,
        max_in_flight=max_in_flight,
        warmup_s=option_seconds(warmup, "--warmup", minimum=0.0),
        window_s=window_s,
        min_windows=min_windows,
        max_windows=max_windows,
        stability_pct=stability,
    )


@app.command("worker")
def worker(
    master_host: Annotated[
        str, typer.Option(help="the machine running `loadtest compare --expect-workers N`")
    ],
    master_port: Annotated[
        int, typer.Option(min=1, max=65535, help="its --master-bind-port")
    ] = 5557,
    processes: Annotated[
        int, typer.Option(min=1, help="locust worker processes to run here (one per core)")
    ] = 1,
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote", help="load targets off this machine (the master must allow too)"
        ),
    ] = False,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    tls_server_name: TlsServerName = None,
) -> None:
    """Join a comparison from this machine: the master sends the plan and the request, this
    worker sends every request's record back. The plan's TLS arms (grpcs://, https://) are
    dialed with this worker's own --tls-* options (files on this machine; without them, the
    system's CAs). Exits when the master ends the run (or is gone for a minute); exits 1 when
    it cannot reach the master."""
    import subprocess

    from graphserve.loadtest.comparison.run import worker_command, worker_env

    tls = client_tls(tls_ca, tls_cert, tls_key, tls_server_name)
    command, env = worker_command(master_host, master_port), worker_env(allow_remote, tls)
    stderr.print(
        f"[dim]joining the load test at {master_host}:{master_port} with {processes} "
        f"process(es)[/dim]",
        highlight=False,
    )
    children = [subprocess.Popen(command, env=env) for _ in range(processes)]
    try:
        codes = [child.wait() for child in children]
    except KeyboardInterrupt:
        for child in children:
            child.terminate()
        codes = [child.wait() for child in children]
    failed = [code for code in codes if code != 0]
    if failed:
        stderr.print(
            f"[red]error:[/red] {len(failed)} of {processes} worker process(es) exited with "
            f"code {failed[0]}: is a comparison waiting at {master_host}:{master_port}?",
            highlight=False,
        )
        raise typer.Exit(code=1)


class ProgressPrinter:
    """Relays the sweep's events to stderr: steps, each arm's windows, warnings."""

    def __init__(self) -> None:
        self.steps = 0

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "payload":
            stderr.print("[dim]building the payload and starting locust[/dim]")
        elif kind == "worker":
            stderr.print(
                f"[dim]worker {event.get('joined')} of {event.get('expected')} joined: "
                f"{event.get('host')} (pid {event.get('pid')})[/dim]",
                highlight=False,
            )
        elif kind == "step":
            self.steps += 1
            load, users = event["load"], event["users"]
            stderr.rule(f"step {event['step'] + 1}: load {load:g} ({users} users)")
        elif kind == "window":
            rps = event.get("rps")
            p50 = event.get("p50_ms")
            stderr.print(
                f"  {event['arm']:<16} window {event['window'] + 1:>2}: "
                f"{'-' if rps is None else f'{rps:,.1f}'} req/s, "
                f"p50 {'-' if p50 is None else f'{p50:.3g}'} ms"
                f"{'  [green]stable[/green]' if event.get('stable') else ''}",
                highlight=False,
            )
        elif kind == "probe_start":
            stderr.rule(f"probe {event['probe']}: {event['arm']} at {event['load']:g}")
        elif kind == "probe":
            missed = f"[red]missed[/red] ({event['why']})"
            verdict = "[green]held[/green]" if event["held"] else missed
            stderr.print(f"  {event['arm']} at {event['load']:g}: {verdict}", highlight=False)
        elif kind in ("warning", "error"):
            stderr.print(f"[yellow]{kind}:[/yellow] {event.get('message')}", highlight=False)
        elif kind == "done" and event.get("truncated"):
            stderr.print(f"[yellow]run ended early:[/yellow] {event['truncated']}")


@app.command("rollout", epilog=exit_epilog({EXIT_SLO: "an --slo gate was missed (in its window)."}))
def rollout_command(
    address: Annotated[str, typer.Option(help="the server's gRPC API, HOST:PORT (loopback)")],
    model_base_path: Annotated[
        Path, typer.Option(help="BASE/NAME: the directory the server watches for versions")
    ],
    new_version: Annotated[
        Path | None,
        typer.Option(help="the SavedModel directory to push as the next version"),
    ] = None,
    push_existing: Annotated[
        bool,
        typer.Option(
            "--push-existing", help="push nothing: wait (--timeout) for a version pushed by others"
        ),
    ] = False,
    rate: Annotated[
        float | None, typer.Option(min=0.001, help="open loop: req/s [default: 200]")
    ] = None,
    users: Annotated[int | None, typer.Option(min=1, help="closed loop: concurrent users")] = None,
    before: Annotated[str, typer.Option(help="load before the push")] = "10s",
    after: Annotated[str, typer.Option(help="load after the swap ends")] = "30s",
    timeout: Annotated[
        str, typer.Option(help="for the push to come and the new version to be AVAILABLE")
    ] = "60s",
    slo: Annotated[
        list[str] | None,
        typer.Option(
            help="gates, e.g. 'errors==0,p99<50ms', 'during.p99<100ms' (windows: before, during, "
            "after; none: the whole run); repeat or separate with commas"
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "--model-name", help="model to call [default: the base path's name]"
        ),
    ] = None,
    signature_name: Annotated[str, typer.Option(help="signature to call")] = "serving_default",
    batch_size: Annotated[int, typer.Option(min=1, help="rows per request")] = 1,
    seed: Annotated[int, typer.Option(help="seed of the request's random inputs")] = 0,
    max_in_flight: Annotated[
        int, typer.Option(min=1, help="open loop: threads sending the arrivals")
    ] = 16,
    traffic: TrafficFile = None,
    traffic_model: Annotated[
        str | None,
        typer.Option(help="with --traffic: the file's records of this model [default: --model]"),
    ] = None,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("reports/rollout"),
    output: Annotated[
        OutputFormat, typer.Option(help="json: only rollout.json on stdout")
    ] = OutputFormat.text,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    tls_server_name: TlsServerName = None,
) -> None:
    """Swap a model's version under steady gRPC load and report what the clients saw.

    After --before, the new version is copied into BASE/NAME as the next version number (under
    a temporary name, then renamed: what a TF Serving file-system source needs); with
    --push-existing someone else pushes it. GetModelStatus is asked every 50 ms; the load goes
    on --after past the swap. With --traffic the load sends a traffic file's predict requests in
    order, cycling, and the report judges each record's answer from the new version against
    the old one's (gate: --slo answers.mismatch==0). Writes OUT/rollout.{md,json,html,png}.
    Over TLS: a grpcs:// address, or the --tls-* options (the load and the status polls
    alike). Exits 1 when the server cannot be reached (for TLS: why) or the swap did not
    complete, 2 for bad arguments (a traffic file that cannot be sent) or a target off
    loopback, 3 when an --slo gate is missed.
    """
    from graphserve.core.errors import EXIT_USAGE, GraphserveError, LoadTestError, ServerUnreachable
    from graphserve.loadtest.generator.targets import check_loopback
    from graphserve.loadtest.rollouts.run import RolloutSpec, is_saved_model, rollout

    if rate is not None and users is not None:
        raise typer.BadParameter("use --rate (open loop) or --users (closed loop), not both")
    if push_existing == (new_version is not None):
        raise typer.BadParameter(
            "pass --new-version DIR (the version to push), or --push-existing (it is pushed by "
            "someone else), not both",
            param_hint="'--new-version'",
        )
    if new_version is not None and not is_saved_model(new_version):
        raise typer.BadParameter(
            f"{new_version} is not a SavedModel directory (no saved_model.pb)",
            param_hint="'--new-version'",
        )
    if not push_existing and not model_base_path.is_dir():
        raise typer.BadParameter(
            f"{model_base_path} is not a directory: pass the BASE/NAME the server watches",
            param_hint="'--model-base-path'",
        )
    tls = dialed_tls(address, client_tls(tls_ca, tls_cert, tls_key, tls_server_name), "--address")
    spec = RolloutSpec(
        address=address,
        tls=tls,
        model_base_path=model_base_path,
        new_version=new_version,
        push_existing=push_existing,
        model_name=model,
        signature_name=signature_name,
        rate=rate,
        users=users,
        max_in_flight=max_in_flight,
        before_s=option_seconds(before, "--before", minimum=0.0),
        after_s=option_seconds(after, "--after", minimum=0.0),
        timeout_s=option_seconds(timeout, "--timeout"),
        slo=tuple(g.strip() for text in slo or () for g in text.split(",") if g.strip()),
        batch_size=batch_size,
        seed=seed,
        traffic=traffic,
        traffic_model=traffic_model,
    )
    quiet = output is OutputFormat.json
    say = (lambda _e: None) if quiet else _rollout_progress
    try:
        check_loopback(address)  # before TensorFlow's seconds of start-up
        quiet_tensorflow()  # the payload and metadata code import it
        report = rollout(spec, out, say)
    except (LoadTestError, ServerUnreachable, TlsConfigError) as exc:
        stderr.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=exc.exit_code) from None
    except GraphserveError as exc:  # the traffic file: a usage error, before any load
        stderr.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=EXIT_USAGE) from None
    finish_rollout(report, out, quiet)


def _rollout_progress(event: dict[str, Any]) -> None:
    kind = event.get("event")
    version = event.get("version")
    said = {
        "payload": "building the request from the server's metadata and starting locust "
        f"(serving v{event.get('old_version')})",
        "load_started": "load started",
        "waiting_for_push": "waiting for a new version to be pushed (--push-existing)",
        "pushed": f"v{version} copied into place",
        "swap_start": "the swap began",
        "new_available": f"v{version} AVAILABLE",
        "old_unloaded": f"v{version} unloaded",
        "swap_end": "the swap ended; load continues for --after",
        "stopping": "stopping the load and writing the report",
    }
    if kind in said:
        stderr.print(f"[dim]{said[kind]}[/dim]", highlight=False)


def finish_rollout(report: RolloutReport, out_dir: Path, quiet: bool) -> None:
    """Print the rollout (table, or rollout.json on stdout when quiet), then exit 1 when the
    swap did not complete, 3 when a gate was missed."""
    from graphserve.loadtest.rollouts.report import render_table

    if quiet:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        Console().print(render_table(report))
        stderr.print(f"report: {out_dir / 'rollout.html'} (and rollout.md, rollout.json)")
    if not report.swap.completed:
        stderr.print(f"[red]error:[/red] {report.swap.note}", highlight=False)
        raise typer.Exit(code=1)
    if report.slo is not None and not report.slo.passed:
        for gate in report.slo.gates:
            if not gate.passed:
                where = (
                    "(the new version's answers against the old one's)"
                    if gate.window == "answers"
                    else f"in the {gate.window} window"
                )
                value = "no value" if gate.value is None else f"{gate.value:.4g}"
                stderr.print(f"[red]SLO missed:[/red] {gate.expression} {where}: {value}",
                             highlight=False)  # fmt: skip
        raise typer.Exit(code=EXIT_SLO)


@app.command(
    "replay",
    epilog=exit_epilog(
        {EXIT_SLO: "an --slo gate was missed (answers.mismatch==0: an answer past its tolerance)."}
    ),
)
def replay_command(
    traffic: Annotated[
        Path,
        typer.Argument(
            help="a traffic file: a TFRecord of PredictionLogs (a request log, a warm-up file, "
            "`graphserve traffic make`)",
            show_default=False,
        ),
    ],
    arm: Annotated[
        list[str] | None,
        typer.Option(
            help="an arm to replay against, NAME=HOST:PORT (repeat; the last is the baseline)"
        ),
    ] = None,
    graph: GraphArm = None,
    eager: EagerArm = None,
    metrics: Annotated[
        list[str] | None,
        typer.Option(help="an arm's Prometheus URL, NAME=URL (the traces the replay added)"),
    ] = None,
    protocol: Annotated[Protocol, typer.Option(help="API to send over")] = Protocol.grpc,
    rest_format: Annotated[
        RestFormat | None,
        typer.Option(help="REST predict body format [default: row where the inputs allow]"),
    ] = None,
    speed: Annotated[
        float, typer.Option(help="the recorded times divided by this (2: twice as fast)")
    ] = 1.0,
    rate: Annotated[
        float | None,
        typer.Option(help="req/s in place of the recorded times (needed for a file without)"),
    ] = None,
    arrivals: Annotated[Arrivals, typer.Option(help="with --rate")] = Arrivals.constant,
    model: Annotated[
        str | None,
        typer.Option(help="send every record to this model [default: the one it names]"),
    ] = None,
    from_model: Annotated[
        str | None, typer.Option(help="only the records of this model [default: all]")
    ] = None,
    records: Annotated[
        str | None,
        typer.Option(help="only these records, by number in the file (0,17,42)"),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="at most this many requests")] = None,
    duration: Annotated[
        str | None, typer.Option(help="send nothing scheduled later than this (e.g. 60s)")
    ] = None,
    max_in_flight: Annotated[
        int, typer.Option(min=1, max=1024, help="threads sending, so requests in flight at most")
    ] = 32,
    timeout: Annotated[str, typer.Option(help="each request's deadline")] = "30s",
    model_base_path: Annotated[
        Path | None,
        typer.Option(help="BASE/NAME: judge answers with the tolerances its newest export used"),
    ] = None,
    worst: Annotated[
        int, typer.Option(min=0, help="requests that disagree most, named and saved")
    ] = 5,
    seed: Annotated[int, typer.Option(help="seed of --arrivals poisson")] = 0,
    slo: Annotated[
        list[str] | None,
        typer.Option(
            help="gates: 'answers.mismatch==0', 'graph.p99<20ms', 'errors==0', "
            "'answers.top_changed<0.01' (repeat or separate with commas)"
        ),
    ] = None,
    allow_remote: AllowRemote = False,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("reports/replay"),
    output: Annotated[
        OutputFormat, typer.Option(help="json: only replay.json on stdout")
    ] = OutputFormat.text,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    tls_server_name: TlsServerName = None,
) -> None:
    """Send a traffic file's requests again, open loop, at their recorded times (or --speed
    times faster, or at --rate), to each arm in turn, and check every answer.

    Reports each arm's latencies, how well it kept the schedule (the share sent within 2 ms of
    its time, lateness p50 and p99), latency by request shape with each shape's first request,
    and its answers against the answer the log holds and against the baseline arm's (the
    exporter's parity rule and tolerances; for classes, the rows whose top class changed). The
    requests that disagree most are saved under OUT/answers with the command that sends each
    again. Writes OUT/replay.{json,md} and shapes.png. Exits 1 when an arm cannot be reached
    for TLS, 2 for a traffic file or options that cannot be used (before anything is sent), 3
    when an --slo gate is missed.
    """
    import sys

    from graphserve.core.errors import EXIT_USAGE, GraphserveError
    from graphserve.loadtest.replay import ReplaySpec, export_tolerances, replay, write_report
    from graphserve.model.traffic import TrafficError

    addresses = named_arms(arm, graph, eager)
    if not addresses:
        raise typer.BadParameter(
            "name the arms: --arm NAME=HOST:PORT, --graph ADDR, --eager ADDR", param_hint="'--arm'"
        )
    if rate is not None and speed != 1.0:
        raise typer.BadParameter("use --speed (the recorded times) or --rate, not both")
    if rate is not None and rate <= 0:
        raise typer.BadParameter(f"{rate:g}: expected req/s above 0", param_hint="'--rate'")
    if speed <= 0:
        raise typer.BadParameter(f"{speed:g}: expected a factor above 0", param_hint="'--speed'")
    chosen = None
    if records is not None:
        try:
            chosen = tuple(int(part) for part in records.split(",") if part.strip())
        except ValueError:
            chosen = ()
        if not chosen:
            raise typer.BadParameter(
                f"{records!r}: expected record numbers, e.g. 0,17,42", param_hint="'--records'"
            )
    tls = client_tls(tls_ca, tls_cert, tls_key, tls_server_name)
    for address in addresses.values():
        dialed_tls(address, tls, "--arm")
    quiet = output is OutputFormat.json
    quiet_tensorflow()
    try:
        tolerances: dict[str, tuple[float, float]] = {}
        where = "the defaults (no --model-base-path)"
        if model_base_path is not None:
            tolerances, where = export_tolerances(model_base_path)
        spec = ReplaySpec(
            traffic=traffic, arms=addresses, protocol=protocol.value,
            rest_format=rest_format.value if rest_format else None, speed=speed, rate=rate,
            arrivals=arrivals.value, seed=seed, model=model, from_model=from_model,
            records=chosen, limit=limit,
            duration_s=option_seconds(duration, "--duration") if duration else None,
            max_in_flight=max_in_flight, timeout_s=option_seconds(timeout, "--timeout"),
            tolerances=tolerances, tolerances_from=where, tls=tls, allow_remote=allow_remote,
            metrics=_pairs(metrics or [], "--metrics"),
            worst=worst, slo=tuple(g.strip() for t in slo or () for g in t.split(",") if g.strip()),
        )  # fmt: skip
        say = (lambda _m: None) if quiet else (lambda m: stderr.print(f"[dim]{escape(m)}[/dim]"))
        report = replay(spec, say)
        write_report(report, spec, out, " ".join(["graphserve", *sys.argv[1:]]))
    except TrafficError as exc:  # the file: a usage error, before anything was sent
        stderr.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=EXIT_USAGE) from None
    except (GraphserveError, OSError) as exc:
        stderr.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=getattr(exc, "exit_code", 1)) from None
    _finish_replay(report, out, quiet)


def _finish_replay(report: Any, out_dir: Path, quiet: bool) -> None:
    """Print the replay (a table, or replay.json on stdout when quiet), then exit 1 when an arm
    got no successful answer, 3 when a gate was missed."""
    from rich.table import Table

    if quiet:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        table = Table(show_edge=False)
        for column in ("arm", "sent", "failed", "p50 ms", "p99 ms", "on time", "late p99 ms",
                       "mismatched answers"):  # fmt: skip
            table.add_column(column, justify="left" if column == "arm" else "right")
        for arm in report.arms:
            a, p = arm.adherence, arm.latency_ms
            share = a.on_time_share
            table.add_row(
                arm.name, str(arm.requests), str(arm.failed),
                "-" if p["p50"] is None else f"{p['p50']:.3f}",
                "-" if p["p99"] is None else f"{p['p99']:.3f}",
                "-" if share is None else f"{100 * share:.1f} %",
                "-" if a.lateness_p99_ms is None else f"{a.lateness_p99_ms:.3f}",
                ", ".join(f"{g.mismatched}/{g.compared} vs {g.reference}" for g in arm.answers)
                or "-",
            )  # fmt: skip
        Console(highlight=False).print(table)
        for warning in report.warnings:
            stderr.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)
        stderr.print(f"report: {out_dir / 'replay.md'} (and replay.json, shapes.png)")
    empty = [arm.name for arm in report.arms if arm.requests and arm.failed == arm.requests]
    if empty:
        stderr.print(f"[red]error:[/red] no successful answer from {', '.join(empty)}; see "
                     f"{out_dir / 'replay.md'}", highlight=False)  # fmt: skip
        raise typer.Exit(code=1)
    missed = [gate for gate in report.gates if not gate.passed]
    for gate in missed:
        value = "no value" if gate.value is None else f"{gate.value:.4g}"
        why = f" ({gate.why})" if gate.why else ""
        stderr.print(f"[red]SLO missed:[/red] {gate.expression} on {gate.arm}: {value}{why}",
                     highlight=False)  # fmt: skip
    if missed:
        raise typer.Exit(code=EXIT_SLO)


@app.command("copies")
def copies_command(
    source: Annotated[
        Path,
        typer.Option(
            "--from", help="a SavedModel version BASE/MODEL/VERSION, or BASE/MODEL (its newest)"
        ),
    ],
    count: Annotated[int, typer.Option(help="how many copies")],
    out: Annotated[Path, typer.Option(help="OUT/<prefix>-0000/1 ... and OUT/models.config")],
    prefix: Annotated[str, typer.Option(help="the copies' names: PREFIX-0000 ...")] = "model",
    pin: Annotated[
        int,
        typer.Option(help='pin the first K models (version_labels { key: "pinned" value: 1 })'),
    ] = 0,
    force: Annotated[
        bool, typer.Option("--force", help="write into a non-empty OUT, replacing its copies")
    ] = False,
    output: Annotated[OutputFormat, typer.Option(help="json: the result on stdout")] = (
        OutputFormat.text
    ),
) -> None:
    """Write COUNT copies of one SavedModel version as the models of a model config file, for
    `loadtest many`: OUT/<prefix>-0000/1 ... (hard links when OUT is on the same file system,
    else copies) and OUT/models.config (TF Serving's ModelServerConfig). Exits 2 for a bad
    --from, --count, --pin or --prefix, or an OUT that holds files (without --force)."""
    from graphserve.core.errors import LoadTestError
    from graphserve.loadtest.manymodels.copies import CopiesSpec, write_copies

    spec = CopiesSpec(source=source, count=count, out=out, prefix=prefix, pin=pin, force=force)
    try:
        quiet_tensorflow()  # TF Serving's config proto imports it
        result = write_copies(spec)
    except LoadTestError as exc:
        raise typer.BadParameter(str(exc)) from None
    except OSError as exc:
        stderr.print(f"[red]error:[/red] writing the copies into {out}: {exc}", highlight=False)
        raise typer.Exit(code=1) from None
    if output is OutputFormat.json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    pinned = f", the first {result.pinned} pinned" if result.pinned else ""
    typer.echo(
        f"wrote {result.count:,} copies of {result.source} into {result.out} as "
        f"{result.method}; {result.config} serves them{pinned}"
    )


@app.command(
    "many",
    epilog=exit_epilog(
        {EXIT_SLO: "an --slo, --max-failure-ratio or --min-hit-ratio gate was missed."}
    ),
)
def many_command(
    target: Annotated[
        str,
        typer.Option(
            help="the server: grpc://HOST:PORT (or HOST:PORT) or http://HOST:PORT; grpcs:// or "
            "https:// over TLS (loopback)"
        ),
    ],
    models_from: Annotated[
        Path | None, typer.Option(help="a model config file: the models, most popular first")
    ] = None,
    zipf: Annotated[
        float | None,
        typer.Option(min=0, help="popularity: rank r gets ∝ 1/r^S of the requests [default: 1.1]"),
    ] = None,
    weights: Annotated[
        Path | None,
        typer.Option(help="popularity from a file: NAME WEIGHT lines or a JSON object"),
    ] = None,
    rate: Annotated[
        float | None, typer.Option(min=0.001, help="open loop: req/s over all models")
    ] = None,
    users: Annotated[
        int, typer.Option(min=1, help="users (threads); closed loop without --rate")
    ] = 16,
    duration: Annotated[str, typer.Option(help="how long the load runs")] = "30s",
    max_requests: Annotated[
        int | None, typer.Option(min=1, help="stop the run after this many requests")
    ] = None,
    metrics_url: Annotated[
        str | None,
        typer.Option(help="the server's Prometheus URL [default: the REST port's metrics path]"),
    ] = None,
    rest_port: Annotated[
        int | None,
        typer.Option(min=1, max=65535, help="gRPC target: its REST port, for the metrics"),
    ] = None,
    scrape_every: Annotated[str, typer.Option(help="how often the metrics are scraped")] = "2s",
    seed: Annotated[int, typer.Option(help="seed of the model picks and the payloads")] = 0,
    signature_name: Annotated[str, typer.Option(help="signature to call")] = "serving_default",
    batch_size: Annotated[int, typer.Option(min=1, help="rows per request")] = 1,
    traffic: TrafficFile = None,
    traffic_model: Annotated[
        str | None,
        typer.Option(help="with --traffic: only the file's records of this model [default: all]"),
    ] = None,
    slo: Annotated[
        list[str] | None,
        typer.Option(help="gates, e.g. 'warm.p99<20ms', 'cold.p99<2s', 'errors==0' (repeat)"),
    ] = None,
    max_failure_ratio: Annotated[
        float | None, typer.Option(min=0, max=1, help="gate: failed / requests at most this")
    ] = None,
    min_hit_ratio: Annotated[
        float | None, typer.Option(min=0, max=1, help="gate: warm / requests at least this")
    ] = None,
    top: Annotated[int, typer.Option(min=1, help="models the pages list one by one")] = 20,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("reports/many"),
    output: Annotated[
        OutputFormat, typer.Option(help="json: only many.json on stdout")
    ] = OutputFormat.text,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    tls_server_name: TlsServerName = None,
) -> None:
    """Load one server's many models, each request to a model drawn by popularity (Zipf over
    the --models-from order, or --weights), and report warm against cold requests, per model,
    and the server's loads, evictions and memory from its metrics.

    A request is cold when the server marks it as one that waited for its model to load
    (x-graphserve-cold-load). Writes OUT/many.{json,md,html}, many_models.csv and the plots.
    With --traffic each model is sent the file's predict requests that fit its signature, in
    order, cycling; their answers are counted, not compared (compare --traffic does that).
    Over TLS: a grpcs:// or https:// target, or the --tls-* options; the metrics are scraped
    over HTTPS then (the REST port's certificate). Exits 1 when the run fails, the server
    cannot be reached for TLS or no request was answered, 2 for bad arguments or input files
    (a weights file that cannot be read) or a target off loopback, 3 when a gate is missed.
    """
    from graphserve.core.errors import LoadTestError, ServerUnreachable
    from graphserve.loadtest.manymodels.run import ManySpec, many
    from graphserve.model.traffic import TrafficError

    if weights is not None and zipf is not None:
        raise typer.BadParameter("--zipf or --weights, not both", param_hint="'--weights'")
    if weights is None and models_from is None:
        raise typer.BadParameter(
            "which models? pass --models-from CONFIG (and --zipf S) or --weights FILE",
            param_hint="'--models-from'",
        )
    tls = dialed_tls(target, client_tls(tls_ca, tls_cert, tls_key, tls_server_name), "--target")
    spec = ManySpec(
        target=target,
        tls=tls,
        popularity=_popularity(models_from, zipf, weights),
        rate=rate,
        users=users,
        duration_s=option_seconds(duration, "--duration"),
        max_requests=max_requests,
        metrics_url=metrics_url,
        rest_port=rest_port,
        scrape_every_s=option_seconds(scrape_every, "--scrape-every", minimum=0.1),
        seed=seed,
        signature_name=signature_name,
        batch_size=batch_size,
        traffic=traffic,
        traffic_model=traffic_model,
        slo=tuple(slo or ()),
        max_failure_ratio=max_failure_ratio,
        min_hit_ratio=min_hit_ratio,
        top=top,
    )
    quiet = output is OutputFormat.json
    try:
        quiet_tensorflow()  # the payload and metadata code import it
        report = many(spec, out, None if quiet else _many_progress)
    except (LoadTestError, ServerUnreachable, TlsConfigError, TrafficError) as exc:
        stderr.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=exc.exit_code) from None
    from graphserve.loadtest.manymodels.report import render_table

    if quiet:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        Console().print(render_table(report))
        stderr.print(f"report: {out / 'many.html'} (and many.md, many.json, many_models.csv)")
    if report.totals.answered == 0:
        stderr.print(
            f"[red]error:[/red] no request was answered; see {out / 'many.md'} and "
            f"{out / 'locust.log'}",
            highlight=False,
        )
        raise typer.Exit(code=1)
    if report.slo is not None and not report.slo.passed:
        for gate in report.slo.gates:
            if not gate.passed:
                shown = "no value" if gate.value is None else f"{gate.value:.4g}"
                stderr.print(
                    f"[red]SLO missed:[/red] {gate.expression} ({gate.requests} requests): {shown}",
                    highlight=False,
                )
        raise typer.Exit(code=EXIT_SLO)


def _popularity(models_from: Path | None, zipf: float | None, weights: Path | None) -> Any:
    """The models and their weights; a config or weights file that cannot work is a usage
    error (exit 2), found before any load."""
    from graphserve.core.errors import LoadTestError
    from graphserve.loadtest.manymodels.popularity import (
        DEFAULT_ZIPF_S,
        Popularity,
        models_from_config,
        read_weights,
    )

    try:
        models = models_from_config(models_from) if models_from is not None else []
    except LoadTestError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--models-from'") from None
    try:
        if weights is None:
            return Popularity.zipf(models, DEFAULT_ZIPF_S if zipf is None else zipf, models_from)
        return Popularity.from_weights(read_weights(weights), weights, models, models_from)
    except LoadTestError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--weights'") from None


def _many_progress(event: dict[str, Any]) -> None:
    said = {
        "payload": f"reading {event.get('models', 0):,} models' signatures and building the "
        "payloads",
        "load_started": "load started",
        "stopping": "stopping the load and writing the report",
    }
    kind = event.get("event")
    if kind in said:
        stderr.print(f"[dim]{said[kind]}[/dim]", highlight=False)
    elif kind == "warning":
        stderr.print(f"[yellow]warning:[/yellow] {event.get('message')}", highlight=False)


@app.command("report")
def report_command(
    out: Annotated[
        Path,
        typer.Argument(help="a load-test output directory: report.json, rollout.json or many.json"),
    ],
    open_page: Annotated[
        bool,
        typer.Option("--open", help="then open the page in a web browser (BROWSER names one)"),
    ] = False,
) -> None:
    """Render report.md, report.html and the plots again from OUT/report.json (a `compare`),
    or rollout.md, rollout.html and its timeline from OUT/rollout.json (a `rollout`), or
    many.md, many.html, many_models.csv and the plots from OUT/many.json (a `many`); with
    --open, show the page in a web browser. Exit 1 when the report cannot be read or, with
    --open, no browser could be opened (the page is written either way)."""
    import webbrowser

    from graphserve.core.errors import LoadTestError

    try:
        if (out / "many.json").exists() and not (out / "report.json").exists():
            from graphserve.loadtest.manymodels.report import write_many
            from graphserve.loadtest.results.many import load_many

            write_many(load_many(out / "many.json"), out)
            page = out / "many.html"
        elif (out / "rollout.json").exists() and not (out / "report.json").exists():
            from graphserve.loadtest.results.rollout import load_rollout
            from graphserve.loadtest.rollouts.report import write_rollout

            write_rollout(load_rollout(out / "rollout.json"), out)
            page = out / "rollout.html"
        else:
            from graphserve.loadtest.report.render import write_report
            from graphserve.loadtest.results.run import load_report

            write_report(load_report(out / "report.json"), out)  # this version or the one before
            page = out / "report.html"
    except LoadTestError as exc:
        stderr.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=1) from None
    stderr.print(f"report: {page} (and {page.with_suffix('.md').name})")
    if not open_page:
        return
    uri = page.resolve().as_uri()
    # webbrowser tries BROWSER's commands first, then the desktop's (with a display) and the
    # terminal's; False when none started.
    if not webbrowser.open(uri):
        stderr.print(
            f"[red]error:[/red] no web browser could be opened for {uri}: open it by hand, or "
            "name a browser command in the BROWSER environment variable",
            highlight=False,
        )
        raise typer.Exit(code=1)
    stderr.print(f"opened {uri} in a web browser")
