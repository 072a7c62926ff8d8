"""Prometheus metrics scraped from a real server and parsed with prometheus_client's parser."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core.codec import array_to_proto
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.metrics import MonitoringConfigError, load_monitoring_config


@pytest.fixture(scope="module")
def server(mlp_export) -> Iterator[ModelServer]:
    registry = ModelRegistry()
    registry.load_graph("mlp", mlp_export.model_dir)
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0, metrics_path="/m")
    with ModelServer(registry, options) as running:
        yield running


def _scrape(server: ModelServer, path: str = "/m") -> dict[str, list]:
    url = f"http://127.0.0.1:{server.rest_port}{path}"
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _value(samples: list, name: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())


def test_requests_are_counted_and_timed_by_labels(server: ModelServer) -> None:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "mlp"
    request.inputs["images"].CopyFrom(array_to_proto(np.zeros((2, 784), np.float32)))
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        for _ in range(3):
            stub.Predict(request, timeout=30)
        bad = predict_pb2.PredictRequest()
        bad.CopyFrom(request)
        bad.inputs["images"].CopyFrom(array_to_proto(np.zeros((2, 5), np.float32)))
        with pytest.raises(grpc.RpcError):
            stub.Predict(bad, timeout=30)
    body = json.dumps({"instances": np.zeros((1, 784)).tolist()}).encode()
    url = f"http://127.0.0.1:{server.rest_port}/v1/models/mlp:predict"
    urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=30).read()

    metrics = _scrape(server)
    labels = {"model": "mlp", "version": "1", "signature": "serving_default", "runner": "graph"}
    requests = metrics["graphserve_requests"]
    assert (
        _value(requests, "graphserve_requests_total", protocol="grpc", status="OK", **labels) == 3
    )
    assert _value(requests, "graphserve_requests_total", status="INVALID_ARGUMENT", **labels) == 1
    assert _value(requests, "graphserve_requests_total", protocol="rest", status="OK") == 1
    latency = metrics["graphserve_request_latency_seconds"]
    assert _value(latency, "graphserve_request_latency_seconds_count", protocol="grpc") == 3
    assert _value(latency, "graphserve_request_latency_seconds_sum", protocol="grpc") > 0
    runtime = metrics["graphserve_runtime_latency_seconds"]
    assert _value(runtime, "graphserve_runtime_latency_seconds_count", **labels) == 4
    states = metrics["graphserve_model_version_state"]
    assert _value(states, "graphserve_model_version_state", state="AVAILABLE", model="mlp") == 1


def test_unknown_models_are_counted_and_metrics_are_off_by_default(
    server: ModelServer, mlp_servers
) -> None:
    url = f"http://127.0.0.1:{server.rest_port}/v1/models/nope:predict"
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(url, data=b"{}"), timeout=30)
    assert err.value.code == 404
    requests = _scrape(server)["graphserve_requests"]
    # Counted under one label value for every unknown name: clients cannot add series.
    unknown = {"model": "(unknown)", "status": "NOT_FOUND"}
    assert _value(requests, "graphserve_requests_total", **unknown) == 1
    assert _value(requests, "graphserve_requests_total", model="nope") == 0
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://{mlp_servers.graph_rest}/monitoring/prometheus/metrics")
    assert err.value.code in (400, 404)


def test_monitoring_config_file(tmp_path: Path) -> None:
    path = tmp_path / "monitoring.config"
    path.write_text('prometheus_config { enable: true, path: "/metrics" }\n')
    assert load_monitoring_config(path) == "/metrics"
    path.write_text("prometheus_config { enable: false }\n")
    assert load_monitoring_config(path) is None
    path.write_text("prometheus_config { enabled: true }\n")
    with pytest.raises(MonitoringConfigError, match='no field named "enabled"'):
        load_monitoring_config(path)
    result = CliRunner().invoke(
        app,
        [
            "serve",
            "eager",
            "examples:mlp",
            "--model-name",
            "m",
            "--monitoring-config-file",
            str(path),
        ],
    )
    assert result.exit_code == 2 and "enabled" in result.stderr


def test_a_batched_version_counts_the_batches_it_forms(mlp_export) -> None:
    """requests / batches is the batch size the batcher formed (what `make bench-peers` reads
    off the graph server): 8 concurrent one-row requests, batches of up to 8 closing after 2 s,
    run as one or two batches, and every row is counted."""
    from concurrent.futures import ThreadPoolExecutor

    from graphserve.core.batchingparams import BatchingParameters
    from graphserve.serving.build import ServeConfig, build_server
    from graphserve.serving.config import ModelConfig

    batching = BatchingParameters(max_batch_size=8, batch_timeout_micros=2_000_000)
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0, metrics_path="/m")
    base = mlp_export.model_dir
    config = ServeConfig(models=[ModelConfig("mlp", base)], options=options, batching=batching)
    body = json.dumps({"instances": np.zeros((1, 784)).tolist()}).encode()
    with build_server(config) as running:
        url = f"http://127.0.0.1:{running.rest_port}/v1/models/mlp:predict"

        def predict(_: int) -> int:
            request = urllib.request.Request(url, data=body)
            with urllib.request.urlopen(request, timeout=30) as reply:
                return int(reply.status)

        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(predict, range(8))) == [200] * 8
        metrics = _scrape(running)
    labels = {"model": "mlp", "version": "1"}
    assert _value(metrics["graphserve_batched_requests"], "graphserve_batched_requests_total",
                  **labels) == 8  # fmt: skip
    assert _value(metrics["graphserve_batched_rows"], "graphserve_batched_rows_total",
                  **labels) == 8  # fmt: skip
    batches = _value(metrics["graphserve_batches"], "graphserve_batches_total", **labels)
    assert 1 <= batches <= 2, batches
    assert _value(metrics["graphserve_batch_padding_rows"],
                  "graphserve_batch_padding_rows_total", **labels) == 0  # fmt: skip
