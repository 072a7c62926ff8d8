"""Both servers, on loopback, through the official TF Serving stubs (requests built by our
client, sent by the stubs: the wire-compatibility witness) and plain HTTP."""

from __future__ import annotations

import re
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from graphserve.core import client
from graphserve.core.codec import array_from_proto
from graphserve.model.examples import mlp

ARMS = ["graph", "eager"]
GRPC_ARMS = [*ARMS, "graph_asyncio"]  # the graph model on the asyncio gRPC front end too
X = np.random.default_rng(11).standard_normal((3, 784)).astype(np.float32)


@pytest.fixture(scope="module")
def in_process() -> np.ndarray:
    """The model called in-process: what both servers must answer."""
    return mlp.build()(X).numpy()


def _grpc(servers: Any, arm: str) -> grpc.Channel:
    return grpc.insecure_channel(getattr(servers, f"{arm}_grpc"))


def _predict_request(x: np.ndarray, name: str = "mlp", **spec: Any) -> predict_pb2.PredictRequest:
    return client.predict_request(name, {"images": x}, **spec)


def _http(servers: Any, arm: str, path: str, body: Any = None) -> tuple[int, Any]:
    with client.RestClient(getattr(servers, f"{arm}_rest")) as rest:
        reply = rest.get(path) if body is None else rest.post(path, body)
    return reply.status, reply.json()


@pytest.mark.parametrize("arm", GRPC_ARMS)
def test_grpc_predict_matches_the_model_in_process(mlp_servers, in_process, arm: str) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(_grpc(mlp_servers, arm))
    response = stub.Predict(_predict_request(X), timeout=30)
    np.testing.assert_allclose(array_from_proto(response.outputs["logits"]), in_process, atol=1e-5)
    assert response.model_spec.name == "mlp"
    assert response.model_spec.version.value == 1
    assert response.model_spec.signature_name == "serving_default"


@pytest.mark.parametrize("arm", GRPC_ARMS)
def test_grpc_typed_float_val_requests_are_accepted(mlp_servers, in_process, arm: str) -> None:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "mlp"
    tensor = request.inputs["images"]
    tensor.dtype = 1  # DT_FLOAT
    tensor.tensor_shape.dim.add(size=1)
    tensor.tensor_shape.dim.add(size=784)
    tensor.float_val.extend(X[0].tolist())
    stub = prediction_service_pb2_grpc.PredictionServiceStub(_grpc(mlp_servers, arm))
    out = array_from_proto(stub.Predict(request, timeout=30).outputs["logits"])
    np.testing.assert_allclose(out, in_process[:1], atol=1e-5)


def test_graph_and_eager_servers_agree(mlp_servers) -> None:
    answers = []
    for arm in ARMS:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(_grpc(mlp_servers, arm))
        answers.append(
            array_from_proto(stub.Predict(_predict_request(X), timeout=30).outputs["logits"])
        )
    np.testing.assert_allclose(answers[0], answers[1], atol=1e-5)


@pytest.mark.parametrize("arm", GRPC_ARMS)
def test_grpc_metadata_and_status(mlp_servers, arm: str) -> None:
    channel = _grpc(mlp_servers, arm)
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "mlp"
    response = prediction_service_pb2_grpc.PredictionServiceStub(channel).GetModelMetadata(request)
    sigmap = get_model_metadata_pb2.SignatureDefMap()
    response.metadata["signature_def"].Unpack(sigmap)
    sig = sigmap.signature_def["serving_default"]
    assert sig.method_name == "tensorflow/serving/predict"
    assert [d.size for d in sig.inputs["images"].tensor_shape.dim] == [-1, 784]
    assert [d.size for d in sig.outputs["logits"].tensor_shape.dim] == [-1, 10]

    status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "mlp"})
    )
    (version,) = status.model_version_status
    assert version.version == 1
    assert version.state == get_model_status_pb2.ModelVersionStatus.AVAILABLE

    health = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service="tensorflow.serving.PredictionService")
    )
    assert health.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("arm", GRPC_ARMS)
