"""The null server: the same stack with no model work, run as a user runs it (a child process)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import wrappers_pb2
from savedmodels import write_tf1_multi_signature  # pytest puts tests/ on sys.path
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core import client, processes
from graphserve.core.client import GrpcClient, RestClient
from graphserve.core.codec import array_from_proto
from graphserve.core.processes import ServerProcess
from graphserve.serving.nullrunner import NullRunner
from graphserve.serving.runners import GraphRunner

X = np.random.default_rng(3).standard_normal((3, 784)).astype(np.float32)


@dataclass(frozen=True)
class NullServer:
    grpc: str
    rest: str


@pytest.fixture(scope="module")
def null_server(mlp_export, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NullServer]:
    """`graphserve serve null` on the exported mlp, a child process on free loopback ports."""
    server = ServerProcess.on_free_ports(
        ["null", "--model-base-path", str(mlp_export.model_dir), "--model-name", "mlp"],
        "mlp",
        log_path=tmp_path_factory.mktemp("null") / "server.log",
    )
    with server:
        yield NullServer(server.grpc_address, str(server.rest_address))
    assert server.stop() == 0, server.log_tail()


def _predict(address: str, x: np.ndarray) -> Any:
    with GrpcClient.connect(address) as grpc_client:
        return grpc_client.predict(client.predict_request("mlp", {"images": x}))


def _rest_predict(address: str, body: Any) -> tuple[int, Any]:
    with RestClient(address) as rest:
        reply = rest.predict("mlp", body)
    return reply.status, reply.json()


def test_grpc_answers_zeros_shaped_as_the_graph_server_answers(null_server, mlp_servers) -> None:
    null = _predict(null_server.grpc, X)
    graph = _predict(mlp_servers.graph_grpc, X)
    assert set(null.outputs) == set(graph.outputs) == {"logits"}
    for name, tensor in null.outputs.items():
        assert tensor.dtype == graph.outputs[name].dtype
        assert tensor.tensor_shape == graph.outputs[name].tensor_shape
        values = array_from_proto(tensor)
        assert values.shape == (3, 10)
        assert not values.any()
    assert null.model_spec.name == "mlp"
    assert null.model_spec.version.value == 1
    assert null.model_spec.signature_name == "serving_default"


def test_rest_answers_zeros_shaped_as_the_graph_server_answers(null_server, mlp_servers) -> None:
    body = {"instances": X[:2].tolist()}
    status, null = _rest_predict(null_server.rest, body)
    graph_status, graph = _rest_predict(mlp_servers.graph_rest, body)
    assert status == graph_status == 200
    assert np.asarray(null["predictions"]).shape == np.asarray(graph["predictions"]).shape
    assert np.asarray(null["predictions"]).shape == (2, 10)
    assert not np.asarray(null["predictions"]).any()


def test_grpc_validates_inputs_against_the_signature(null_server) -> None:
    with pytest.raises(grpc.RpcError) as dtype_error:
        _predict(null_server.grpc, X.astype(np.int64))
    assert dtype_error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "images" in dtype_error.value.details()
    assert "float32" in dtype_error.value.details()

    with pytest.raises(grpc.RpcError) as shape_error:
        _predict(null_server.grpc, X[:, :5])
    assert shape_error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "784" in shape_error.value.details()


def test_rest_validates_inputs_against_the_signature(null_server) -> None:
    status, body = _rest_predict(null_server.rest, {"instances": [[1.0, 2.0]]})
    assert status == 400
    assert "784" in body["error"]


def test_metadata_says_the_runner_is_null(null_server, mlp_servers) -> None:
    with RestClient(null_server.rest) as rest:
        reply = rest.metadata("mlp")
    assert reply.status == 200
    assert reply.headers["x-graphserve-runner"] == "null"
    body = reply.json()
    assert set(body["metadata"]) == {"signature_def"}  # TF Serving's body, nothing added
    assert set(body["metadata"]["signature_def"]["signature_def"]) == {"serving_default"}

    request = client.metadata_request("mlp", fields=("signature_def", "runner"))
    with GrpcClient.connect(null_server.grpc) as grpc_client:
        response = grpc_client.metadata(request)
    runner = wrappers_pb2.StringValue()
    response.metadata["runner"].Unpack(runner)
    assert runner.value == "null"


def test_null_runner_serves_what_the_graph_runner_serves(tmp_path: Path) -> None:
    """Every signature, dtype and shape of a TF1 model with string and int64 outputs, as the
    graph runner serves them, without loading the graph."""
    path = write_tf1_multi_signature(tmp_path / "1")
    null, graph = NullRunner(path), GraphRunner(path)
    assert null.kind == "null"
    assert null.signatures.keys() == graph.signatures.keys()
    for key, sig in null.signatures.items():
        assert sig.inputs == graph.signatures[key].inputs
        assert sig.outputs == graph.signatures[key].outputs

    x = np.ones((4, 3), np.float32)
    zeros, real = null.run("serving_default", {"x": x}), graph.run("serving_default", {"x": x})
    assert zeros.keys() == real.keys()
    for name, array in zeros.items():
        assert array.dtype == real[name].dtype
        assert array.shape == real[name].shape
        assert not array.any()

    classified = null.run("classify", {"inputs": np.array([b"a", b"b"], dtype=object)})
    assert classified["classes"].shape == (2, 2)
    assert classified["classes"].tolist() == [[b"", b""], [b"", b""]]
    assert classified["scores"].dtype == np.float32


def test_null_answers_are_cached_per_signature_and_batch(tmp_path: Path) -> None:
    null = NullRunner(write_tf1_multi_signature(tmp_path / "1"))
    first = null.run("serving_default", {"x": np.ones((4, 3), np.float32)})
    again = null.run("serving_default", {"x": np.zeros((4, 3), np.float32)})
    other = null.run("serving_default", {"x": np.ones((5, 3), np.float32)})
    assert first["probabilities"] is again["probabilities"]
    assert other["probabilities"].shape == (5, 2)
    assert not first["probabilities"].flags.writeable


def test_serve_null_reports_a_base_path_without_versions(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["serve", "null", "--model-base-path", str(tmp_path), "--model-name", "m"]
    )
    assert result.exit_code == 1
    assert "model 'm' has no servable version" in result.stderr


def test_a_port_taken_between_the_pick_and_the_bind_is_picked_again(
    mlp_export, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ports are picked free seconds before the child binds them; a socket that takes one in
    between (CI saw an outgoing connection do it) makes the child exit, and start() picks
    again instead of failing the run."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    real_free_ports = processes.free_ports
    picks = [(port, *real_free_ports(1))]  # the first pick's gRPC port is taken
    monkeypatch.setattr(
        processes,
        "free_ports",
        lambda count, host="127.0.0.1": picks.pop() if picks else real_free_ports(count, host),
    )
    server = ServerProcess.on_free_ports(
        ["null", "--model-base-path", str(mlp_export.model_dir), "--model-name", "mlp"],
        "mlp",
        log_path=tmp_path / "server.log",
    )
    assert server.grpc_address == f"127.0.0.1:{port}"
    with taken, server:
        assert server.grpc_address != f"127.0.0.1:{port}"
        assert _predict(server.grpc_address, X).outputs["logits"].tensor_shape.dim[0].size == 3
    assert server.stop() == 0, server.log_tail()
