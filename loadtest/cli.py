"""`graphserve loadtest ...`: parses arguments and renders results; the work is in `compare`.

Only typer and the standard library load here, so `graphserve --help` stays fast: TensorFlow and
locust are imported when a comparison actually runs.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from graphserve.console import stderr

__all__ = ["app", "parse_duration"]

app = typer.Typer(help="Load-test TF Serving-compatible servers with locust.", no_args_is_help=True)

_DURATION = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s?)?$")


class Protocol(StrEnum):
    grpc = "grpc"
    rest = "rest"


class OutputFormat(StrEnum):
    text = "text"
    json = "json"


def parse_duration(text: str) -> int:
    """Seconds in `20s`, `1m`, `1m30s`, `2h` or a bare `90`.

    Raises typer.BadParameter (a usage error, exit 2, when raised inside a command) unless the
    text is a duration of at least 1 s.
    """
    match = _DURATION.match(text.strip().lower())
    if not text.strip() or match is None:
        raise _bad_duration(f"{text!r} is not a duration: use e.g. 20s, 1m, 1m30s or 90")
    parts = {k: int(v) if v else 0 for k, v in match.groupdict().items()}
    seconds = parts["h"] * 3600 + parts["m"] * 60 + parts["s"]
    if seconds < 1:
        raise _bad_duration(f"{text!r}: the duration must be at least 1 second")
    return seconds


def _bad_duration(message: str) -> typer.BadParameter:
    return typer.BadParameter(message, param_hint="'--duration'")


@app.callback()
def loadtest() -> None:
    """Load-test TF Serving-compatible servers with locust."""


@app.command()
def compare(
    graph: Annotated[str, typer.Option(help="graph arm address, HOST:PORT (gRPC or REST port)")],
    eager: Annotated[str, typer.Option(help="eager arm address, HOST:PORT (gRPC or REST port)")],
    protocol: Annotated[Protocol, typer.Option(help="API to load")] = Protocol.grpc,
    users: Annotated[int, typer.Option(min=1, help="concurrent locust users per arm")] = 1,
    duration: Annotated[
        str, typer.Option(help="run time per arm: 20s, 1m, 90", show_default=True)
    ] = "20s",
    out: Annotated[
        Path | None,
        typer.Option(help="output directory [default: loadtest-reports/<UTC time>]"),
    ] = None,
    model_name: Annotated[str, typer.Option(help="model to call")] = "mlp",
    signature_name: Annotated[str, typer.Option(help="signature to call")] = "serving_default",
    batch_size: Annotated[int, typer.Option(min=1, help="rows per request")] = 1,
    max_requests: Annotated[
        int | None, typer.Option(min=1, help="stop an arm after this many requests")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of the random payload")] = 0,
    allow_remote: Annotated[
        bool, typer.Option("--allow-remote", help="allow targets that are not on this machine")
    ] = False,
    output: Annotated[
        OutputFormat, typer.Option(help="json: only the report JSON on stdout")
    ] = OutputFormat.text,
) -> None:
    """Run the same locust load against the graph arm, then the eager arm, and compare them.

    Writes OUT/report.json, OUT/report.md, the shared OUT/payload.npz and locust's own files.
    Exits 1 when a run fails or an arm gets no successful request, 2 for a refused target.
    """
    from loadtest.compare import compare as run_compare
    from loadtest.errors import LoadTestError
    from loadtest.report import render_table

    seconds = parse_duration(duration)
    out_dir = out or Path("loadtest-reports") / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    quiet = output is OutputFormat.json
    try:
        report = run_compare(
            {"graph": graph, "eager": eager},
            out_dir,
            protocol=protocol.value,
            users=users,
            duration_s=seconds,
            model_name=model_name,
            signature_name=signature_name,
            batch_size=batch_size,
            max_requests=max_requests,
            seed=seed,
            allow_remote=allow_remote,
            progress=None if quiet else lambda message: stderr.print(f"[dim]{message}[/dim]"),
        )
    except LoadTestError as exc:
        stderr.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(code=exc.exit_code) from None

    if quiet:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        Console().print(render_table(report))
        stderr.print(f"report: {out_dir / 'report.md'} and {out_dir / 'report.json'}")
    if report.arms_without_successes():
        names = ", ".join(report.arms_without_successes())
        stderr.print(
            f"[red]error:[/red] no successful request on {names}; see the *_locust.log and "
            f"*_failures.csv files in {out_dir}",
            highlight=False,
        )
        raise typer.Exit(code=1)
