"""`graphserve conformance ADDRESS` and `graphserve conformance write-models DIR`.

Parses arguments and prints results; the work is in conformance.run and conformance.models.
Exit codes: 0 no case failed (each passed, deviated knowingly or was n/a; deviations are always
shown), 1 the server cannot be reached (TLS failing included) or does not serve the model, 2 bad
arguments (a --request that does not fit the signature, TLS options that cannot work), 3 a case
failed.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperGroup

from graphserve.clikit import TlsCa, TlsCert, TlsKey, TlsServerName, client_tls, stderr
from graphserve.core.errors import EXIT_MISSED, ExportError, GraphserveError, exit_epilog
from graphserve.core.inputs import load_ranges
from graphserve.core.logs import quiet_tensorflow

__all__ = ["EXIT_CASE_FAILED", "app"]

EXIT_CASE_FAILED = EXIT_MISSED  # the server answered, and some answer is not TF Serving's


class _RunByDefault(TyperGroup):
    """`conformance ADDRESS ...` runs the cases; `conformance write-models DIR` writes the
    models: a first argument that is not a subcommand's name is the address of `run`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # click's Context
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_RunByDefault,
    help="Run TF Serving's own test cases against any server that speaks its APIs.",
    no_args_is_help=True,
)


class Output(StrEnum):
    text = "text"
    json = "json"


_SHORT = {
    "pass": "[green]pass[/]",
    "fail": "[red]FAIL[/]",
    "deviates": "[yellow]DEVIATES[/]",
    "n/a": "[dim]n/a [/]",
}


@app.command(
    "run",
    epilog=exit_epilog(
        {EXIT_CASE_FAILED: "a case failed: the server answered, and an answer is not TF Serving's."}
    ),
)
def run(
    address: Annotated[
        str,
        typer.Argument(help="the server's gRPC address, HOST:PORT (grpcs://HOST:PORT: over TLS)"),
    ],
    rest: Annotated[
        str | None,
        typer.Option(
            help="its REST address, HOST:PORT (https://: over TLS; http://: plaintext even with "
            "--tls-*, as TF Serving serves REST beside a TLS gRPC port) [default: REST cases "
            "are n/a]"
        ),
    ] = None,
    model: Annotated[str, typer.Option(help="the model to test (TF Serving's default name)")] = (
        "default"
    ),
    signature: Annotated[
        str | None,
        typer.Option(
            help="the signature Predict uses [default: serving_default, else the "
            "first predict signature]"
        ),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            help="a version label to route through (repeat); TF Serving's API does not list labels"
        ),
    ] = None,
    reference: Annotated[
        bool,
        typer.Option(
            "--reference",
            help="the server serves write-models' models (tf1.config "
            "or tf2.config): run TF Serving's whole table too",
        ),
    ] = False,
    request: Annotated[
        Path | None,
        typer.Option(
            help="a JSON predict body (TF Serving's REST: instances or inputs) the model takes, "
            "for models that refuse generated inputs (tf.Examples with required features)"
        ),
    ] = None,
    input_range: Annotated[
        list[str] | None,
        typer.Option(
            help="NAME=LOW:HIGH: the values generated for an input (e.g. token_ids=0:30521), "
            "repeatable, as for export"
        ),
    ] = None,
    output: Annotated[Output, typer.Option(help="'json': only the report on stdout")] = (
        Output.text
    ),
    out: Annotated[
        Path | None, typer.Option(help="also write conformance.json and conformance.md here")
    ] = None,
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds per request")] = 10.0,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    tls_server_name: TlsServerName = None,
) -> None:
    """Run the cases of TF Serving's own tests against the server at ADDRESS: the ones that
    hold for any model (status, metadata, Predict in every form, routing, every model-free
    error), driven by the server's own metadata; with --reference, TF Serving's whole table on
    its half_plus_two models. One line per case: pass, FAIL, DEVIATES (graphserve's known
    other answer, under an option such as --strict-json-numbers: shown, not a failure) or n/a;
    exit 3 when a case fails, 1 when the server cannot be reached or does not serve the
    model. Over TLS (--tls-* or grpcs:// / https://) every case is the same request on a TLS
    connection."""
    tls = client_tls(tls_ca, tls_cert, tls_key, tls_server_name)
    if request is not None and reference:
        stderr.print("[red]error:[/] --request is for --model's cases, not with --reference")
        raise typer.Exit(2)
    body = None
    try:
        ranges = load_ranges(input_range or [])
    except ExportError as exc:
        stderr.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if request is not None:
        try:
            body = json.loads(request.read_text())
        except (OSError, ValueError) as exc:
            stderr.print(f"[red]error:[/] --request {escape(str(request))}: {escape(str(exc))}")
            raise typer.Exit(2) from None
    quiet_tensorflow()
    from graphserve.conformance.run import ConformanceSpec, run_conformance

    spec = ConformanceSpec(
        address=address,
        rest=rest,
        model=model,
        signature=signature,
        labels=tuple(label or ()),
        reference=reference,
        request=body,
        ranges=ranges,
        timeout=timeout,
        tls=tls,
    )
    try:
        report = run_conformance(spec)
    except GraphserveError as exc:
        stderr.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(exc.exit_code) from None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "conformance.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
        (out / "conformance.md").write_text(markdown(report))
    if output is Output.json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print(report)
    if report.failed:
        raise typer.Exit(EXIT_CASE_FAILED)


