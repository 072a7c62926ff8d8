"""`graphserve export`: argument parsing and rendering only; the work is `export_model`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from exporter.errors import ExportError
from exporter.signature import parse_input_spec
from graphserve.console import EXIT_FAILED, EXIT_USAGE, quiet_tensorflow, stderr


def export(
    source: Annotated[
        str,
        typer.Argument(
            help="package.module:factory, a .keras file, or examples:NAME (e.g. examples:mlp)."
        ),
    ],
    name: Annotated[str, typer.Option("--name", help="Model name: the directory under BASE.")],
    base_path: Annotated[
        Path, typer.Option("--base-path", help="Model base path; writes BASE/NAME/VERSION.")
    ] = Path("models"),
    version: Annotated[
        int | None,
        typer.Option("--version", min=1, help="Version number (default: next integer)."),
    ] = None,
    inputs: Annotated[
        list[str] | None,
        typer.Option(
            "--input",
            help="Input spec NAME:DTYPE:SHAPE, repeatable; shape like -1,784 (-1 = any size).",
        ),
    ] = None,
    atol: Annotated[float, typer.Option(help="Parity: absolute tolerance for floats.")] = 1e-5,
    rtol: Annotated[float, typer.Option(help="Parity: relative tolerance for floats.")] = 1e-4,
    output: Annotated[
        str, typer.Option("--output", help="'text' or 'json' (only JSON on stdout).")
    ] = "text",
) -> None:
    """Trace SOURCE into a concrete function and write a verified SavedModel BASE/NAME/VERSION."""
    if output not in ("text", "json"):
        stderr.print(f"[red]error:[/] --output must be 'text' or 'json', got {output!r}")
        raise typer.Exit(EXIT_USAGE)
    try:
        specs = [parse_input_spec(text) for text in inputs or []]
    except ExportError as exc:
        stderr.print(f"[red]error:[/] {exc}")
        raise typer.Exit(EXIT_USAGE) from None
    quiet_tensorflow()
    from exporter.api import ExportSpec, export_model

    spec = ExportSpec(
        source=source,
        name=name,
        base_path=base_path,
        version=version,
        inputs=specs,
        atol=atol,
        rtol=rtol,
    )
    try:
        result = export_model(spec, log=lambda msg: stderr.print(f"[dim]{msg}[/]"))
    except ExportError as exc:
        stderr.print(f"[red]export failed:[/] {exc}")
        raise typer.Exit(EXIT_FAILED) from None
    if output == "json":
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    sig = result.signatures["serving_default"]
    stderr.print(
        f"[green]exported[/] {result.path} (version {result.version}) in {result.seconds:.1f}s; "
        f"parity max abs error {result.parity.max_abs_error:.2g} over "
        f"{result.parity.batches} batches"
    )
    for kind in ("inputs", "outputs"):
        for tname, t in sig[kind].items():
            stderr.print(f"  {kind[:-1]:6} {tname}: {t['dtype']} {t['shape']}")
    typer.echo(str(result.path))
