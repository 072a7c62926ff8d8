"""`graphserve demo`: the whole job on this machine, end to end.

Export SOURCE, start the embedded graph server and the eager server as child processes on free
loopback ports, run the locust comparison against both, print the table, stop both servers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from graphserve.console import EXIT_FAILED, progress, quiet_tensorflow, stderr
from loadtest.cli import OutputFormat, Protocol, parse_duration


def demo(
    source: Annotated[str, typer.Option("--source", help="Model source to export and serve.")] = (
        "examples:mlp"
    ),
    name: Annotated[str, typer.Option("--name", help="Model name.")] = "mlp",
    base_path: Annotated[Path, typer.Option("--base-path", help="Model base path.")] = Path(
        "models"
    ),
    duration: Annotated[str, typer.Option("--duration", help="Load per arm: 20s, 1m, 90.")] = "20s",
    users: Annotated[int, typer.Option("--users", min=1, help="Concurrent locust users.")] = 1,
    protocol: Annotated[Protocol, typer.Option("--protocol", help="Load-test protocol.")] = (
        Protocol.grpc
    ),
    out: Annotated[Path, typer.Option("--out", help="Report directory.")] = Path("reports/demo"),
    output: Annotated[
        OutputFormat, typer.Option(help="json: the export result and report JSON on stdout")
    ] = OutputFormat.text,
) -> None:
    """Export, serve graph and eager on loopback, compare them with locust, stop, report."""
    duration_s = parse_duration(duration)
    quiet_tensorflow()
    from exporter import ExportError, ExportSpec, export_model
    from graphserve.processes import ServerProcess, free_port
    from loadtest import LoadTestError, compare
    from loadtest.report import render_table

    stderr.rule("1/3 export")
    try:
        result = export_model(
            ExportSpec(source=source, name=name, base_path=base_path),
            log=progress,
        )
    except ExportError as exc:
        stderr.print(f"[red]export failed:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_FAILED) from None
    stderr.print(f"exported {result.path}; parity max abs error {result.parity.max_abs_error:.2g}")

    stderr.rule("2/3 serve")
    servers = {
        "graph": ["graph", "--model-base-path", str(base_path / name)],
        "eager": ["eager", source],
    }
    started: dict[str, ServerProcess] = {}
    targets: dict[str, str] = {}  # arm -> the address locust loads, for the chosen protocol
    try:
        for arm, args in servers.items():
            grpc_port, rest_port = free_port(), free_port()
            process = ServerProcess(
                [
                    *args,
                    "--model-name",
                    name,
                    "--grpc-port",
                    str(grpc_port),
                    "--rest-port",
                    str(rest_port),
                ],
                grpc_address=f"127.0.0.1:{grpc_port}",
                model_name=name,
                log_path=out / f"{arm}-server.log",
            )
            started[arm] = process.start()
            rest_address = f"127.0.0.1:{rest_port}"
            targets[arm] = process.grpc_address if protocol == "grpc" else rest_address
            stderr.print(f"{arm} server ready: gRPC {process.grpc_address}, REST {rest_address}")

        stderr.rule(f"3/3 load test: {duration_s}s per arm, {users} user(s), {protocol}")
        report = compare(
            targets,
            out,
            protocol=protocol.value,
            users=users,
            duration_s=duration_s,
            model_name=name,
            progress=progress,
        )
    except (RuntimeError, LoadTestError) as exc:
        stderr.print(f"[red]demo failed:[/] {exc}")
        raise typer.Exit(EXIT_FAILED) from None
    finally:
        for process in started.values():
            process.stop()

    if output is OutputFormat.json:
        typer.echo(json.dumps({"export": result.to_json(), "report": report.to_dict()}, indent=2))
    else:
        from rich.console import Console

        typer.echo("")
        Console().print(render_table(report))
    stderr.print(f"report: {out / 'report.md'} and {out / 'report.json'}")
    if report.arms_without_successes():
        stderr.print(
            f"[red]no successful requests:[/] {', '.join(report.arms_without_successes())}"
        )
        raise typer.Exit(EXIT_FAILED)