def _print(report: Any) -> None:
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    for result in report.results:
        where = f"[dim]{escape(result.source)}[/] {escape(result.test)}"
        console.print(f"{_SHORT[result.outcome]}  {escape(result.case)}  {where}")
        if result.outcome == "fail":
            console.print(f"        expected: {escape(result.expected)}")
            console.print(f"        got:      {escape(result.got)}")
        elif result.outcome == "deviates":
            console.print(f"        TF Serving:  {escape(result.expected)}")
            console.print(f"        this server: {escape(result.got)}")
            console.print(f"        [yellow]why:[/]         {escape(result.reason)}")
        elif result.outcome == "n/a":
            console.print(f"        [dim]{escape(result.reason)}[/]")
    if report.server:
        console.print(escape(whose(report)))
    console.print(escape(summary(report)))


def summary(report: Any) -> str:
    """One line: the server, its models, the verdict and every outcome's count."""
    counts = report.counts()
    models = ", ".join(report.models)
    if counts["fail"]:
        verdict = "does NOT conform"
    elif counts["deviates"]:
        verdict = "conforms but for known deviations"
    else:
        verdict = "conforms"
    server = f"; server: {report.server}" if report.server else ""
    return (
        f"{report.address} ({models}{server}) {verdict}: {counts['pass']} passed, "
        f"{counts['fail']} failed, {counts['deviates']} deviate, {counts['n/a']} not applicable"
    )


def whose(report: Any) -> str:
    """What a result from a server that says it is graphserve means."""
    return (
        f"the server says it is {report.server}, in a metadata field of graphserve's own: "
        "these are graphserve's answers, not TF Serving's, whatever its image or binary is "
        "named (the TF Serving stand-in is graphserve)"
    )


def markdown(report: Any) -> str:
    """The report as a Markdown table: failures, then deviations, then the rest."""
    lines = [f"# Conformance: {summary(report)}", ""]
    if report.server:
        said = whose(report)
        lines += [said[0].upper() + said[1:] + ".", ""]
    lines += [
        "| result | case | TF Serving test | expected (TF Serving's answer) | got / reason |",
        "| --- | --- | --- | --- | --- |",
    ]
    order = {"fail": 0, "deviates": 1, "pass": 2, "n/a": 3}
    for r in sorted(report.results, key=lambda r: order[r.outcome]):
        said = f"{r.got}: {r.reason}" if r.outcome == "deviates" else r.got or r.reason
        cells = [r.outcome, r.case, f"`{r.source}` {r.test}", r.expected, said]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


@app.command("write-models")
def write_models(
    directory: Annotated[Path, typer.Argument(help="where to write them (a new directory)")],
    serve_from: Annotated[
        str | None,
        typer.Option(
            help="DIR as the server sees it, for the configs' base paths (e.g. a "
            "container's mount point) [default: DIR]"
        ),
    ] = None,
) -> None:
    """Write TF Serving's half_plus_two test models as its generators build them (TF1 with
    tf.Example, assets and a zero-padded version; TF2; two versions with labels) and a model
    config for each flavour: serve one with any server, then run `conformance ADDRESS
    --reference`."""
    quiet_tensorflow()
    from graphserve.conformance.models import write_reference_models

    try:
        models = write_reference_models(directory, serve_from)
    except FileExistsError as exc:
        stderr.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    typer.echo(f"wrote TF Serving's reference models to {models.root}:")
    for name, path in (("tf1", models.tf1), ("tf2", models.tf2), ("two", models.two)):
        versions = ", ".join(sorted(p.name for p in path.iterdir()))
        typer.echo(f"  {name:<4} {path}  (versions {versions})")
    typer.echo(f"serve them, e.g.: graphserve serve graph --model_config_file {models.tf1_config}")
    typer.echo(
        "           or:    tensorflow_model_server --model_config_file=... "
        "--port=8500 --rest_api_port=8501"
    )
    typer.echo(
        "then:             graphserve conformance 127.0.0.1:8500 --rest 127.0.0.1:8501 --reference"
    )