@pytest.mark.parametrize(
    ("change", "code", "message"),
    [
        (
            {"x": X.astype(np.float64)},
            grpc.StatusCode.INVALID_ARGUMENT,
            r"input 'images' expects float32 of shape \[-1, 784\], got float64 of shape \[3, 784\]",
        ),
        (
            {"x": X[:, :5]},
            grpc.StatusCode.INVALID_ARGUMENT,
            # the graph's (or Keras') own error, then what the signature declares
            r"\(input 'images' is declared float32 of shape \[-1, 784\], got shape \[3, 5\]\)$",
        ),
        (
            {"rename": "pixels"},
            grpc.StatusCode.INVALID_ARGUMENT,
            r"unknown input 'pixels': this signature takes 'images'",
        ),
        ({"name": "nope"}, grpc.StatusCode.NOT_FOUND, r"Servable not found .*nope"),
        ({"version": 7}, grpc.StatusCode.NOT_FOUND, r"Specific\(mlp, 7\)"),
        (
            {"signature_name": "other"},
            grpc.StatusCode.FAILED_PRECONDITION,
            r'Serving signature key "other" not found',
        ),
    ],
)
def test_grpc_bad_requests_get_the_right_status_and_server_keeps_serving(
    mlp_servers, in_process, arm: str, change: dict, code: grpc.StatusCode, message: str
) -> None:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(_grpc(mlp_servers, arm))
    spec = {k: v for k, v in change.items() if k in ("name", "version", "signature_name")}
    request = _predict_request(change.get("x", X), **spec)
    if "rename" in change:
        request.inputs[change["rename"]].CopyFrom(request.inputs.pop("images"))
    with pytest.raises(grpc.RpcError) as info:
        stub.Predict(request, timeout=30)
    assert info.value.code() == code
    assert re.search(message, info.value.details())
    good = stub.Predict(_predict_request(X), timeout=30)
    np.testing.assert_allclose(array_from_proto(good.outputs["logits"]), in_process, atol=1e-5)


@pytest.mark.parametrize("arm", ARMS)
def test_rest_row_and_columnar_predict(mlp_servers, in_process, arm: str) -> None:
    status, body = _http(mlp_servers, arm, "/v1/models/mlp:predict", {"instances": X.tolist()})
    assert status == 200
    np.testing.assert_allclose(np.array(body["predictions"]), in_process, atol=1e-5)
    status, body = _http(
        mlp_servers, arm, "/v1/models/mlp/versions/1:predict", {"inputs": {"images": X.tolist()}}
    )
    assert status == 200
    np.testing.assert_allclose(np.array(body["outputs"]), in_process, atol=1e-5)


@pytest.mark.parametrize("arm", ARMS)
def test_rest_status_and_metadata_shaped_as_tf_serving(mlp_servers, arm: str) -> None:
    status, body = _http(mlp_servers, arm, "/v1/models/mlp")
    assert status == 200
    assert body == {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    status, body = _http(mlp_servers, arm, "/v1/models/mlp/metadata")
    assert status == 200
    assert body["model_spec"] == {"name": "mlp", "signature_name": "", "version": "1"}
    sig = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert sig["inputs"]["images"]["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in sig["inputs"]["images"]["tensor_shape"]["dim"]] == ["-1", "784"]


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize(
    ("method_path", "body", "status", "message"),
    [
        (
            "/v1/models/mlp:predict",
            {"instances": [[1.0, 2.0]]},
            400,
            "(input 'images' is declared float32 of shape [-1, 784], got shape [1, 2])",
        ),
        (
            "/v1/models/mlp:predict",
            {"instances": [{"pixels": [1.0]}]},
            400,
            "unknown input 'pixels': this signature takes 'images'",
        ),
        ("/v1/models/mlp:predict", b"{not json", 400, "request body is not valid JSON"),
        ("/v1/models/mlp:predict", {"instances": [[1.0], [1.0, 2.0]]}, 400, "is ragged"),
        ("/v1/models/nope:predict", {"instances": [[1.0]]}, 404, "Servable not found"),
        ("/v1/models/mlp/versions/9:predict", {"instances": [[1.0]]}, 404, "Specific(mlp, 9)"),
        ("/v1/models/nope", None, 404, "Could not find any versions of model nope"),
        ("/v1/models/mlp/versions/x:predict", {"instances": [[1.0]]}, 400, "Malformed request"),
        (
            "/v1/models/mlp:predict",
            {"signature_name": "zz", "instances": [[1.0]]},
            400,
            'Serving signature key "zz" not found',
        ),
    ],
)
def test_rest_errors_are_json_with_tf_serving_status(
    mlp_servers, in_process, arm: str, method_path: str, body: Any, status: int, message: str
) -> None:
    got_status, got = _http(mlp_servers, arm, method_path, body)
    assert got_status == status
    assert message in got["error"]
    ok_status, ok = _http(mlp_servers, arm, "/v1/models/mlp:predict", {"instances": X.tolist()})
    assert ok_status == 200
    np.testing.assert_allclose(np.array(ok["predictions"]), in_process, atol=1e-5)
