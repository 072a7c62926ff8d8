"""`graphserve traffic show | warmup | make`: read traffic files, warm a version up from one, and
make one for a version.

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


@app.command(epilog=exit_epilog({2: "the version, samples or distributions do not fit (why said)"}))
def make(
    version_dir: Annotated[
        Path,
        typer.Argument(
            help="A SavedModel version directory, or BASE/NAME (its newest version).",
            show_default=False,
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="The traffic file to write.")],
    count: Annotated[int, typer.Option(min=1, max=1_000_000, help="Distinct requests.")] = 100,
    batch_sizes: Annotated[
        str,
        typer.Option(help="Rows per request: 1,2,4,8 (alike), 1:0.7,8:0.3 (weights), 1-32."),
    ] = "1",
    seq_lens: Annotated[
        str | None,
        typer.Option(
            help="Lengths of the open dimensions past the batch (sequences), as --batch-sizes.",
            show_default=False,
        ),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="Arrival times at this many a second (default: none).",
            show_default=False,
        ),
    ] = None,
    poisson: Annotated[
        bool, typer.Option("--poisson", help="With --rate: a Poisson process, not even gaps.")
    ] = False,
    samples: Annotated[
        Path | None,
        typer.Option(
            "--samples-file",
            help="Values from this .npz or TF Serving JSON (default: what the export recorded).",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="The model the requests name (default: the version's directory's).",
            show_default=False,
        ),
    ] = None,
    signature_name: Annotated[str, typer.Option(help="The signature they call.")] = (
        "serving_default"
    ),
    seed: Annotated[int, typer.Option(help="Seed of the draws and the values.")] = 0,
) -> None:
    """Write a traffic file of COUNT predict requests for a version: rows drawn from
    --batch-sizes, sequence lengths from --seq-lens, values from --samples-file or from what the
    export recorded (its samples, its ranges), each checked against the signature. With --rate
    the records carry arrival times, and `loadtest replay` sends them at that rate."""
    from graphserve.core.logs import quiet_tensorflow

    quiet_tensorflow()
    from graphserve.loadtest.traffic.make import (
        MakeError,
        MakeSpec,
        make_traffic,
        parse_distribution,
    )

    try:
        spec = MakeSpec(
            version_dir=version_dir, out=out, model=model, signature=signature_name,
            batch_sizes=parse_distribution(batch_sizes, "--batch-sizes"),
            seq_lens=parse_distribution(seq_lens, "--seq-lens") if seq_lens else None,
            count=count, rate=rate, arrivals="poisson" if poisson else "constant", seed=seed,
            samples=samples,
        )  # fmt: skip
        made = make_traffic(spec)
    except (MakeError, GraphserveError, OSError) as exc:
        stderr.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(EXIT_USAGE) from None
    timing = f", {made.span_s:.3f} s at {rate:g} req/s" if made.span_s is not None else ""
    typer.echo(
        f"{made.path}: {made.records} requests for {made.model}:{made.signature}, "
        f"{len(made.shapes)} input shapes{timing}; values {made.inputs}"
    )
