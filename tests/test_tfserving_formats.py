"""TF Serving's documented request/response formats against a model laid out as TF Serving's own
`half_plus_two` (a TF1 SavedModel with predict, classify and regress signatures), and models
other tools write (Keras `model.export()`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from graphserve.core import client
from graphserve.core.client import GrpcClient, RestClient
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from tests.savedmodels import write_half_plus_two


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelServer]:
    base = tmp_path_factory.mktemp("hp2") / "half_plus_two"
    write_half_plus_two(base / "123")
    registry = ModelRegistry()
    registry.load_graph("half_plus_two", base)
    with ModelServer(registry, ServerOptions("127.0.0.1", 0, 0)) as running:
        yield running


def _post(server: ModelServer, path: str, body: Any) -> tuple[int, Any]:
    with RestClient(f"127.0.0.1:{server.rest_port}") as rest:
        reply = rest.post(path, body)
    return reply.status, reply.json()


# The documented examples of TF Serving's api_rest.md, with their documented answers.
@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        (":predict", {"instances": [1.0, 2.0, 5.0]}, {"predictions": [2.5, 3.0, 4.5]}),
        (":predict", {"inputs": [1.0, 2.0, 5.0]}, {"outputs": [2.5, 3.0, 4.5]}),
        (":predict", {"instances": [{"x": 1.0}, {"x": 3.0}]}, {"predictions": [2.5, 3.5]}),
        (
            ":regress",
            {"signature_name": "regress_x_to_y", "examples": [{"x": 1.0}, {"x": 2.0}]},
            {"results": [2.5, 3.0]},
        ),
        (
            ":classify",
            {"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}, {"x": -2.0}]},
            {"results": [[["", 2.5]], [["", 1.0]]]},
        ),
        (
            ":regress",
            {"signature_name": "regress_x_to_y", "context": {"x": 4.0}, "examples": [{}]},
            {"results": [4.0]},
        ),
    ],
)
def test_rest_formats(server: ModelServer, path: str, body: Any, expected: Any) -> None:
    status, got = _post(server, f"/v1/models/half_plus_two{path}", body)
    assert status == 200, got
    assert got == expected


def test_rest_versions_and_metadata_of_a_tf1_model(server: ModelServer) -> None:
    status, got = _post(server, "/v1/models/half_plus_two/versions/123:predict", {"inputs": [0]})
    assert status == 200 and got == {"outputs": [2.0]}
    with RestClient(f"127.0.0.1:{server.rest_port}") as rest:
        reply = rest.metadata("half_plus_two")
    assert reply.status == 200
    metadata = reply.json()
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    assert signatures["classify_x_to_y"]["method_name"] == "tensorflow/serving/classify"
    assert signatures["regress_x_to_y"]["method_name"] == "tensorflow/serving/regress"
    assert metadata["model_spec"]["version"] == "123"


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        # TF Serving checks the method name only when asked (tests/test_conformance.py); it
        # needs the signature's input keyed "inputs" and, to regress, its output "outputs".
        (":classify", {"examples": [{"x": 1.0}]}, 400, "No classification inputs found"),
        (
            ":regress",
            {"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}]},
            400,
            "No regression outputs found in SignatureDef",
        ),
        (":regress", {"signature_name": "regress_x_to_y", "examples": []}, 400, "non-empty"),
        (
            ":regress",
            {"signature_name": "regress_x_to_y", "examples": [{"x": [True]}]},
            400,
            "feature examples[0].x",
        ),
    ],
)
def test_rest_classify_regress_errors(
    server: ModelServer, path: str, body: Any, status: int, message: str
) -> None:
    got_status, got = _post(server, f"/v1/models/half_plus_two{path}", body)
    assert got_status == status and message in got["error"]


def test_grpc_predict_classify_regress(server: ModelServer) -> None:
    grpc_client = GrpcClient.connect(f"127.0.0.1:{server.grpc_port}")
    predict = client.predict_request("half_plus_two", {"x": np.array([1.0, 6.0], np.float32)})
    response = grpc_client.predict(predict)
    np.testing.assert_allclose(client.predict_outputs(response)["y"], [2.5, 5.0])

    examples = [client.example(x=1.0), client.example(x=2.0)]
    regress = client.regress_request("half_plus_two", examples, signature_name="regress_x_to_y")
    result = grpc_client.regress(regress)
    assert [r.value for r in result.result.regressions] == [2.5, 3.0]
    assert result.model_spec.signature_name == "regress_x_to_y"

    classify = client.classify_request(
        "half_plus_two",
        [client.example(x=10.0), client.example()],  # the second takes x from the context
        signature_name="classify_x_to_y",
        context=client.example(x=4.0),
    )
    result = grpc_client.classify(classify)
    scores = [[c.score for c in row.classes] for row in result.result.classifications]
    assert scores == [[7.0], [4.0]]

    classify.model_spec.signature_name = "serving_default"
    with pytest.raises(grpc.RpcError) as err:
        grpc_client.classify(classify)
    grpc_client.close()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # as TF Serving's classifier
    assert "No classification inputs found in SignatureDef" in err.value.details()


def test_keras_export_is_served(tmp_path: Path) -> None:
    from graphserve.model.examples import mlp

    model = mlp.build()
    model.export(str(tmp_path / "keras_mlp" / "1"), verbose=False)
    registry = ModelRegistry()
    registry.load_graph("keras_mlp", tmp_path / "keras_mlp")
    signature = registry.get("keras_mlp").runner.signatures["serving_default"]
    (input_name,) = signature.inputs
    (output_name,) = signature.outputs
    x = np.random.default_rng(4).standard_normal((2, 784)).astype(np.float32)
    with ModelServer(registry, ServerOptions("127.0.0.1", 0, 0)) as server:
        status, got = _post(server, "/v1/models/keras_mlp:predict", {"instances": x.tolist()})
    assert status == 200
    np.testing.assert_allclose(got["predictions"], model(x).numpy(), atol=1e-5)
    assert output_name == "output_0" and input_name
