"""`graphserve export`: argument parsing and rendering only; the work is `export_model`.

Exit codes: 0 exported; 1 the export or its verification failed (nothing was written);
2 usage error (a malformed flag or file, caught before any work).
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from graphserve.clikit import progress, stderr
from graphserve.core.errors import EXIT_FAILED, EXIT_USAGE, ExportError
from graphserve.core.inputs import load_ranges
from graphserve.core.logs import quiet_tensorflow
from graphserve.core.signature import DTYPES, parse_input_spec


def _usage_error(message: str) -> typer.Exit:
    stderr.print(f"[red]error:[/] {escape(message)}")
    return typer.Exit(EXIT_USAGE)


def _parse_signatures(values: list[str]) -> dict[str, str]:
    signatures: dict[str, str] = {}
    for value in values:
        name, sep, function = value.partition("=")
        if not sep or not name.strip() or not function.strip():
            raise _usage_error(f"--signature {value!r}: expected NAME=fn, e.g. embed=encode")
        signatures[name.strip()] = function.strip()
    return signatures


def _parse_ints(option: str, text: str | None) -> list[int]:
    if not text:
        return []
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise _usage_error(f"{option} {text!r}: expected comma-separated integers") from None
    if any(v < 1 for v in values):
        raise _usage_error(f"{option} {text!r}: every value must be at least 1")
    return values


def _parse_tolerances(values: list[str]) -> dict[str, tuple[float, float]]:
    tolerances = {}
    for value in values:
        dtype, sep, numbers = value.partition("=")
        parts = numbers.split(",")
        try:
            atol = float(parts[0])
            rtol = float(parts[1]) if len(parts) > 1 else 0.0
        except ValueError:
            atol = rtol = -1.0
        if not sep or dtype not in DTYPES or len(parts) > 2 or atol < 0 or rtol < 0:
            raise _usage_error(
                f"--tolerance {value!r}: expected DTYPE=ATOL[,RTOL], e.g. float16=1e-2,1e-2"
            )
        tolerances[dtype] = (atol, rtol)
    return tolerances


def _print_cause(exc: BaseException, verbose: bool) -> None:
    """The model's own error under a graphserve one: its full traceback with --verbose, else
    how to see it."""
    cause = exc.__cause__
    if cause is None:
        return
    if not verbose:
        stderr.print("[dim]the full traceback of the model's error: add --verbose[/]")
        return
    import traceback

    text = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
    stderr.print(escape(text.rstrip()), highlight=False, soft_wrap=True)


def export(
    source: Annotated[
        str,
        typer.Argument(
            help="package.module:factory, a .keras file, a SavedModel directory, or "
            "examples:NAME (mlp, power, branchy, cnn, multi_io)."
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
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace VERSION if it exists.")
    ] = False,
    keep: Annotated[
        int | None,
        typer.Option("--keep", min=1, help="After exporting, delete all but the newest N."),
    ] = None,
    inputs: Annotated[
        list[str] | None,
        typer.Option(
            "--input",
            help="serving_default input NAME:DTYPE:SHAPE, repeatable; shape like -1,784 "
            "(-1 = any size).",
        ),
    ] = None,
    output_names: Annotated[
        str | None,
        typer.Option("--output-names", help="Names for serving_default's outputs, in order: a,b."),
    ] = None,
    signature_file: Annotated[
        Path | None,
        typer.Option(
            "--signature-file",
            help="YAML or JSON file of signatures (schema: docs/guides/export.md).",
        ),
    ] = None,
    signatures: Annotated[
        list[str] | None,
        typer.Option(
            "--signature",
            help="Extra signature NAME=fn calling the model's attribute fn, repeatable.",
        ),
    ] = None,
    batch_sizes: Annotated[
        str | None,
        typer.Option(
            "--batch-sizes", help="Also export fixed-batch variants NAME_batchB: e.g. 1,8,32."
        ),
    ] = None,
    jit_compile: Annotated[
        bool, typer.Option("--jit-compile", help="Trace with XLA (jit_compile=True).")
    ] = False,
    warmup_samples: Annotated[
        int,
        typer.Option("--warmup-samples", min=0, help="Warm-up records per signature."),
    ] = 4,
    no_warmup: Annotated[
        bool, typer.Option("--no-warmup", help="Write no warm-up records.")
    ] = False,
    warmup_from: Annotated[
        Path | None,
        typer.Option(
            "--warmup-from",
            help="Warm-up records from a traffic file (a request log): one request per "
            "signature and input shape it holds, checked against the export, instead of "
            "generated ones.",
            show_default=False,
        ),
    ] = None,
    samples_file: Annotated[
        Path | None,
        typer.Option(
            "--samples-file",
            help="Inputs the model takes, for the probe, parity and warm-up: .npz (INPUT or "
            "SIGNATURE/INPUT keys) or a TF Serving predict body (.json).",
        ),
    ] = None,
    input_ranges: Annotated[
        list[str] | None,
        typer.Option(
            "--input-range",
            help="Values generated for an input NAME=LOW:HIGH, repeatable (e.g. "
            "token_ids=0:30521), where the model cannot tell; with no --samples-file.",
        ),
    ] = None,
    parity_batches: Annotated[
        int, typer.Option("--parity-batches", min=1, help="Generated batches compared.")
    ] = 3,
    tolerances: Annotated[
        list[str] | None,
        typer.Option(
            "--tolerance",
            help="Parity tolerance DTYPE=ATOL[,RTOL], repeatable; ATOL is relative to the "
            "output's scale (its largest magnitude, at least 1) (default float32=1e-4,1e-4).",
        ),
    ] = None,
    imports: Annotated[
        list[str] | None,
        typer.Option(
            "--import",
            help="A module of your project to import before loading SOURCE, repeatable: the one "
            "that registers a .keras file's custom layers (recorded in the manifest).",
        ),
    ] = None,
    allow_unsafe: Annotated[
        bool,
        typer.Option(
            "--allow-unsafe", help="Load a .keras file with safe mode off (runs its code)."
        ),
    ] = False,
    allow_ops: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-op", help="Accept a flagged op (e.g. ReadFile) in the graph, repeatable."
        ),
    ] = None,
    tfserving_image: Annotated[
        str | None,
        typer.Option(
            "--tfserving-image",
            help="TF Serving image to check compatibility with (default $TFSERVING_IMAGE or "
            "the pinned release).",
        ),
    ] = None,
    output: Annotated[
        str, typer.Option("--output", help="'text' or 'json' (only JSON on stdout).")
    ] = "text",
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            help="On failure, print the full traceback of the error the model raised, after "
            "graphserve's one-paragraph message.",
        ),
    ] = False,
) -> None:
    """Trace SOURCE into concrete functions and write a verified SavedModel BASE/NAME/VERSION."""
    if output not in ("text", "json"):
        raise _usage_error(f"--output must be 'text' or 'json', got {output!r}")
    try:
        specs = [parse_input_spec(text) for text in inputs or []]
        ranges = load_ranges(input_ranges or [])
        names = [n.strip() for n in (output_names or "").split(",") if n.strip()]
        if signature_file is not None:
            from graphserve.core.contract import load_signature_file

            load_signature_file(signature_file)  # a malformed file is a usage error
    except ExportError as exc:
        raise _usage_error(str(exc)) from None
    if samples_file is not None and not samples_file.is_file():
        raise _usage_error(f"--samples-file {samples_file} does not exist")
    if warmup_from is not None and not warmup_from.is_file():
        raise _usage_error(f"--warmup-from {warmup_from} does not exist")
    if warmup_from is not None and no_warmup:
        raise _usage_error(
            "--warmup-from writes warm-up records and --no-warmup writes none: give one"
        )
    quiet_tensorflow()
    from graphserve.exporter.api import ExportSpec, export_model

    spec = ExportSpec(
        source=source,
        name=name,
        base_path=base_path,
        version=version,
        overwrite=overwrite,
        keep=keep,
        inputs=specs,
        output_names=names,
        signature_file=signature_file,
        signatures=_parse_signatures(signatures or []),
        batch_sizes=_parse_ints("--batch-sizes", batch_sizes),
        jit_compile=jit_compile,
        warmup_samples=0 if no_warmup else warmup_samples,
        warmup_from=warmup_from,
        samples_file=samples_file,
        input_ranges=ranges,
        parity_batches=parity_batches,
        tolerances=_parse_tolerances(tolerances or []),
        allow_unsafe=allow_unsafe,
        imports=list(imports or []),
        allow_ops=list(allow_ops or []),
        tfserving_image=tfserving_image,
    )
    try:
        # A model's own prints go to stderr: with --output json, stdout carries only the JSON.
        with contextlib.redirect_stdout(sys.stderr):
            result = export_model(spec, log=progress)
    except ExportError as exc:
        stderr.print(f"[red]export failed:[/] {escape(str(exc))}")
        _print_cause(exc, verbose)
        raise typer.Exit(EXIT_FAILED) from None
    if output == "json":
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    stderr.print(
        f"[green]exported[/] {result.path} (version {result.version}) in {result.seconds:.1f}s; "
        f"parity max abs error {result.parity.max_abs_error:.2g}, "
        f"{result.warmup_records} warm-up records, {result.op_scan.total_ops} ops scanned"
    )
    for sig_name, sig in result.signatures.items():
        stderr.print(f"  [bold]{sig_name}[/]")
        for kind in ("inputs", "outputs"):
            for tname, t in sig[kind].items():
                stderr.print(f"    {kind[:-1]:6} {tname}: {t['dtype']} {t['shape']}")
    stderr.print("  [bold]tracing[/]")
    for sentence in result.retrace.diagnosis:
        stderr.print(f"    {escape(sentence)}")
    typer.echo(str(result.path))


def inspect(
    path: Annotated[
        Path,
        typer.Argument(
            help="A SavedModel version directory, or a model directory of numeric versions "
            "(the newest is inspected)."
        ),
    ],
    output: Annotated[
        str, typer.Option("--output", help="'text' or 'json' (only JSON on stdout).")
    ] = "text",
) -> None:
    """Show a SavedModel's signatures, dtypes, shapes, op counts, flagged ops, warm-up records and
    manifest, read from its files (the model is not loaded)."""
    if output not in ("text", "json"):
        raise _usage_error(f"--output must be 'text' or 'json', got {output!r}")
    quiet_tensorflow()
    from rich.console import Console

    from graphserve.exporter.inspect import inspect_saved_model, render_text

    try:
        info = inspect_saved_model(path)
    except ExportError as exc:
        stderr.print(f"[red]inspect failed:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_FAILED) from None
    if output == "json":
        typer.echo(json.dumps(info.to_json(), indent=2))
        return
    Console(highlight=False).print(render_text(info))
