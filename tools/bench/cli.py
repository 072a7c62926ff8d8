"""`python -m tools.bench` (`make bench`): the benchmark suite, its goals printed with pass/miss,
results written. A development tool run from a clone: tools/ is not part of the wheel."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from graphserve.clikit import progress, stderr
from graphserve.core.errors import EXIT_FAILED, EXIT_MISSED, GraphserveError, exit_epilog
from graphserve.core.logs import quiet_tensorflow
from tools.bench.published import PUBLISHED

STRICT_EPILOG = exit_epilog({EXIT_MISSED: "with --strict, a goal was missed."})


def bench(
    ctx: typer.Context,
    out: Annotated[
        Path, typer.Option("--out", help="Where results.json and results.md are written.")
    ] = Path("tools/bench/results"),
    models: Annotated[
        str, typer.Option("--models", help="Built-in models to measure, e.g. mlp,power,cnn.")
    ] = "mlp,power,cnn",
    quick: Annotated[
        bool, typer.Option("--quick", help="Seconds instead of minutes: a smoke run, not data.")
    ] = False,
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir", help="Exports and server logs (default: a temporary dir)."),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help=f"Exit {EXIT_MISSED} when a goal is missed.")
    ] = False,
) -> None:
    """Measure graph vs eager in-process and served, batching, codec, cold start, a plain Flask
    peer and the load generator; print every goal ratio with pass/miss; write OUT/results.json
    and results.md (`make bench` then runs `python -m tools.bench frontend`). `python -m tools.bench
    generator`: our generator against perf_analyzer and wrk;
    `python -m tools.bench soak`: an hour of version swaps under load, RSS and p99 over time;
    `python -m tools.bench many`: a thousand models loaded on demand;
    `python -m tools.bench peers`: against KServe, BentoML, LitServe, PyTriton and FastAPI;
    `python -m tools.bench tls`: what TLS and mutual TLS cost against plaintext."""
    if ctx.invoked_subcommand is not None:
        return
    quiet_tensorflow()
    from tools.bench.render import goal_lines
    from tools.bench.run import MODELS, BenchSpec, run_bench, write_results

    known = {m.name: m for m in MODELS}
    chosen = [m.strip() for m in models.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in known]
    if unknown or not chosen:
        stderr.print(
            f"[red]error:[/] unknown model(s) {', '.join(unknown) or '(none given)'}: "
            f"expected some of {', '.join(known)}"
        )
        raise typer.Exit(2)
    with tempfile.TemporaryDirectory(prefix="graphserve-bench-") as tmp:
        where = work_dir or Path(tmp)
        selected = tuple(known[m] for m in chosen)
        spec = BenchSpec.quick(where, selected) if quick else BenchSpec(where, selected)
        try:
            results = run_bench(spec, say=progress)
        except (RuntimeError, OSError, ValueError) as exc:
            stderr.print(f"[red]benchmark failed:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_FAILED) from None
    json_path, md_path = write_results(results, out)
    for line in goal_lines(results):
        typer.echo(line)
    typer.echo(f"results: {json_path} and {md_path} ({results['seconds']:.0f} s)")
    if strict and not all(g["passed"] for g in results["goals"]):
        raise typer.Exit(EXIT_MISSED)


def generator(
    out: Annotated[
        Path, typer.Option("--out", help="Where generator.json and generator.md are written.")
    ] = Path("tools/bench/results"),
    clients: Annotated[
        str, typer.Option("--clients", help="Numbers of concurrent clients, e.g. 1,4,16.")
    ] = "1,4,16",
    rounds: Annotated[
        int, typer.Option("--rounds", min=1, help="Rounds, the generators' order alternating.")
    ] = 2,
    window_s: Annotated[
        float, typer.Option("--window", min=0.5, help="Seconds per measurement window.")
    ] = 2.0,
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir", help="The export, server logs, reports (default: temporary)."),
    ] = None,
) -> None:
    """Our generator (`loadtest compare`) against Triton's perf_analyzer (gRPC) and wrk (REST) on
    the same graph and null servers of the mlp, and one locust process's requests per core;
    print the agreement; write OUT/generator.json and generator.md. perf_analyzer and wrk are
    installed on first use (tools/bench/tools.py)."""
    quiet_tensorflow()
    from graphserve.exporter.api import ExportSpec, export_model
    from graphserve.loadtest.comparison.run import environment
    from tools.bench.generator import AgreementPlan, agreements, generator_capacity
    from tools.bench.published import write
    from tools.bench.render import render_generator
    from tools.bench.run import MODELS
    from tools.bench.served import model_servers

    try:
        counts = tuple(int(c) for c in clients.split(",") if c.strip())
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        stderr.print(f"[red]error:[/] --clients {clients!r}: expected numbers like 1,4,16")
        raise typer.Exit(2)
    mlp = next(m for m in MODELS if m.name == "mlp")
    plan = AgreementPlan(clients=counts, rounds=rounds, window_s=window_s)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="graphserve-bench-") as tmp:
        where = work_dir or Path(tmp)
        try:
            export_model(
                ExportSpec(mlp.source, mlp.name, base_path=where / "models", overwrite=True)
            )
            with model_servers(
                mlp.name, where / "models" / mlp.name, mlp.source, where, ("graph", "null")
            ) as servers:
                capacity = {
                    protocol: generator_capacity(protocol, address, mlp.name).to_json()
                    for protocol, address in (
                        ("grpc", servers["null"].grpc_address),
                        ("rest", str(servers["null"].rest_address)),
                    )
                }
                agreed = agreements(servers, mlp.name, plan, where / "agreement", progress)
        except (RuntimeError, OSError, ValueError) as exc:
            stderr.print(f"[red]benchmark failed:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_FAILED) from None
    results = {
        "environment": environment().to_json(),
        "seconds": time.perf_counter() - started,
        "generator": capacity,
        "agreement": agreed,
    }
    paths = write("generator", results, out)
    typer.echo(render_generator(results))
    typer.echo(f"results: {paths[0]} and {paths[1]}")


def soak(
    duration: Annotated[
        str, typer.Option("--duration", help="How long to serve and swap: 1h, 10m, 40s.")
    ] = "1h",
    swap_every: Annotated[
        str, typer.Option("--swap-every", help="A new version pushed this often: 1m, 10s.")
    ] = "1m",
    sample_every: Annotated[
        str, typer.Option("--sample-every", help="RSS, threads and p99 read this often.")
    ] = "5s",
    warmup: Annotated[
        str | None,
        typer.Option("--warmup", help="Samples before this are not fitted (default: 10%)."),
    ] = None,
    clients: Annotated[int, typer.Option("--clients", min=1, help="Client threads.")] = 4,
    rate: Annotated[
        float, typer.Option("--rate", min=1.0, help="Requests per second, all clients.")
    ] = 100.0,
    out: Annotated[
        Path, typer.Option("--out", help="Where soak.json, soak.md and soak.png are written.")
    ] = Path("tools/bench/results"),
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir", help="The export and the server log (default: temporary)."),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help=f"Exit {EXIT_MISSED} when a goal is missed.")
    ] = False,
) -> None:
    """The graph server of the mlp under steady gRPC load with a version swap every minute:
    its RSS, threads and p99 over time; goals: RSS growth <= 100 MB per hour (a line fitted
    after the warm-up) and no failed request. Writes OUT/soak.json, soak.md and soak.png."""
    quiet_tensorflow()
    from graphserve.clikit import option_seconds
    from tools.bench.soak import SoakPlan, run_soak, write_soak

    duration_s = option_seconds(duration)
    with tempfile.TemporaryDirectory(prefix="graphserve-soak-") as tmp:
        plan = SoakPlan(
            work_dir=work_dir or Path(tmp),
            duration_s=duration_s,
            swap_every_s=option_seconds(swap_every, "--swap-every"),
            sample_every_s=option_seconds(sample_every, "--sample-every", minimum=0.5),
            warmup_s=None if warmup is None else option_seconds(warmup, "--warmup", 0.0),
            clients=clients,
            rate=rate,
        )
        plan.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            results = run_soak(plan, say=progress)
        except (RuntimeError, OSError, ValueError) as exc:
            stderr.print(f"[red]soak failed:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_FAILED) from None
    paths, lines = write_soak(results, out)
    for line in lines:
        typer.echo(line)
    typer.echo(f"results: {', '.join(str(p) for p in paths)} ({results['seconds']:.0f} s)")
    if strict and not all(g["passed"] for g in results["goals"]):
        raise typer.Exit(EXIT_MISSED)


def many(
    out: Annotated[
        Path, typer.Option("--out", help="Where many.json, many.md and many.png are written.")
    ] = Path("tools/bench/results"),
    models: Annotated[
        int, typer.Option("--models", min=2, help="Copies of the mlp in the config.")
    ] = 1000,
    resident: Annotated[
        int, typer.Option("--resident", min=1, help="M2's --max-resident-models.")
    ] = 200,
    rate: Annotated[
        float, typer.Option("--rate", min=1.0, help="M2's requests per second.")
    ] = 200.0,
    zipf_duration: Annotated[
        str, typer.Option("--zipf-duration", help="M2's Zipf traffic: 5m, 60s, 20.")
    ] = "300s",
    baseline_duration: Annotated[
        str, typer.Option("--baseline-duration", help="M2's one-model server at the same rate.")
    ] = "60s",
    isolation_phase: Annotated[
        str, typer.Option("--isolation-phase", help="Each of M3's two phases.")
    ] = "45s",
    isolation_resident: Annotated[
        int, typer.Option("--isolation-resident", min=2, help="M3's --max-resident-models.")
    ] = 8,
    memory_models: Annotated[
        int, typer.Option("--memory-models", min=1, help="Models M4 asks once each.")
    ] = 200,
    runs: Annotated[int, typer.Option("--runs", min=1, help="M1's starts of each config.")] = 3,
    parts: Annotated[
        str, typer.Option("--parts", help="Which parts: first,zipf,isolation,memory.")
    ] = "first,zipf,isolation,memory",
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir", help="Export, copies and server logs (default: temporary)."),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help=f"Exit {EXIT_MISSED} when a goal is missed.")
    ] = False,
) -> None:
    """One graph server, a thousand copies of the mlp loaded on demand: M1 the first answer
    against a one-model config, M2 Zipf traffic with 200 resident (failures, warm and cold p50,
    RSS), M3 a pinned model's p99 beside cold neighbours, M4 memory back after unloading (glibc,
    oneDNN on, jemalloc, tcmalloc). About 15 minutes; writes OUT/many.json, many.md, many.png."""
    quiet_tensorflow()
    from graphserve.clikit import option_seconds
    from tools.bench.many import PARTS, ManyPlan, goal_lines, run_many, write_many

    chosen = tuple(p.strip() for p in parts.split(",") if p.strip())
    if not chosen or set(chosen) - set(PARTS):
        stderr.print(f"[red]error:[/] --parts {parts!r}: expected some of {', '.join(PARTS)}")
        raise typer.Exit(2)
    if models <= max(resident, isolation_resident, memory_models - 1):
        stderr.print("[red]error:[/] --models must exceed --resident, --isolation-resident and "
                     "--memory-models")  # fmt: skip
        raise typer.Exit(2)
    with tempfile.TemporaryDirectory(prefix="graphserve-many-") as tmp:
        plan = ManyPlan(
            work_dir=work_dir or Path(tmp),
            models=models,
            first_runs=runs,
            rate=rate,
            zipf_duration_s=option_seconds(zipf_duration, "--zipf-duration"),
            baseline_duration_s=option_seconds(baseline_duration, "--baseline-duration"),
            resident=resident,
            isolation_phase_s=option_seconds(isolation_phase, "--isolation-phase"),
            isolation_resident=isolation_resident,
            memory_models=memory_models,
            parts=chosen,
        )
        plan.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            results = run_many(plan, say=progress)
        except (RuntimeError, OSError, ValueError, GraphserveError) as exc:
            stderr.print(f"[red]benchmark failed:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_FAILED) from None
    paths = write_many(results, out)
    for line in goal_lines(results):
        typer.echo(line)
    typer.echo(f"results: {', '.join(str(p) for p in paths)} ({results['seconds']:.0f} s)")
    if strict and not all(g["passed"] for g in results["goals"]):
        raise typer.Exit(EXIT_MISSED)


def peers(
    out: Annotated[
        Path, typer.Option("--out", help="Where peers.json, peers.md and peers.png are written.")
    ] = Path("tools/bench/results"),
    models: Annotated[
        str, typer.Option("--models", help="Models to serve: mlp, mobilenet or both.")
    ] = "mlp,mobilenet",
    only: Annotated[
        str,
        typer.Option("--peers", help="Peers to compare: kserve,bentoml,litserve,pytriton,fastapi."),
    ] = "kserve,bentoml,litserve,pytriton,fastapi",
    clients: Annotated[
        str, typer.Option("--clients", help="The ladder of concurrent clients, e.g. 1,4,16,32.")
    ] = "1,4,16,32",
    window_s: Annotated[
        float, typer.Option("--window", min=0.2, help="Seconds per measurement window.")
    ] = 4.0,
    work_dir: Annotated[
        Path,
        typer.Option(
            "--work-dir",
            help="The peers' virtual environments (installed on first use, kept), the exports "
            "and the server logs.",
        ),
    ] = Path("tools/bench/.work"),
    quick: Annotated[
        bool, typer.Option("--quick", help="Seconds instead of minutes: a smoke run, not data.")
    ] = False,
    perf_analyzer: Annotated[
        bool,
        typer.Option(help="Run perf_analyzer, the second generator, on the gRPC routes."),
    ] = True,
    strict: Annotated[
        bool, typer.Option("--strict", help=f"Exit {EXIT_MISSED} when a goal is missed.")
    ] = False,
) -> None:
    """graphserve's graph server against KServe, BentoML, LitServe, PyTriton and FastAPI on the
    same SavedModel (the mlp and MobileNetV2), and against the in-process limit: p50/p99 at one
    client, the most req/s within a p99 budget, server CPU per request, start-up, memory; the
    goals with pass/miss. Each peer runs from its own virtual environment under --work-dir,
    installed there on first use. Writes OUT/peers.json, peers.md and peers.png."""
    quiet_tensorflow()
    from tools.bench.peers import PEER_NAMES
    from tools.bench.peers.report import write_peers
    from tools.bench.peers.run import PEER_MODELS, PeersSpec, run_peers
    from tools.bench.render import goal_lines

    chosen_models = tuple(m.strip() for m in models.split(",") if m.strip())
    chosen_peers = tuple(p.strip() for p in only.split(",") if p.strip())
    try:
        ladder = tuple(int(c) for c in clients.split(",") if c.strip())
    except ValueError:
        ladder = ()
    problems = []
    if not chosen_models or set(chosen_models) - set(PEER_MODELS):
        problems.append(f"--models {models!r}: expected some of {', '.join(PEER_MODELS)}")
    if set(chosen_peers) - set(PEER_NAMES):
        problems.append(f"--peers {only!r}: expected some of {', '.join(PEER_NAMES)}")
    if not ladder or min(ladder) < 1:
        problems.append(f"--clients {clients!r}: expected numbers like 1,4,16,32")
    if problems:
        for problem in problems:
            stderr.print(f"[red]error:[/] {escape(problem)}")
        raise typer.Exit(2)
    work_dir.mkdir(parents=True, exist_ok=True)
    if quick:
        spec = PeersSpec.quick(work_dir, chosen_models, chosen_peers)
    else:
        spec = PeersSpec(work_dir, chosen_models, chosen_peers, clients=ladder, window_s=window_s,
                         perf_analyzer=perf_analyzer)  # fmt: skip
    try:
        results = run_peers(spec, say=progress)
    except (RuntimeError, OSError, ValueError) as exc:
        stderr.print(f"[red]benchmark failed:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_FAILED) from None
    paths = write_peers(results, out)
    for line in goal_lines(results):
        typer.echo(line)
    typer.echo(f"results: {', '.join(str(p) for p in paths)} ({results['seconds']:.0f} s)")
    if strict and not all(g["passed"] for g in results["goals"]):
        raise typer.Exit(EXIT_MISSED)


def families(
    out: Annotated[
        Path, typer.Option("--out", help="Where families.json and families.md are written.")
    ] = Path("tools/bench/results"),
    only: Annotated[
        str | None,
        typer.Option("--families", help="Families to run, e.g. efficientnet,vocab_module."),
    ] = None,
    duration: Annotated[
        str, typer.Option("--duration", help="Measured time per arm of each family's load.")
    ] = "10s",
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir", help="Exports, server logs, reports (default: temporary)."),
    ] = None,
) -> None:
    """The models users bring (docs_src/byom): each family exported by its documented command
    (time, saved_model.pb and variables size, op count, the inputs graphserve generated), all
    served by one graph server and each by an eager server, then `loadtest compare` over gRPC
    at 1 user per family: graph and eager p50 and their ratio. Writes OUT/families.json and
    families.md."""
    quiet_tensorflow()
    from graphserve.clikit import option_seconds
    from tools.bench.families import FAMILIES, bench_compare, run_families, write_families

    known = {f.name: f for f in FAMILIES}
    chosen = [n.strip() for n in (only or ",".join(known)).split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown or not chosen:
        expected = ", ".join(known)
        stderr.print(f"[red]error:[/] --families {only!r}: expected some of {expected}")
        raise typer.Exit(2)
    option_seconds(duration)
    with tempfile.TemporaryDirectory(prefix="graphserve-families-") as tmp:
        where = work_dir or Path(tmp)
        try:
            results = run_families(
                where, tuple(known[n] for n in chosen), bench_compare(duration), say=progress
            )
        except (RuntimeError, OSError, ValueError) as exc:
            stderr.print(f"[red]benchmark failed:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_FAILED) from None
    json_path, md_path = write_families(results, out)
    typer.echo(md_path.read_text())
    typer.echo(f"results: {json_path} and {md_path} ({results['seconds']:.0f} s)")


def tls(
    out: Annotated[
        Path, typer.Option("--out", help="Where tls.json and tls.md are written.")
    ] = Path("tools/bench/results"),
    key: Annotated[
        str, typer.Option("--key", help="The certificates' keys: ecdsa (P-256) or rsa (2048).")
    ] = "ecdsa",
    quick: Annotated[
        bool, typer.Option("--quick", help="Seconds instead of minutes: a smoke run, not data.")
    ] = False,
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir", help="Export, certificates, server logs (default: temporary)."),
    ] = None,
) -> None:
    """What TLS costs: the graph server of the mlp in plaintext, with TLS and with mutual TLS,
    each in its own process; over gRPC and REST, keep-alive p50 at 1 client, p50 with a new
    connection per request, req/s and the server's CPU per request at 16 clients, each as a
    ratio to plaintext. No goals. About 3 minutes; writes OUT/tls.json and tls.md."""
    quiet_tensorflow()
    from tools.bench.tls import KEY_TYPES, TlsPlan, figure_lines, run_tls, write_tls

    if key not in KEY_TYPES:
        stderr.print(f"[red]error:[/] --key {key!r}: expected one of {', '.join(KEY_TYPES)}")
        raise typer.Exit(2)
    with tempfile.TemporaryDirectory(prefix="graphserve-tls-") as tmp:
        where = work_dir or Path(tmp)
        plan = TlsPlan.quick(where, key) if quick else TlsPlan(where, key)
        try:
            results = run_tls(plan, say=progress)
        except (RuntimeError, OSError, ValueError) as exc:
            stderr.print(f"[red]benchmark failed:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_FAILED) from None
    paths = write_tls(results, out)
    for line in figure_lines(results):
        typer.echo(line)
    typer.echo(f"results: {', '.join(str(p) for p in paths)} ({results['seconds']:.0f} s)")


def traffic(
    out: Annotated[
        Path, typer.Option("--out", help="Where traffic.json and traffic.md are written.")
    ] = Path("tools/bench/results"),
    quick: Annotated[
        bool, typer.Option("--quick", help="Seconds instead of minutes: a smoke run, not data.")
    ] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help=f"Exit {EXIT_MISSED} when a goal is missed.")
    ] = False,
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir", help="Export, logs, server logs (default: temporary)."),
    ] = None,
) -> None:
    """Request logging's cost and real traffic (issue 50's T1-T5): the server's CPU per
    request with logging at rate 1.0 and 0.1 against off, replay of a 500 req/s recording,
    logging to a full disk under load, and a graph server's log replayed against graph, eager
    and a version with one weight changed. About 4 minutes; writes OUT/traffic.json and .md."""
    quiet_tensorflow()
    from tools.bench.traffic import TrafficPlan, run_traffic, write_traffic

    plan = TrafficPlan()
    if quick:
        plan = TrafficPlan(clients=4, window_s=0.5, rounds=1, warmup_s=0.2, replay_rate=200.0,
                           replay_s=1.0, disk_s=1.0, mixed_requests=20, t2_rounds=2,
                           t2_windows=1)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="graphserve-traffic-") as tmp:
        try:
            results = run_traffic(plan, work_dir or Path(tmp), say=progress)
        except (GraphserveError, RuntimeError, OSError, ValueError) as exc:
            stderr.print(f"[red]benchmark failed:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_FAILED) from None
    paths = write_traffic(results, out)
    from tools.bench.traffic import not_run

    for g in results["goals"]:
        verdict = "pass" if g["passed"] else "MISS"
        typer.echo(f"{g['key']}: {g['what']}: {g['value']} (goal {g['goal']}) {verdict}")
    for said in not_run(results):
        typer.echo(said)
    typer.echo(f"results: {', '.join(str(p) for p in paths)} ({results['seconds']:.0f} s)")
    if strict and not all(g["passed"] for g in results["goals"]):
        raise typer.Exit(EXIT_MISSED)


def shapes(
    out: Annotated[
        Path,
        typer.Option("--out", help="Where traffic-shapes.json and traffic-shapes.md are written."),
    ] = Path("tools/bench/results"),
    work_dir: Annotated[
        Path | None,
        typer.Option("--work-dir", help="Exports, traffic, server logs (default: temporary)."),
    ] = None,
) -> None:
    """Graph against eager by request shape (issue 50's T6): a tiny keras_hub BERT (1-16 rows,
    sequence lengths 8-128) and MobileNetV2 (1-32 rows), exported, served graph and eager, and
    replayed one request at a time; p50, p99 and the first request of each shape. About 5
    minutes; writes OUT/traffic-shapes.json and .md."""
    quiet_tensorflow()
    from tools.bench.shapes import run_shapes, write_shapes

    with tempfile.TemporaryDirectory(prefix="graphserve-shapes-") as tmp:
        try:
            results = run_shapes(work_dir or Path(tmp), say=progress)
        except (GraphserveError, RuntimeError, OSError, ValueError) as exc:
            stderr.print(f"[red]benchmark failed:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_FAILED) from None
    paths = write_shapes(results, out)
    typer.echo(f"results: {', '.join(str(p) for p in paths)} ({results['seconds']:.0f} s)")


def frontend(
    out: Annotated[
        Path, typer.Option("--out", help="Where frontend.json and frontend.md are written.")
    ] = Path("tools/bench/results"),
    name: Annotated[
        str | None,
        typer.Option("--name", help="Write frontend-NAME.json/.md instead (e.g. 42)."),
    ] = None,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            help="Measure the graphserve of another checkout (its root) too, in the same run, "
            "e.g. a git worktree of the commit before a change.",
        ),
    ] = None,
    baseline_rest_model_call: Annotated[
        str,
        typer.Option(
            "--baseline-rest-model-call",
            help="How the baseline's REST front end runs the model: run (on a worker thread, "
            "before issue 42) or run_inline.",
        ),
    ] = "run",
    quick: Annotated[
        bool, typer.Option("--quick", help="Seconds instead of minutes: a smoke run, not data.")
    ] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help=f"Exit {EXIT_MISSED} when a goal is missed.")
    ] = False,
) -> None:
    """The server's own cost (part of `make bench`): the graph server's CPU per request at 16
    clients and the same minus the model's own CPU per call in process, per protocol, with a
    perf profile of where it went; perf_analyzer's p50 at 1 client; MobileNetV2 with batching
    against its in-process limit; with --baseline, the same for another checkout's server in
    the same run. Goals G16-G19 with pass/miss. About 5 minutes (9 with a baseline); writes
    OUT/frontend.json and frontend.md."""
    quiet_tensorflow()
    from dataclasses import replace

    from tools.bench.frontend import FrontendSpec, run_frontend
    from tools.bench.published import BY_NAME, write
    from tools.bench.render import goal_lines

    if baseline_rest_model_call not in ("run", "run_inline"):
        stderr.print(
            f"[red]error:[/] --baseline-rest-model-call {baseline_rest_model_call!r}: "
            "expected run or run_inline"
        )
        raise typer.Exit(2)
    with tempfile.TemporaryDirectory(prefix="graphserve-frontend-") as tmp:
        where = Path(tmp)
        spec = FrontendSpec.quick(where) if quick else FrontendSpec(where)
        spec.baseline = baseline.resolve() if baseline else None
        spec.baseline_rest_model_call = baseline_rest_model_call
        try:
            results = run_frontend(spec, say=progress)
        except (RuntimeError, OSError, ValueError) as exc:
            stderr.print(f"[red]benchmark failed:[/] {escape(str(exc))}")
            raise typer.Exit(EXIT_FAILED) from None
    item = BY_NAME["frontend"]
    if name:  # a one-off (a before/after): its own name and the command that made it
        item = replace(item, name=f"frontend-{name}", command=(*item.command, "--name", name))
    json_path, md_path = write(item, results, out)
    for line in goal_lines(results):
        typer.echo(line)
    typer.echo(f"results: {json_path} and {md_path} ({results['seconds']:.0f} s)")
    if strict and not all(g["passed"] for g in results["goals"]):
        raise typer.Exit(EXIT_MISSED)


def figures(
    skip: Annotated[
        str,
        typer.Option(
            "--skip",
            help="Results not to regenerate: "
            + ", ".join([p.name for p in PUBLISHED] + ["sample-report"])
            + ".",
        ),
    ] = "",
    soak_duration: Annotated[
        str, typer.Option("--soak-duration", help="The soak's length (the published one's: 15m).")
    ] = "15m",
) -> None:
    """Every published figure, regenerated from the current code, one command after the other:
    tools/bench/results/* (the suite, the generator, the model families, the soak, the many-models
    run, TLS's cost, the peers, the containers, the fuzzers) and the manual's sample report
    (docs/loadtest). Each command is the one its page names."""
    from graphserve.clikit import option_seconds
    from tools.bench.published import run_figures

    skipped = tuple(n.strip() for n in skip.split(",") if n.strip())
    known = {p.name for p in PUBLISHED} | {"sample-report"}
    if set(skipped) - known:
        stderr.print(f"[red]error:[/] --skip {skip!r}: expected some of {', '.join(sorted(known))}")
        raise typer.Exit(2)
    option_seconds(soak_duration, "--soak-duration")
    took = run_figures(skipped, soak_duration, say=progress)
    for name, seconds in took.items():
        typer.echo(f"{name}: {seconds:.0f} s")


def sample_report(
    out: Annotated[
        Path, typer.Option("--out", help="Where report.{json,md,html} and its plots go.")
    ] = Path("docs/loadtest"),
) -> None:
    """The manual's sample load-test report: the load-test guide's `loadtest compare` command
    on the example mlp (graph, null and eager servers started by the command itself)."""
    from tools.bench.published import sample_report as write_sample

    for path in write_sample(out):
        typer.echo(str(path))


def demo(
    out: Annotated[
        Path, typer.Option("--out", help="Where demo.json and demo.md are written.")
    ] = Path("tools/bench/results"),
) -> None:
    """The README's demo figure: `make demo DURATION=10s` from this clone, its headline and
    table written to OUT/demo.json and demo.md and into README.md between its markers."""
    from tools.bench.demo import run_demo, write_readme
    from tools.bench.published import write

    results = run_demo()
    paths = write("demo", results, out)
    write_readme(results)
    typer.echo(f"results: {', '.join(str(p) for p in paths)} and README.md")


def containers(
    out: Annotated[
        Path, typer.Option("--out", help="Where containers.json and containers.md are written.")
    ] = Path("tools/bench/results"),
    skip_cold: Annotated[
        bool, typer.Option("--skip-cold", help="Only cached builds (no debootstrap, no fetch).")
    ] = False,
    duration: Annotated[
        str, typer.Option("--duration", help="Measured per arm and step of the load.")
    ] = "15s",
) -> None:
    """What containers cost here: image builds cold and cached, `deploy tfserving` to every
    model AVAILABLE, and the same load against the server on the host and in its container.
    Needs a Docker engine (`make docker-engine`); root for the cold base."""
    from graphserve.clikit import option_seconds
    from tools.bench.containers import run_containers

    option_seconds(duration)
    typer.echo(run_containers(out, skip_cold, duration))


def runners(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="SavedModel version directories.")
    ] = None,
    mlp: Annotated[bool, typer.Option("--mlp", help="Also export and time examples:mlp.")] = False,
    batch: Annotated[
        list[int] | None, typer.Option("--batch", help="Batch sizes [default: 1 and 32].")
    ] = None,
    budget: Annotated[float, typer.Option("--budget", help="Seconds per batch size.")] = 3.0,
    signature: Annotated[str, typer.Option("--signature")] = "serving_default",
) -> None:
    """Session or function: the two ways the graph server runs a SavedModel, timed side by
    side (TF1 Session as TF Serving runs it, against `tf.saved_model.load`'s functions)."""
    quiet_tensorflow()
    from tools.bench.runners import run_runners

    if not paths and not mlp:
        stderr.print("[red]error:[/] give SavedModel version directories, or --mlp")
        raise typer.Exit(2)
    for line in run_runners(paths or [], mlp, batch or [1, 32], budget, signature):
        typer.echo(line)


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.callback(invoke_without_command=True, epilog=STRICT_EPILOG)(bench)
app.command("generator")(generator)
app.command("soak", epilog=STRICT_EPILOG)(soak)
app.command("many", epilog=STRICT_EPILOG)(many)
app.command("peers", epilog=STRICT_EPILOG)(peers)
app.command("families")(families)
app.command("tls")(tls)
app.command("frontend")(frontend)
app.command("traffic", epilog=STRICT_EPILOG)(traffic)
app.command("shapes")(shapes)
app.command("figures")(figures)
app.command("sample-report")(sample_report)
app.command("containers")(containers)
app.command("demo")(demo)
app.command("runners")(runners)
