"""`graphserve traffic show FILE`: what a traffic file holds, before a load sends it.

A traffic file is a TFRecord file of TF Serving's PredictionLogs: a server's request log
(`serve --request-log`, a model's logging_config) or a version's warm-up file. Only typer, rich
and the standard library load here; TensorFlow loads to read the file.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from graphserve.clikit import stderr
from graphserve.core.errors import EXIT_USAGE, GraphserveError, exit_epilog

__all__ = ["app"]

app = typer.Typer(
    help="Read traffic files: logged requests to load a server with.", no_args_is_help=True
)


@app.callback()
def traffic() -> None:
    """Read traffic files: logged requests to load a server with."""


@app.command(epilog=exit_epilog({2: "the file cannot be read as traffic (the error says why)"}))
def show(
    file: Annotated[
        Path, typer.Argument(help="A TFRecord file of PredictionLogs.", show_default=False)
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Count a traffic file's requests by model, signature, kind and shape, with their sizes,
    time span and rate."""
    from graphserve.core.logs import quiet_tensorflow

    quiet_tensorflow()
    from graphserve.model.traffic import TrafficError, read_traffic, summary

    try:
        traffic = read_traffic(file)
    except TrafficError as exc:
        stderr.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_USAGE) from None
    counts = summary(traffic.records)
    if as_json:
        typer.echo(json.dumps(counts, indent=2))
        return
    _print(file, counts)


def _when(ns: int | None) -> str:
    if ns is None:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="microseconds")


def _print(file: Path, counts: dict[str, Any]) -> None:
    out = Console(highlight=False)
    sizes = counts["request_bytes"]
    out.print(
        f"{escape(str(file))}: {counts['records']} requests, "
        f"{sizes['min']} to {sizes['max']} bytes each (median {sizes['median']:g}), "
        f"{sizes['total']} in all"
    )
    if counts["timed"] > 1:
        rate = counts["rate_per_s"]
        out.print(
            f"from {_when(counts['first_ns'])} to {_when(counts['last_ns'])}: "
            f"{counts['span_s']:.3f} s, {rate:.1f} requests a second"
        )
    else:
        out.print("no arrival times (a warm-up file): sent in order, as fast as the load asks")
    for title, key in (
        ("model", "by_model"),
        ("model:signature", "by_signature"),
        ("kind", "by_kind"),
        ("model: input shapes", "by_shape"),
    ):
        table = Table(title=None, show_edge=False)
        table.add_column(title)
        table.add_column("requests", justify="right")
        for label, count in counts[key].items():
            table.add_row(escape(label), str(count))
        out.print(table)


@app.command(
    epilog=exit_epilog(
        {2: "the file cannot be read as traffic, or holds no request for the version (why said)"}
    )
)
def warmup(
    file: Annotated[
        Path, typer.Argument(help="A TFRecord file of PredictionLogs.", show_default=False)
    ],
    version_dir: Annotated[
        Path,
        typer.Argument(help="The SavedModel version directory to warm up.", show_default=False),
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Take the records of this model (default: every record, whatever it names).",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option("--limit", min=1, max=1000, help="Records at most (TF Serving's cap)."),
    ] = 1000,
) -> None:
    """Write VERSION_DIR/assets.extra/tf_serving_warmup_requests from logged traffic: one
    predict request for each signature and input shape the file holds, the most frequent first,
    each checked against the version's signature. TF Serving and graphserve replay them when
    they load the version."""
    from graphserve.core.logs import quiet_tensorflow

    quiet_tensorflow()
    from graphserve.model.traffic import TrafficError, fitting, read_traffic, warmup_selection
    from graphserve.model.warmup import write_warmup_records

    try:
        records = list(read_traffic(file).records)
        if model is not None:
            records = [r for r in records if r.model == model]
        chosen = warmup_selection(fitting(records, version_dir), limit)
        if not chosen:
            named = f" for model {model!r}" if model else ""
            raise TrafficError(f"{file} holds no predict request{named} to warm up with")
    except (GraphserveError, OSError, ValueError) as exc:
        stderr.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_USAGE) from None
    path = write_warmup_records(version_dir, [r.log.predict_log.request for r in chosen])
    shapes = len({r.shapes for r in chosen})
    typer.echo(f"{path}: {len(chosen)} warm-up requests, {shapes} input shapes")
