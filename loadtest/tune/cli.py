"""`graphserve tune batching`: parses arguments and prints progress; the work is in loadtest.tune.

Only typer, rich and the standard library load here; TensorFlow and locust load when it runs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
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
from graphserve.core.tls import TlsConfigError
from graphserve.loadtest.cli import Protocol, dialed_tls

__all__ = ["app"]

app = typer.Typer(help="Find serving settings by measurement.", no_args_is_help=True)


@app.callback()
def tune() -> None:
    """Find serving settings by measurement."""


@app.command(
    epilog=exit_epilog(
        {EXIT_MISSED: "no candidate held the --slo gates (no batching_parameters.txt is written)."}
    )
)
def batching(
    model_base_path: Annotated[
        Path, typer.Option(help="BASE/NAME: the model whose newest version is tuned")
    ],
    slo: Annotated[
        list[str],
        typer.Option(help="the latency budget each candidate must hold, e.g. 'p99<20ms' (repeat)"),
    ],
    address: Annotated[
        str | None,
        typer.Option(
            help="a running TF Serving that watches --model-base-path with --enable_batching "
            "and --enable_per_model_batching_parameters [default: start one here]"
        ),
    ] = None,
    model_name: Annotated[
        str | None, typer.Option(help="the model's name [default: the base path's directory]")
    ] = None,
    clients: Annotated[int, typer.Option(min=1, help="closed-loop clients loading it")] = 16,
    protocol: Annotated[Protocol, typer.Option(help="API to load")] = Protocol.grpc,
    budget: Annotated[str, typer.Option(help="how long the search may take")] = "5m",
    trial: Annotated[str, typer.Option(help="measured time per candidate")] = "6s",
    allow_remote: Annotated[
        bool, typer.Option("--allow-remote", help="allow an --address off this machine")
    ] = False,
    out: Annotated[
        Path | None, typer.Option(help="output directory [default: tune-reports/<UTC time>]")
    ] = None,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    tls_server_name: TlsServerName = None,
) -> None:
    """Search TF Serving's batching knobs (max_batch_size, batch_timeout_micros,
    num_batch_threads, allowed_batch_sizes) under --clients closed-loop users; write the best
    that holds --slo as OUT/batching_parameters.txt, with every trial in OUT/tune.md and
    tune.json. A running server over TLS: --address grpcs://HOST:PORT, or the --tls-* options
    (the tuner's own server serves plaintext). Exits 1 when the search fails or --address
    cannot be reached for TLS, 2 for bad arguments, 3 when no candidate holds."""
    from graphserve.core.errors import LoadTestError, ServerUnreachable
    from graphserve.loadtest.tune.search import TuneSpec, tune_batching

    tls = client_tls(tls_ca, tls_cert, tls_key, tls_server_name)
    if address is None and tls is not None:
        raise typer.BadParameter(
            "the server the tuner starts serves plaintext: the --tls-* options are for a "
            "running server (--address)",
            param_hint="'--tls-ca'",
        )
    if address is not None:
        tls = dialed_tls(address, tls, "--address")

    spec = TuneSpec(
        model_base_path=model_base_path,
        slo=tuple(slo),
        model_name=model_name,
        address=address,
        clients=clients,
        protocol=protocol.value,
        budget_s=option_seconds(budget, "--budget", minimum=10.0),
        trial_s=option_seconds(trial, "--trial", minimum=1.5),
        allow_remote=allow_remote,
        tls=tls,
    )
    if address is not None:
        from graphserve.loadtest.generator.targets import check_loopback

        try:
            check_loopback(address, allow_remote)
        except LoadTestError as exc:
            stderr.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
            raise typer.Exit(code=exc.exit_code) from None
    out_dir = out or Path("tune-reports") / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    quiet_tensorflow()
    try:
        result = tune_batching(spec, out_dir, _progress)
    except (LoadTestError, ServerUnreachable, TlsConfigError) as exc:
        stderr.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=exc.exit_code) from None
    stderr.print(f"[bold]{result.reason}[/bold]", highlight=False)
    stderr.print(f"trials: {out_dir / 'tune.md'} (and tune.json, trials/)", highlight=False)
    if result.parameters_file is None:
        raise typer.Exit(code=EXIT_MISSED)
    typer.echo(str(out_dir / result.parameters_file))


def _progress(event: dict[str, Any]) -> None:
    kind = event.get("event")
    if kind == "trial_start":
        stderr.print(f"[dim]trial {event['index']}: {event['label']}[/dim]", highlight=False)
    elif kind == "trial":
        rps, p99 = event["throughput_rps"], event["p99_ms"]
        verdict = "[green]held[/green]" if event["held"] else f"[red]{event['why']}[/red]"
        stderr.print(
            f"  {'-' if rps is None else f'{rps:,.0f}'} req/s, "
            f"p99 {'-' if p99 is None else f'{p99:.3g}'} ms: {verdict}",
            highlight=False,
        )
