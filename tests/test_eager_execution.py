"""What the eager server runs, said where a user and a load test look (issue 51).

The eager server is the baseline of every comparison, and it is eager only when the source is:
a SavedModel directory runs its restored graph functions, a module whose call is a tf.function
runs that graph. Each source here is served for real: the metadata's `execution` field (gRPC)
and header (REST), the warning when the version loads, the start line of `graphserve serve
eager`, and a `graphserve loadtest compare` whose report says it and warns.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import wrappers_pb2
from typer.testing import CliRunner

from graphserve.core import client
from graphserve.core.client import GrpcClient, RestClient
from graphserve.core.execution import arm_warning
from graphserve.core.processes import ServerProcess
from graphserve.exporter import parse_input_spec
from graphserve.loadtest.cli import app as loadtest_app
from graphserve.loadtest.generator.metadata import served_as
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from tests.conftest import MlpExport, Servers
from tests.userproject import user_project

PROJECT = {
    "traced": """
        import tensorflow as tf

        SIGNATURE = [tf.TensorSpec([None, 3], tf.float32, name="x")]


        class Scores(tf.Module):
            def __init__(self):
                super().__init__()
                self.w = tf.Variable([1.0, 2.0, 3.0])

            @tf.function(input_signature=SIGNATURE)
            def __call__(self, x):
                return {"y": x * self.w}


        def module():
            return Scores()


        @tf.function(input_signature=SIGNATURE)
        def _doubled(x):
            return {"y": 2.0 * x}


        def function():
            return _doubled


        def _plain(x):
            return {"y": 2.0 * x}


        def plain():
            return _plain
    """,
}
X_INPUT = ["x:float32:-1,3"]

NOT_EAGER = "the eager server does not run eager Python: it runs "


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with user_project(tmp_path_factory.mktemp("project"), PROJECT) as root:
        yield root


def _said(server: ModelServer, name: str) -> tuple[str, str]:
    """The `execution` the server says for `name`, over gRPC (metadata field) and REST
    (header)."""
    request = client.metadata_request(name, fields=("signature_def", "runner", "execution"))
    with GrpcClient.connect(f"127.0.0.1:{server.grpc_port}", timeout=60) as grpc_client:
        response = grpc_client.metadata(request)
    value = wrappers_pb2.StringValue()
    assert response.metadata["execution"].Unpack(value)
    with RestClient(f"127.0.0.1:{server.rest_port}") as rest:
        reply = rest.metadata(name)
    assert reply.status == 200
    assert set(reply.json()["metadata"]) == {"signature_def"}  # TF Serving's body, untouched
    return value.value, reply.headers["x-graphserve-execution"]


@pytest.mark.parametrize(
    ("source", "execution"),
    [
        ("traced:plain", "eager"),
        ("traced:module", "tf.function"),
        ("traced:function", "tf.function"),
        ("examples:mlp", "eager"),
    ],
)
def test_the_eager_server_says_what_runs_its_requests(
    project: Path, source: str, execution: str, caplog: pytest.LogCaptureFixture
) -> None:
    registry = ModelRegistry()
    with caplog.at_level(logging.WARNING, logger="graphserve"):
        inputs = None if source.startswith("examples:") else [parse_input_spec(X_INPUT[0])]
        registry.load_eager("m", source, inputs=inputs)
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with ModelServer(registry, options) as server:
        assert _said(server, "m") == (execution, execution)
    warned = [r.getMessage() for r in caplog.records if NOT_EAGER in r.getMessage()]
    if execution == "eager":
        assert warned == []
    else:
        assert warned == [
            f"{source}: {NOT_EAGER}the source's own tf.function, a graph, so a comparison with "
            "the graph server measures graph against graph, not what graph execution buys "
            "over eager; for an eager baseline, serve a source whose call is plain Python (a "
            "Keras model, a .keras file, or the function as it was before @tf.function)"
        ]


def test_a_savedmodel_source_runs_restored_graph_functions(mlp_export: MlpExport) -> None:
    registry = ModelRegistry()
    registry.load_eager("mlp", str(mlp_export.version_dir))
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with ModelServer(registry, options) as server:
        assert _said(server, "mlp") == ("restored", "restored")


def test_the_graph_server_says_it_runs_graphs(mlp_servers: Servers) -> None:
    """The graph server's execution is the way it runs the SavedModel; the eager one's is
    eager: what a load test reads from each arm."""
    assert served_as("grpc", mlp_servers.graph_grpc, "mlp") == {
        "runner": "graph",
        "execution": "session",
    }
    assert served_as("rest", mlp_servers.eager_rest, "mlp") == {
        "runner": "eager",
        "execution": "eager",
    }
    # A server that does not say (nothing listens here): the load test goes on without it.
    assert served_as("grpc", "127.0.0.1:1", "mlp", timeout_s=1.0) == {}
    assert arm_warning("eager", "graph", "session") == (
        "the eager arm is a graph server (its metadata says runner 'graph'): the comparison "
        "measures graph against graph; point --eager at `graphserve serve eager SOURCE`"
    )
    assert arm_warning("graph", "graph", "session") is None
    assert arm_warning("eager", "eager", "eager") is None


def test_the_start_line_says_the_eager_server_runs_a_tf_function(
    project: Path, tmp_path: Path
) -> None:
    server = ServerProcess.on_free_ports(
        ["eager", "traced:module", "--model-name", "traced", "--input", X_INPUT[0]],
        "traced",
        tmp_path / "eager.log",
    )
    with contextlib.chdir(project):
        server.start()
    try:
        with GrpcClient.connect(server.grpc_address, timeout=60) as grpc_client:
            x = np.ones((2, 3), np.float32)
            response = grpc_client.predict(client.predict_request("traced", {"x": x}))
        np.testing.assert_allclose(client.predict_outputs(response)["y"], x * [1.0, 2.0, 3.0])
    finally:
        server.stop()
    log = " ".join(server.log_path.read_text().split())
    assert (
        "serving traced v1 (eager: the source's own tf.function, a graph, not eager Python): "
    ) in log
    assert f"traced:module: {NOT_EAGER}the source's own tf.function" in log


_SHORT = ["--warmup", "0.5s", "--window", "0.5s", "--min-windows", "2", "--max-windows", "2"]


def test_compare_reports_and_warns_when_the_eager_arm_runs_graphs(
    mlp_export: MlpExport, mlp_servers: Servers, tmp_path: Path
) -> None:
    """The eager arm serves the exported SavedModel itself: graph against graph. The compare
    says so as it starts, and its report names what each arm ran and warns."""
    registry = ModelRegistry()
    registry.load_eager("mlp", str(mlp_export.version_dir))
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with ModelServer(registry, options) as restored:
        result = CliRunner().invoke(
            loadtest_app,
            ["compare", "--graph", mlp_servers.graph_grpc,
             "--eager", f"127.0.0.1:{restored.grpc_port}", "--model-name", "mlp",
             "--users", "1", *_SHORT, "--out", str(tmp_path)],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    warning = (
        f"eager: {NOT_EAGER}a SavedModel's restored graph functions, so a comparison with the "
        "graph server measures graph against graph"
    )
    assert f"warning: {warning}" in " ".join(result.output.split())
    report = json.loads((tmp_path / "report.json").read_text())
    assert {k: report["arms"][k]["execution"] for k in ("graph", "eager")} == {
        "graph": "session",
        "eager": "restored",
    }
    assert report["arms"]["eager"]["runner"] == "eager"
    markdown = " ".join((tmp_path / "report.md").read_text().split())
    assert "Arms graph (a SavedModel's graph in a TF1 Session), eager (a SavedModel's " in markdown
    assert f"## Warnings - ⚠ {warning}" in markdown
    assert "(read with the warnings below)" in report["headline"][0]


@pytest.mark.parametrize("verbose", [False, True])
def test_a_failed_load_logs_its_traceback_under_verbose(verbose: bool) -> None:
    """A model that refuses every generated input: the server does not start, and says why in
    one line; --verbose logs the model's own traceback under it."""
    import subprocess
    import sys

    args = [sys.executable, "-m", "graphserve", "serve", "eager", "tests.test_inputs:build_picky",
            "--model-name", "picky", "--input", "x:int32:-1", "--grpc-port", "0",
            "--rest-port", "0"]  # fmt: skip
    done = subprocess.run(
        args + (["--verbose"] if verbose else []),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "x must be a multiple of 7" in done.stderr
    assert ("Traceback (most recent call last)" in done.stderr) == verbose
    assert ("(--verbose logs the error's full traceback)" in done.stderr) == (not verbose)
