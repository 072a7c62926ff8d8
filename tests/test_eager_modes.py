"""The eager server's calling approaches: model(x), model.predict(x), tf.function unsigned."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
from google.protobuf import wrappers_pb2
from prometheus_client.parser import text_string_to_metric_families

from graphserve.core import client
from graphserve.core.client import GrpcClient, RestClient
from graphserve.exporter import parse_input_spec
from graphserve.model.examples import mlp
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.registry import ModelLoadError

MODES = {"call": "eager", "predict": "eager-predict", "function": "eager-function"}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, ModelServer]]:
    running = {}
    for mode in MODES:
        registry = ModelRegistry()
        registry.load_eager("mlp", "examples:mlp", mode=mode)
        options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0, metrics_path="/m")
        running[mode] = ModelServer(registry, options).start()
    yield running
    for server in running.values():
        server.stop(grace=1.0)


def _predict(server: ModelServer, x: np.ndarray) -> np.ndarray:
    with GrpcClient.connect(f"127.0.0.1:{server.grpc_port}", timeout=60) as grpc_client:
        response = grpc_client.predict(client.predict_request("mlp", {"images": x}))
    return client.predict_outputs(response)["logits"]


def test_every_mode_gives_the_models_answer(servers: dict[str, ModelServer]) -> None:
    x = np.random.default_rng(2).standard_normal((3, 784)).astype(np.float32)
    expected = mlp.build()(x).numpy()
    for mode, server in servers.items():
        np.testing.assert_allclose(_predict(server, x), expected, atol=1e-5, err_msg=mode)


def test_metadata_says_how_the_model_runs(servers: dict[str, ModelServer]) -> None:
    for mode, server in servers.items():
        request = client.metadata_request("mlp", fields=("signature_def", "runner"))
        with GrpcClient.connect(f"127.0.0.1:{server.grpc_port}") as grpc_client:
            response = grpc_client.metadata(request)
        runner = wrappers_pb2.StringValue()
        response.metadata["runner"].Unpack(runner)
        assert runner.value == MODES[mode]
        with RestClient(f"127.0.0.1:{server.rest_port}") as rest:
            reply = rest.metadata("mlp")
        assert reply.status == 200
        assert reply.headers["x-graphserve-runner"] == MODES[mode]
        assert set(reply.json()["metadata"]) == {"signature_def"}


def test_function_mode_retraces_on_new_batch_sizes(servers: dict[str, ModelServer]) -> None:
    server = servers["function"]
    for batch in (4, 5, 6):
        _predict(server, np.zeros((batch, 784), np.float32))
    url = f"http://127.0.0.1:{server.rest_port}/m"
    with urllib.request.urlopen(url, timeout=30) as r:
        families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
    (sample,) = families["graphserve_function_traces"].samples
    assert sample.labels["signature"] == "serving_default"
    assert sample.value >= 4  # the start-up probe, then one trace per new batch size
    runtime = families["graphserve_runtime_latency_seconds"].samples
    assert {s.labels["runner"] for s in runtime} == {"eager-function"}


def test_predict_mode_needs_a_keras_model() -> None:
    with pytest.raises(ModelLoadError, match=r"model\.predict needs a Keras model"):
        ModelRegistry().load_eager(
            "affine",
            "tests.factories:affine",
            mode="predict",
            inputs=[parse_input_spec("x:float32:-1,3")],
        )
