"""`graphserve serve graph` as an operator runs it: a config file, batching, metrics, JSON logs,
and SIGTERM while requests are in flight."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from graphserve.core.codec import array_from_proto, array_to_proto
from graphserve.core.modelconfig import ModelConfig, model_config_text
from graphserve.core.processes import ServerProcess
from graphserve.model.examples import mlp

BATCHING = """
max_batch_size { value: 8 }
batch_timeout_micros { value: 2000 }
num_batch_threads { value: 2 }
allowed_batch_sizes: 4
allowed_batch_sizes: 8
"""


@pytest.mark.slow
def test_operator_flags_and_sigterm_under_load(mlp_export, tmp_path: Path) -> None:
    models = [ModelConfig("mlp", mlp_export.model_dir)]
    (tmp_path / "models.config").write_text(model_config_text(models))
    (tmp_path / "batching.config").write_text(BATCHING)
    server = ServerProcess.on_free_ports(
        [
            "graph",
            "--model-config-file", str(tmp_path / "models.config"),
            "--batching-parameters-file", str(tmp_path / "batching.config"),
            "--metrics",
            "--log-format", "json",
        ],
        "mlp",
        log_path=tmp_path / "server.log",
    )  # fmt: skip
    x = np.random.default_rng(9).standard_normal((1, 784)).astype(np.float32)
    expected = mlp.build()(x).numpy()
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "mlp"
    request.inputs["images"].CopyFrom(array_to_proto(x))
    outcomes: list[str] = []
    stop = threading.Event()

    def drive() -> None:
        with grpc.insecure_channel(server.grpc_address) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            while not stop.is_set():
                try:
                    out = stub.Predict(request, timeout=30).outputs["logits"]
                    np.testing.assert_allclose(array_from_proto(out), expected, atol=1e-5)
                    outcomes.append("ok")
                except grpc.RpcError as err:  # after the stop: refused, never broken
                    outcomes.append(err.code().name)
                    if err.code() == grpc.StatusCode.UNAVAILABLE:
                        return

    with server:
        drivers = [threading.Thread(target=drive) for _ in range(4)]
        for d in drivers:
            d.start()
        while outcomes.count("ok") < 200:
            threading.Event().wait(0.05)
        url = f"http://{server.rest_address}/monitoring/prometheus/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            metrics = response.read().decode()
        code = server.stop()
        stop.set()
        for d in drivers:
            d.join(timeout=30)
    assert code == 0, server.log_tail()
    assert set(outcomes) <= {"ok", "UNAVAILABLE"}, sorted(set(outcomes))
    assert 'graphserve_requests_total{model="mlp"' in metrics
    log_lines = [line for line in server.log_path.read_text().splitlines() if line.startswith("{")]
    records = [json.loads(line) for line in log_lines]
    assert any(r["logger"] == "graphserve.manager" and "AVAILABLE" in r["message"] for r in records)


@pytest.mark.slow
def test_strict_json_numbers_is_an_option_of_every_serve_command(
    mlp_export, tmp_path: Path
) -> None:
    """`serve graph --strict-json-numbers`, as an operator starts it: a finite JSON number past
    float32's range, which TF Serving (and the server without the option) reads as inf, is
    refused with 400 naming the input and the option; `graphserve conformance` against it
    reports TF Serving's case as a known deviation and exits 0."""
    from typer.testing import CliRunner

    from graphserve.cli import app
    from graphserve.core.client import HttpConnection

    for command in ("graph", "eager", "null"):
        usage = CliRunner().invoke(app, ["serve", command, "--help"], env={"COLUMNS": "200"})
        assert "--strict-json-numbers" in usage.output, command
    server = ServerProcess.on_free_ports(
        ["graph", "--model-base-path", str(mlp_export.model_dir), "--strict-json-numbers"],
        "mlp",
        log_path=tmp_path / "server.log",
    )
    with server:
        assert server.rest_address is not None
        connection = HttpConnection(server.rest_address)
        try:
            rows = {"instances": [[1e39] + [0.0] * 783]}
            reply = connection.request(
                "POST", "/v1/models/mlp:predict", json.dumps(rows).encode(), {}
            )
            assert reply.status == 400
            assert reply.json()["error"] == (
                "input 'images': values out of range for float32 [-3.4028234663852886e+38, "
                "3.4028234663852886e+38] (--strict-json-numbers; TF Serving reads such a number "
                "as ±inf)"
            )
            rows = {"instances": [[0.5] * 784]}
            reply = connection.request(
                "POST", "/v1/models/mlp:predict", json.dumps(rows).encode(), {}
            )
            assert reply.status == 200 and len(reply.json()["predictions"][0]) == 10
        finally:
            connection.close()
        argv = ["conformance", server.grpc_address, "--rest", server.rest_address, "--model",
                "mlp", "--output", "json"]  # fmt: skip
        result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["server"] == "graphserve (graph)"
    deviated = [(r["test"], r["reason"]) for r in report["results"] if r["outcome"] == "deviates"]
    assert [test for test, _ in deviated] == ["FloatTensorThatExceedsMaxReturnsInf"]
    assert "--strict-json-numbers" in deviated[0][1]
    assert (report["counts"]["fail"], report["counts"]["deviates"]) == (0, 1)
