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
    (tmp_path / "models.config").write_text(
        f'model_config_list {{ config {{ name: "mlp" base_path: "{mlp_export.model_dir}" }} }}'
    )
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
