"""The `graphserve` command: mounts each package's CLI. Nothing here imports TensorFlow.

Before any command runs, TF_CPP_MIN_LOG_LEVEL is set (unless the user set it) so that TensorFlow's
C++ start-up lines, "failed call to cuInit" on every machine without a GPU among them, stay off
the terminal, in this process and in the servers and locust processes it starts.
"""

from __future__ import annotations

import typer

from graphserve import __version__
from graphserve.conformance.cli import app as conformance_app
from graphserve.core.logs import default_tensorflow_log_level
from graphserve.demo import demo
from graphserve.deploy.cli import app as deploy_app
from graphserve.exporter.cli import export, inspect
from graphserve.loadtest.cli import app as loadtest_app
from graphserve.loadtest.traffic.cli import app as traffic_app
from graphserve.loadtest.tune.cli import app as tune_app
from graphserve.serving.cli import app as serve_app

app = typer.Typer(
    name="graphserve",
    help="Export TensorFlow models as SavedModels, serve them (graph and eager) over the "
    "TensorFlow Serving APIs, and load-test both side by side.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("export")(export)
app.command("inspect")(inspect)
app.add_typer(serve_app, name="serve")
app.add_typer(loadtest_app, name="loadtest")
app.add_typer(deploy_app, name="deploy")
app.add_typer(tune_app, name="tune")
app.add_typer(conformance_app, name="conformance")
app.add_typer(traffic_app, name="traffic")
app.command("demo")(demo)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"graphserve {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """graphserve: graph vs eager, measured."""
    default_tensorflow_log_level()
