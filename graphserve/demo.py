"""`graphserve demo`: the whole job on this machine, end to end.

Export SOURCE, start the embedded graph server and the eager server as child processes on free
loopback ports, run the locust comparison against both, print the table, stop both servers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from graphserve.clikit import option_seconds, progress, stderr
from graphserve.core.errors import EXIT_FAILED
from graphserve.core.logs import quiet_tensorflow
from graphserve.loadtest.cli import OutputFormat, Protocol, parse_loads


def demo(
    source: Annotated[str, typer.Option("--source", help="Model source to export and serve.")] = (
        "examples:mlp"
    ),
    name: Annotated[str, typer.Option("--name", help="Model name.")] = "mlp",
    base_path: Annotated[Path, typer.Option("--base-path", help="Model base path.")] = Path(
        "models"
    ),
    duration: Annotated[
        str, typer.Option("--duration", help="Measured time per arm and step: 20s, 1m, 90.")
    ] = "20s",
    users: Annotated[
        str, typer.Option("--users", help="Concurrent locust users per step, e.g. 1,4.")
    ] = "1",
    protocol: Annotated[Protocol, typer.Option("--protocol", help="Load-test protocol.")] = (
        Protocol.grpc
    ),
    out: Annotated[Path, typer.Option("--out", help="Report directory.")] = Path("reports/demo"),
    output: Annotated[
        OutputFormat, typer.Option(help="json: the export result and report JSON on stdout")
    ] = OutputFormat.text,
) -> None:
    """Export, serve graph and eager on loopback, compare them with locust, stop, report."""
    duration_s = option_seconds(duration)
    loads = parse_loads(users, "--users")
    quiet_tensorflow()
    from graphserve.exporter import ExportError, ExportSpec, export_model
    from graphserve.loadtest import CompareSpec, LoadSpec, LoadTestError
    from graphserve.loadtest.cli import ProgressPrinter, finish
    from graphserve.loadtest.comparison.managed import run_managed

    stderr.rule("1/2 export")
    try:
        result = export_model(
            ExportSpec(source=source, name=name, base_path=base_path),
            log=progress,
        )
    except ExportError as exc:
        stderr.print(f"[red]export failed:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_FAILED) from None
    stderr.print(f"exported {result.path}; parity max abs error {result.parity.max_abs_error:.2g}")

    stderr.rule(f"2/2 serve graph and eager, load both: {duration}/arm/step, {protocol}")
    window_s = min(5.0, duration_s)
    windows = max(1, math.ceil(duration_s / window_s))
    spec = CompareSpec(
        arms=(),
        protocol=protocol.value,
        model_name=name,
        model_base_path=base_path / name,
        load=LoadSpec(loads=loads, window_s=window_s, min_windows=windows, max_windows=windows),
    )
    quiet = output is OutputFormat.json
    try:
        report = run_managed(
            spec,
            out,
            kinds=["graph", "eager"],
            source=source,
            say=progress,
            progress=None if quiet else ProgressPrinter(),
        )
    except LoadTestError as exc:
        stderr.print(f"[red]demo failed:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_FAILED) from None
    if quiet:
        typer.echo(json.dumps({"export": result.to_json(), "report": report.to_json()}, indent=2))
    finish(report, out, quiet, print_json=False)
