"""`python -m bench` (`make bench`): the benchmark suite, its goals printed with pass/miss, results
written. A development tool run from a clone: bench/ is not part of the wheel."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from graphserve.core.console import progress, quiet_tensorflow, stderr
from graphserve.core.errors import EXIT_FAILED

EXIT_MISSED = 3  # as a missed SLO gate in `loadtest compare`: the run worked, a goal did not


def bench(
    out: Annotated[
        Path, typer.Option("--out", help="Where results.json and results.md are written.")
    ] = Path("bench"),
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
    """Measure graph vs eager in-process and served, batching, codec, cold start and a plain
    Flask peer; print every goal ratio with pass/miss; write OUT/results.json and results.md."""
    quiet_tensorflow()
    from bench.render import goal_lines
    from bench.run import MODELS, BenchSpec, run_bench, write_results

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


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command()(bench)
