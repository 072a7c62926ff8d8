"""TensorFlow Serving's own test cases, run against our servers.

Each case below is a request and the answer TF Serving's own tests expect for it, taken from the
test file named in its `source` (read in tensorflow/serving; no code or test data of theirs is
copied: the models are rebuilt here the way its generators build them). Every case runs against
each server it applies to, over the protocol it uses:

    tf1     the graph server on a TF1 SavedModel built as TF Serving's half_plus_two generator
            builds it (SavedModelBuilder, reference variables, tf.Example parsing, an asset and
            its init op), in a zero-padded version directory `00000123`
    tf2     the graph server on half_plus_two written with tf.saved_model.save, as the
            generator's TF2 mode writes it (every signature's method is predict)
    eager   the eager server on the same model as Python code (tests/half_plus_two.py)

Cases that cannot be expressed against a server over the network are listed in
`NOT_EXPRESSIBLE` with the reason; the README's conformance table is checked against both lists.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import predict_pb2

from graphserve.core import client
from graphserve.core.codec import decode_json_request, encode_json_response, signature_name_of
from graphserve.core.errors import InvalidInput
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.config import ModelConfig, VersionPolicy
from graphserve.serving.manager import ModelManager
from tests.tf1_models import write_tf1_half_plus_two

ITEST = "model_servers/tensorflow_model_server_test.py"
HANDLER = "model_servers/http_rest_api_handler_test.cc"
JSON = "util/json_tensor_test.cc"
PREDICT = "servables/tensorflow/predict_util_test.cc"
CLASSIFY = "servables/tensorflow/classifier_test.cc"
REGRESS = "servables/tensorflow/regressor_test.cc"
MULTI = "servables/tensorflow/multi_inference_test.cc"
STATUS = "model_servers/get_model_status_impl_test.cc"
STORAGE = "sources/storage_path/file_system_storage_path_source_test.cc"

ALL = ("tf1", "tf2", "eager")
GRAPH = ("tf1", "tf2")
TWO = "two"  # half_plus_two in versions 123 and 124, labelled stable and canary
UINT64_MAX = "18446744073709551615"


# -- the models -------------------------------------------------------------------------------


class _HalfPlusTwoTf2(tf.Module):
    """half_plus_two as TF Serving's generator writes it in TF2 mode: tf.saved_model.save, x of
    shape [1], regress and classify over serialized tf.Examples."""

    def __init__(self) -> None:
        super().__init__()
        self.a = tf.Variable(0.5, name="a")
        self.b = tf.Variable(2.0, name="b")

    def _x(self, serialized: tf.Tensor) -> tf.Tensor:
        return tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([1], tf.float32)})["x"]

    @tf.function(input_signature=[tf.TensorSpec([1], tf.float32)])
    def predict(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": self.a * x + self.b}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def regress(self, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"outputs": self.a * self._x(serialized) + self.b}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def classify(self, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"scores": self.a * self._x(serialized) + self.b}


def _write_tf2(path: Path) -> Path:
    model = _HalfPlusTwoTf2()
    signatures = {
        "serving_default": model.predict,
        "regress_x_to_y": model.regress,
        "classify_x_to_y": model.classify,
    }
    tf.saved_model.save(model, str(path), signatures=signatures)
    return path


@dataclass(frozen=True)
class Arm:
    grpc: grpc.Channel
    rest: str  # host:port


@pytest.fixture(scope="module")
def arms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Arm]]:
    base = tmp_path_factory.mktemp("conformance")
    write_tf1_half_plus_two(base / "tf1" / "00000123")
    _write_tf2(base / "tf2" / "00000123")
    for version in ("00000123", "00000124"):
        shutil.copytree(base / "tf1" / "00000123", base / TWO / version)
    labels = {"stable": 123, "canary": 124}
    registries = {name: ModelRegistry() for name in ALL}
    for arm in GRAPH:
        models = [
            ModelConfig("default", base / arm),
            ModelConfig(TWO, base / TWO, VersionPolicy(kind="all"), labels),
        ]
        ModelManager(registries[arm], models).start()
    eager = registries["eager"]
    eager.load_eager("default", "tests.half_plus_two:build", version=123)
    for version in (123, 124):
        eager.load_eager(TWO, "tests.half_plus_two:build", version=version)
    eager.set_labels(TWO, labels)
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    servers = {name: ModelServer(registry, options) for name, registry in registries.items()}
    for server in servers.values():
        server.start()
    try:
        yield {
            name: Arm(
                grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}"),
                f"127.0.0.1:{server.rest_port}",
            )
            for name, server in servers.items()
        }
    finally:
        for server in servers.values():
            server.stop()


# -- REST cases -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rest:
    source: str
    test: str
    method: str
    path: str
    body: Any  # a JSON value, or bytes sent as they are
    status: int
    expect: Any = None  # the whole JSON body, compared as JSON values
    error: str | None = None  # a substring of {"error": ...}, as TF Serving's tests match it
    arms: tuple[str, ...] = ALL

    @property
    def id(self) -> str:
        return f"{self.test}:{self.method} {self.path}"


def _malformed(method: str, path: str) -> Rest:
    return Rest(HANDLER, "UnsupportedApiCalls", method, path, None, 400, error="Malformed request")


_MALFORMED = [
    ("GET", "/v1/foo"),
    ("POST", "/v1/foo"),
    ("GET", "/v1/models/debug/model_name"),
    ("POST", "/v1/models"),
    ("GET", "/v1/models/foo:predict"),
    ("GET", "/v1/models/foo/version/50:predict"),
    ("POST", "/v1/models/foo/version/50:regress"),
    ("POST", "/v1/models/foo/versions/HELLO:regress"),
    ("POST", "/v1/models/foo/metadata"),
    ("POST", "/v1/models/foo/label/some_label:regress"),
    ("POST", "/v1/models/foo/versions/50/labels/some_label:regress"),
    ("POST", "/v1/models/foo/versions/some_label:regress"),
]

REST_CASES = [
    # tensorflow_model_server_test.py: the integration test's REST calls and bodies
    Rest(ITEST, "testPredictREST", "POST", "/v1/models/default:predict",
         {"instances": [2.0, 3.0, 4.0]}, 200, {"predictions": [3.0, 3.5, 4.0]}),
    Rest(ITEST, "testPredictColumnarREST", "POST", "/v1/models/default:predict",
         {"inputs": [2.0, 3.0, 4.0]}, 200, {"outputs": [3.0, 3.5, 4.0]}),
    Rest(ITEST, "testClassifyREST", "POST", "/v1/models/default:classify",
         {"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]}, 200,
         {"results": [[["", 3.0]]]}),
    Rest(ITEST, "testRegressREST", "POST", "/v1/models/default:regress",
         {"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]}, 200,
         {"results": [3.0]}),
    Rest(ITEST, "testGetStatusREST", "GET", "/v1/models/default", None, 200,
         {"model_version_status": [{"version": "123", "state": "AVAILABLE",
                                    "status": {"error_code": "OK", "error_message": ""}}]}),
    # http_rest_api_handler_test.cc: routing, errors, and its bodies (model: two versions)
    *(_malformed(method, path) for method, path in _MALFORMED),
    Rest(HANDLER, "UnsupportedApiCalls", "GET", "/v1/models", None, 400,
         error="Missing model name"),
    Rest(HANDLER, "UnsupportedApiCalls", "POST", f"/v1/models/foo/versions/{UINT64_MAX}:regress",
         None, 400, error="Failed to convert version"),
    Rest(HANDLER, "PredictModelNameVersionErrors", "POST", "/v1/models/foo:predict",
         {"instances": [1]}, 404),
    Rest(HANDLER, "PredictModelNameVersionErrors", "POST", "/v1/models/foo/versions/50:predict",
         {"instances": [1]}, 404),
    Rest(HANDLER, "PredictModelNameVersionErrors", "POST", f"/v1/models/{TWO}99:predict",
         {"instances": [1]}, 404),
    Rest(HANDLER, "PredictRequestErrors", "POST", f"/v1/models/{TWO}:predict", b"", 400,
         error="JSON Parse error: The document is empty"),
    Rest(HANDLER, "PredictRequestErrors", "POST", f"/v1/models/{TWO}:predict",
         b"instances = [1, 2]", 400, error="JSON Parse error: Invalid value"),
    Rest(HANDLER, "PredictRequestErrors", "POST", f"/v1/models/{TWO}:predict",
         {"instances": ["x", "y"]}, 400, error="not of expected type: float"),
    Rest(HANDLER, "PredictRequestErrors", "POST", f"/v1/models/{TWO}/labels/nope:predict",
         {"instances": ["x", "y"]}, 400, error="Unrecognized servable version label"),
    Rest(HANDLER, "PredictRequestErrors", "POST", f"/v1/models/{TWO}:predict",
         {"signature_name": 100}, 400, error="'signature_name' key must be a string value."),
    Rest(HANDLER, "Predict", "POST", f"/v1/models/{TWO}:predict",
         {"instances": [[1.0, 2.0], [3.0, 4.0]]}, 200, {"predictions": [[2.5, 3.0], [3.5, 4.0]]}),
    Rest(HANDLER, "Predict", "POST", f"/v1/models/{TWO}/versions/123:predict",
         {"instances": [1.0, 2.0]}, 200, {"predictions": [2.5, 3.0]}),
    Rest(HANDLER, "Predict", "POST", f"/v1/models/{TWO}/labels/stable:predict",
         {"instances": [1.0, 2.0]}, 200, {"predictions": [2.5, 3.0]}),
    Rest(HANDLER, "Predict", "POST", f"/v1/models/{TWO}/versions/124:predict",
         {"signature_name": "serving_default", "instances": [3.0, 4.0]}, 200,
         {"predictions": [3.5, 4.0]}),
    Rest(HANDLER, "Predict", "POST", f"/v1/models/{TWO}/versions/124:predict",
         {"signature_name": "serving_default", "inputs": [3.0, 4.0]}, 200,
         {"outputs": [3.5, 4.0]}),
    Rest(HANDLER, "Regress", "POST", f"/v1/models/{TWO}:regress",
         {"signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]}, 200, {"results": [42]}),
    Rest(HANDLER, "Regress", "POST", f"/v1/models/{TWO}/versions/123:regress",
         {"signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]}, 200, {"results": [42]}),
    Rest(HANDLER, "Regress", "POST", f"/v1/models/{TWO}/labels/canary:regress",
         {"signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]}, 200, {"results": [42]}),
    Rest(HANDLER, "Classify", "POST", f"/v1/models/{TWO}:classify",
         {"signature_name": "classify_x_to_y", "examples": [{"x": 20.0}]}, 200,
         {"results": [[["", 12]]]}),
    Rest(HANDLER, "Classify", "POST", f"/v1/models/{TWO}/labels/stable:classify",
         {"signature_name": "classify_x_to_y", "examples": [{"x": 10.0}]}, 200,
         {"results": [[["", 7]]]}),
    *(
        Rest(HANDLER, "GetStatus", "GET", f"/v1/models/{TWO}{where}", None, 200,
             {"model_version_status": [{"version": version, "state": "AVAILABLE",
                                        "status": {"error_code": "OK", "error_message": ""}}]})
        for where, version in (("/versions/123", "123"), ("/labels/canary", "124"))
    ),
]  # fmt: skip


def _call_rest(address: str, method: str, path: str, body: Any) -> tuple[int, str, Any]:
    """(status, Content-Type, parsed body) of one request on a fresh connection, sent with no
    headers of ours."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    connection = client.HttpConnection(address)
    try:
        reply = connection.request(method, path, data, {})
    finally:
        connection.close()
    return reply.status, reply.headers.get("content-type", ""), reply.json()


@pytest.mark.parametrize("case", REST_CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("arm", ALL)
def test_rest(arms: dict[str, Arm], arm: str, case: Rest) -> None:
    if arm not in case.arms:
        pytest.skip(f"{case.test} does not apply to the {arm} server")
    status, content_type, body = _call_rest(arms[arm].rest, case.method, case.path, case.body)
    assert status == case.status, body
    assert content_type == "application/json"  # as TF Serving's handler test checks
    if case.expect is not None:
        assert body == case.expect
    if case.error is not None:
        assert case.error in body["error"]


def test_rest_model_status_lists_every_version(arms: dict[str, Arm]) -> None:
    """get_model_status_impl_test.cc AllVersionsSuccess, over REST: both versions, OK."""
    for arm in ALL:
        status, _, body = _call_rest(arms[arm].rest, "GET", f"/v1/models/{TWO}", None)
        assert status == 200
        versions = sorted(s["version"] for s in body["model_version_status"])
        assert versions == ["123", "124"]
        assert {s["status"]["error_code"] for s in body["model_version_status"]} == {"OK"}


def test_rest_metadata_has_tf_serving_shape(arms: dict[str, Arm]) -> None:
    """testGetModelMetadataREST: the body TF Serving's *_metadata.json files hold, key for key:
    model_spec, then metadata.signature_def.signature_def with dtypes as DT_* names, sizes as
    strings, `name` and `unknown_rank` in every shape and `defaults` in every signature."""
    status, _, body = _call_rest(arms["tf1"].rest, "GET", "/v1/models/default/metadata", None)
    assert status == 200
    assert body["model_spec"] == {"name": "default", "signature_name": "", "version": "123"}
    assert set(body["metadata"]) == {"signature_def"}
    signatures = body["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {
        "serving_default", "regress_x_to_y", "regress_x_to_y2", "regress_x2_to_y3",
        "classify_x_to_y",
    }  # fmt: skip
    regress = signatures["regress_x2_to_y3"]
    assert set(regress) == {"inputs", "outputs", "method_name", "defaults"}
    assert regress["method_name"] == "tensorflow/serving/regress"
    assert regress["inputs"]["inputs"] == {
        "dtype": "DT_FLOAT",
        "tensor_shape": {
            "dim": [{"size": "-1", "name": ""}, {"size": "1", "name": ""}],
            "unknown_rank": False,
        },
        "name": "x2:0",
    }
    assert regress["outputs"]["outputs"]["name"] == "y3:0"
    assert signatures["serving_default"]["outputs"]["y"]["name"] == "y:0"


# -- gRPC cases -------------------------------------------------------------------------------


def _x(*values: float, shape: tuple[int, ...] | None = None) -> Any:
    tensor = predict_pb2.PredictRequest().inputs["x"]
    tensor.dtype = types_pb2.DT_FLOAT
    tensor.float_val.extend(values)
    for size in shape or (len(values),):
        tensor.tensor_shape.dim.add().size = size
    return tensor


def _predict(model: str = "default", signature: str = "serving_default", **kw: Any) -> Any:
    return client.predict_request(
        model,
        kw.pop("inputs", {"x": _x(2.0)}),
        signature_name=signature,
        output_filter=kw.pop("output_filter", []),
    )


def _examples(*xs: float) -> list[Any]:
    return [client.example(x=x) for x in xs]


def _classify(signature: str = "classify_x_to_y", *xs: float) -> Any:
    return client.classify_request("default", _examples(*xs), signature_name=signature)


def _regress(signature: str = "regress_x_to_y", *xs: float) -> Any:
    return client.regress_request("default", _examples(*xs), signature_name=signature)


def _multi(tasks: list[tuple[str, str, str]], *xs: float) -> Any:
    return client.multi_inference_request(tasks, _examples(*xs))


REG, CLS = "tensorflow/serving/regress", "tensorflow/serving/classify"


@dataclass(frozen=True)
class Grpc:
    source: str
    test: str
    rpc: str  # the PredictionService / ModelService method
    request: Callable[[], Any]
    code: grpc.StatusCode = grpc.StatusCode.OK
    check: Callable[[Any], Any] | None = None  # asserts on the response
    error: str | None = None  # a substring of the status details
    arms: tuple[str, ...] = ALL

    @property
    def id(self) -> str:
        return f"{self.test}:{self.rpc}"


def _y(response: Any, expected: float, signature: str = "serving_default") -> None:
    """VerifyPredictRequest: y in typed float_val, and the model_spec echoed with version 123."""
    assert list(response.outputs) == ["y"]
    assert response.outputs["y"].dtype == types_pb2.DT_FLOAT
    assert list(response.outputs["y"].float_val) == [expected]
    assert response.model_spec.name == "default"
    assert response.model_spec.signature_name == signature
    assert response.model_spec.version.value == 123


def _score(response: Any, expected: float) -> None:
    (classification,) = response.result.classifications
    (label,) = classification.classes
    assert (label.label, label.score) == ("", expected)
    assert response.model_spec.version.value == 123


def _multi_result(response: Any) -> None:
    regression, classification = response.results
    assert [r.value for r in regression.regression_result.regressions] == [3.0]
    assert classification.classification_result.classifications[0].classes[0].score == 3.0
    assert [r.model_spec.signature_name for r in response.results] == [
        "regress_x_to_y",
        "classify_x_to_y",
    ]
    assert {r.model_spec.version.value for r in response.results} == {123}


def _status(request_spec: dict[str, Any]) -> Callable[[], Any]:
    def build() -> Any:
        name = request_spec.get("name", "")  # "" is what an unset name is on the wire
        return client.status_request(name, version=request_spec.get("version"))

    return build


def _metadata() -> Any:
    return client.metadata_request("default")


def _metadata_answer(response: Any) -> None:
    assert response.model_spec.name == "default"
    assert response.model_spec.version.value == 123
    assert list(response.metadata) == ["signature_def"]


INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
GOOD_TASKS = [("default", "regress_x_to_y", REG), ("default", "classify_x_to_y", CLS)]

GRPC_CASES = [
    # tensorflow_model_server_test.py
    Grpc(ITEST, "testPredictSavedModel", "Predict", lambda: _predict(output_filter=["y"]),
         check=lambda r: _y(r, 3.0)),
    Grpc(ITEST, "testClassify", "Classify", lambda: _classify("classify_x_to_y", 2.0),
         check=lambda r: _score(r, 3.0)),
    Grpc(ITEST, "testRegress", "Regress", lambda: _regress("regress_x_to_y", 2.0),
         check=lambda r: [v.value for v in r.result.regressions] == [3.0] or pytest.fail(r)),
    Grpc(ITEST, "testMultiInference", "MultiInference", lambda: _multi(GOOD_TASKS, 2.0),
         check=_multi_result),
    Grpc(ITEST, "testGetModelStatus", "GetModelStatus", _status({"name": "default"}),
         check=lambda r: [(s.version, s.status.error_code) for s in r.model_version_status]
         == [(123, 0)] or pytest.fail(r)),
    Grpc(ITEST, "testGetModelMetadata", "GetModelMetadata", _metadata, check=_metadata_answer),
    # predict_util_test.cc
    Grpc(PREDICT, "PredictionSuccess", "Predict", lambda: _predict(inputs={"x": _x(2.0)}),
         check=lambda r: _y(r, 3.0)),
    Grpc(PREDICT, "PredictionWithNamedRegressionSignature / shape [1, 1]", "Predict",
         lambda: _predict(inputs={"x": _x(2.0, shape=(1, 1))}),
         check=lambda r: list(r.outputs["y"].float_val) == [3.0] or pytest.fail(r)),
    Grpc(PREDICT, "PredictionInvalidTensor (extra and missing inputs)", "Predict",
         lambda: _predict(inputs={"unknown_key1": _x(1.0), "unknown_key2": _x(1.0)}),
         INVALID, error="Sent extra: {unknown_key1,unknown_key2}. Missing but required: {x}."),
    Grpc(PREDICT, "PredictionInvalidTensor (bool for float)", "Predict",
         lambda: _predict(inputs={"x": _bool_tensor()}),
         INVALID, error="Expects arg[0] to be float but bool is provided"),
    Grpc(PREDICT, "InputTensorsHaveWrongType", "Predict",
         lambda: _predict(inputs={"x": _string_tensor()}, output_filter=["y"]),
         INVALID, error="to be float but string is provided"),
    Grpc(PREDICT, "OutputFiltersDontMatchModelSpecOutputs", "Predict",
         lambda: _predict(output_filter=["output_filter"]), INVALID,
         error="output tensor alias not found in signature: output_filter"),
    Grpc(PREDICT, "OutputFiltersDontMatchModelSpecOutputs (duplicate)", "Predict",
         lambda: _predict(output_filter=["y", "y"]), INVALID,
         error="duplicate output tensor alias: y"),
    Grpc(PREDICT, "ModelMissingSignatures (unknown key)", "Predict",
         lambda: _predict(signature="nope"), grpc.StatusCode.FAILED_PRECONDITION,
         error='Serving signature key "nope" not found'),
    # classifier_test.cc, regressor_test.cc: an Input with no examples
    Grpc(CLASSIFY, "EmptyInput", "Classify", lambda: _classify("classify_x_to_y"), INVALID,
         error="Input is empty"),
    Grpc(REGRESS, "EmptyInput", "Regress", lambda: _regress("regress_x_to_y"), INVALID,
         error="Input is empty"),
    Grpc(CLASSIFY, "ClassificationSignature on a predict signature", "Classify",
         lambda: _classify("serving_default", 2.0), INVALID,
         error="No classification inputs found in SignatureDef"),
    # multi_inference_test.cc
    Grpc(MULTI, "MissingInputTest", "MultiInference", lambda: _multi(GOOD_TASKS[:1]), INVALID,
         error="Input is empty"),
    Grpc(MULTI, "UndefinedSignatureTest", "MultiInference",
         lambda: _multi([("default", "ThisSignatureDoesNotExist", REG)], 2.0), INVALID,
         error="signature not found"),
    Grpc(MULTI, "InconsistentModelSpecsInRequestTest", "MultiInference",
         lambda: _multi([GOOD_TASKS[0], ("ModelDoesNotExist", "regress_x_to_y", REG)], 2.0),
         INVALID, error="must access the same model name"),
    Grpc(MULTI, "EvaluateDuplicateSignaturesTest", "MultiInference",
         lambda: _multi([GOOD_TASKS[0], GOOD_TASKS[0]], 2.0), INVALID,
         error="Duplicate evaluation of signature: regress_x_to_y"),
    Grpc(MULTI, "UsupportedSignatureTypeTest", "MultiInference",
         lambda: _multi([("default", "serving_default", "tensorflow/serving/predict")], 2.0),
         grpc.StatusCode.UNIMPLEMENTED, error="Unsupported signature"),
    Grpc(MULTI, "ValidSingleSignatureTest", "MultiInference",
         lambda: _multi(GOOD_TASKS[:1], 2.0),
         check=lambda r: r.results[0].regression_result.regressions[0].value == 3.0
         or pytest.fail(r)),
    # get_model_status_impl_test.cc
    Grpc(STATUS, "InvalidModelNameFailure", "GetModelStatus", _status({"name": "nope"}),
         NOT_FOUND, error="Could not find any versions of model nope"),
    Grpc(STATUS, "InvalidModelVersionFailure", "GetModelStatus",
         _status({"name": "default", "version": 9}), NOT_FOUND,
         error="Could not find version 9 of model default"),
    Grpc(STATUS, "SingleVersionSuccess", "GetModelStatus", _status({"name": TWO, "version": 123}),
         check=lambda r: [s.version for s in r.model_version_status] == [123] or pytest.fail(r)),
    Grpc(STATUS, "AllVersionsSuccess", "GetModelStatus", _status({"name": TWO}),
         check=lambda r: sorted(s.version for s in r.model_version_status) == [123, 124]
         or pytest.fail(r)),
]  # fmt: skip


def _bool_tensor() -> Any:
    tensor = predict_pb2.PredictRequest().inputs["x"]
    tensor.dtype = types_pb2.DT_BOOL
    tensor.bool_val.append(True)
    return tensor


def _string_tensor() -> Any:
    tensor = predict_pb2.PredictRequest().inputs["x"]
    tensor.dtype = types_pb2.DT_STRING
    tensor.string_val.append(b"any_value")
    tensor.tensor_shape.dim.add().size = 1
    return tensor


@pytest.mark.parametrize("case", GRPC_CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("arm", ALL)
def test_grpc(arms: dict[str, Arm], arm: str, case: Grpc) -> None:
    if arm not in case.arms:
        pytest.skip(f"{case.test} does not apply to the {arm} server")
    grpc_client = client.GrpcClient(arms[arm].grpc)  # the arm's channel, kept open
    if case.code == grpc.StatusCode.OK:
        response = grpc_client.call(case.rpc, case.request())
        assert case.check is not None
        case.check(response)
        return
    with pytest.raises(grpc.RpcError) as info:
        grpc_client.call(case.rpc, case.request())
    assert info.value.code() == case.code, info.value.details()
    assert case.error is not None and case.error in info.value.details()


# -- json_tensor_test.cc: the codec, as TF Serving's tests call its JSON functions -------------


def _specs(**dtypes: str) -> dict[str, Any]:
    from graphserve.core.signature import TensorSpec

    return {name: TensorSpec(name, dtype, None) for name, dtype in dtypes.items()}


JSON_ERRORS = [
    ("SingleUnnamedTensorErrors", {"instances": [[1, 2], [3, 4], [5, 6, 7]]},
     "Expecting tensor size"),
    ("SingleUnnamedTensorErrors", {"instances": [[1, 2], [3, 4], [[5, 6]]]}, "Expecting shape"),
    ("SingleUnnamedTensorErrors", {"instances": [1, [1]]}, "Expecting shape"),
    ("SingleUnnamedTensorErrors", {"instances": [[1, 2], ["a", "b"]]}, "not of expected type"),
    ("SingleUnnamedTensorErrors", {"instances": [[1, 2]], "inputs": [[1, 2]]},
     "Not formatted correctly"),
]  # fmt: skip

JSON_NAMED_ERRORS = [
    ({"instances": [{"int_tensor": [[1, 2], [3, 4], [5, 6]], "str_tensor": ["foo", "bar"]},
                    {"int_tensor": [[[7, 8], [9, 0], [1, 2]]], "str_tensor": ["baz", "bat"]}]},
     "Expecting shape"),
    ({"instances": [{"int_tensor": [[1, 2], [3, 4], [5, 6], [7, 8]], "str_tensor": ["foo", "bar"]},
                    {"int_tensor": [[7, 8], [9, 0], [1, 2]], "str_tensor": ["baz", "bat"]}]},
     "Expecting tensor size"),
    ({"instances": [{"int_tensor": [[1, 2], [3, 4], [5, 6]], "str_tensor": ["foo", "bar"]},
                    [1, 20, 30]]},
     "Expecting object but got list"),
]  # fmt: skip


@pytest.mark.parametrize(("test", "body", "error"), JSON_ERRORS)
def test_json_single_tensor_errors(test: str, body: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        decode_json_request(body, _specs(default="int32"))


@pytest.mark.parametrize(("body", "error"), JSON_NAMED_ERRORS)
def test_json_multiple_named_tensor_errors(body: dict[str, Any], error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        decode_json_request(body, _specs(int_tensor="int32", str_tensor="string"))
    # the reverse mix: the first row a list, a later one an object
    with pytest.raises(InvalidInput, match="Expecting value/list but got object"):
        decode_json_request(
            {"instances": [["baz", "bar"], {"str_tensor": ["baz", "bat"]}]},
            _specs(str_tensor="string"),
        )


def test_json_signature_name_must_be_a_string() -> None:
    with pytest.raises(InvalidInput, match="must be a string value"):
        signature_name_of({"signature_name": 5, "instances": [[1, 2]]})


def _encoded(tensors: dict[str, np.ndarray], row: bool = True) -> Any:
    return json.loads(encode_json_response(tensors, row_format=row))


def test_json_from_tensors() -> None:
    """FromJsonSingleScalarTensor, ...BytesTensor, ...FloatTensorSixDigitPrecision,
    ...NonFinite, ...SingleZeroBatchTensor: the bodies TF Serving writes for these tensors."""
    ints = {"int_tensor": np.array([1, 2, 3, 4, 5], np.int32)}
    assert _encoded(ints) == {"predictions": [1, 2, 3, 4, 5]}
    assert _encoded(ints, row=False) == {"outputs": [1, 2, 3, 4, 5]}
    strings = np.array([[b"hello", b"world"], [b"tf", b"serving"]], dtype=object)
    assert _encoded({"str_tensor_bytes": strings}) == {
        "predictions": [
            [{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}],
            [{"b64": "dGY="}, {"b64": "c2VydmluZw=="}],
        ]
    }
    floats = np.array([[9000000, 999999, 0.5], [0.0003, 0.00003, 555557.5]], np.float32)
    # TF Serving's test compares the text: 9e+06, 999999.0, 0.5, 0.0003, 3e-05, 555557.5. The
    # same numbers, each written with the fewest digits that read back as the float32 (by
    # orjson, compact, which spells 3e-05 as 0.00003: the same digit).
    text = encode_json_response({"float_tensor": floats}, row_format=True).decode()
    assert text == '{"predictions":[[9000000.0,999999.0,0.5],[0.0003,0.00003,555557.5]]}'
    non_finite = np.array([[np.nan, np.inf], [3, -np.inf]], np.float32)
    text = encode_json_response({"float_tensor": non_finite}, row_format=True).decode()
    assert text == '{"predictions": [[NaN, Infinity], [3.0, -Infinity]]}'
    assert _encoded({"int_tensor": np.zeros((0, 2), np.int32)}) == {"predictions": []}


def test_json_results_key() -> None:
    """JsonFromClassificationResult / JsonFromRegressionResult: the key is "results" (TF
    Serving's api_rest.md says "result" in one place; its code and tests say "results")."""
    # covered over the wire by testClassifyREST and testRegressREST above; this pins the key
    assert {c.expect and next(iter(c.expect)) for c in REST_CASES if c.path.endswith(
        (":classify", ":regress")) and c.status == 200} == {"results"}


# -- what cannot be expressed here ------------------------------------------------------------

NOT_EXPRESSIBLE = [
    (ITEST, "testPredictOnTfLite, testPredictWithSignatureDefOnTfLite",
     "TF Lite models: graphserve serves SavedModels only"),
    (ITEST, "test_profiler_service_with_valid_trace_request",
     "TF Serving's profiler service is not part of its serving API"),
    (ITEST, "test_tf_text", "needs the tensorflow-text ops, which TF Serving links in"),
    (ITEST, "testGoodModelConfig, testBadModelConfig, testModelConfigReload*, testPredictUDS, "
     "testPrometheusEndpoint", "process-level: run by tests/test_tfserving_flags.py and by "
     "TF Serving's own test through ../shared/tools/tfserving-itest"),
    (HANDLER, "GetModelMetadata (exact file)",
     "compares with a JSON file of TF Serving's test data; the same keys are checked here"),
    (JSON, "MixedInputForFloatTensor, FloatTensorWithPrecisionLoss, FloatTensorThatExceeds*",
     "these check rapidjson's number parsing into float32 (values past float32's range become "
     "inf there); graphserve refuses a finite number past float32's range with a 400 instead"),
    (PREDICT, "ModelMissingSignatures, PredictionWithCustomizedSignatures",
     "need a model without signatures or TF Serving's internal signature override"),
    (CLASSIFY + ", " + REGRESS, "the fake-Session tests (Run totally failed, wrong output dtype)",
     "inject a mock Session; the output dtype checks are in serving/dataplane.py and named there"),
]  # fmt: skip


def counts() -> dict[str, tuple[int, int]]:
    """Cases per source file: (held, not expressible)."""
    held = Counter(c.source for c in [*REST_CASES, *GRPC_CASES])
    held[JSON] += len(JSON_ERRORS) + len(JSON_NAMED_ERRORS) + 3
    held[STORAGE] += 5  # tests/test_version_dirs.py
    missing = Counter(s for source, _, _ in NOT_EXPRESSIBLE for s in source.split(", "))
    return {s: (held[s], missing[s]) for s in sorted({*held, *missing})}


def test_readme_conformance_table_matches_the_cases() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    for source, (held, missing) in counts().items():
        assert f"| `{source}` | {held} | {missing} |" in readme, source


# -- what the issues found, kept as tests -------------------------------------------------------


def test_examples_input_of_unknown_rank_takes_a_batch(tmp_path: Path) -> None:
    """Estimator-style exports feed serialized tf.Examples through an input of unknown rank
    (and TF 1.0 wrote it with no shape at all): Regress with two examples is a batch of two,
    never "expects string of shape [], got string of shape [2]"."""
    from tests.tf1_models import write_tf1_half_plus_three

    write_tf1_half_plus_three(tmp_path / "m" / "00000123")
    registry = ModelRegistry()
    registry.load_graph("three", tmp_path / "m")
    regress = "tensorflow/serving/regress"
    assert registry.get("three").runner.signatures[regress].inputs["inputs"].shape is None
    with ModelServer(registry, ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)) as s:
        body = {"signature_name": regress, "examples": [{"x": 1.0}, {"x": 3.0}]}
        path = "/v1/models/three:regress"
        status, _, answer = _call_rest(f"127.0.0.1:{s.rest_port}", "POST", path, body)
        assert (status, answer) == (200, {"results": [3.5, 4.5]})
        request = _regress(regress, 1.0, 3.0)
        request.model_spec.name = "three"
        with client.GrpcClient.connect(f"127.0.0.1:{s.grpc_port}") as grpc_client:
            response = grpc_client.regress(request)
        assert [r.value for r in response.result.regressions] == [3.5, 4.5]


def test_method_name_check_is_tf_servings_flag(tmp_path: Path) -> None:
    """Off by default (TF2 exports name every signature predict, and classify works on them);
    with --enable_signature_method_name_check, Classify refuses a predict-method signature with
    TF Serving's message, and still classifies with a classify-method one."""
    _write_tf2(tmp_path / "tf2" / "00000123")
    write_tf1_half_plus_two(tmp_path / "tf1" / "00000123")
    registry = ModelRegistry()
    registry.load_graph("tf2", tmp_path / "tf2")
    registry.load_graph("tf1", tmp_path / "tf1")
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=None, method_name_check=True)
    with (
        ModelServer(registry, options) as server,
        client.GrpcClient.connect(f"127.0.0.1:{server.grpc_port}") as stub,
    ):
        request = _classify("classify_x_to_y", 2.0)
        request.model_spec.name = "tf2"
        with pytest.raises(grpc.RpcError) as info:
            stub.classify(request)
        assert info.value.code() == INVALID
        assert info.value.details() == (
            "Expected classification signature method_name to be "
            "tensorflow/serving/classify. Was: tensorflow/serving/predict"
        )
        request.model_spec.name = "tf1"
        answer = stub.classify(request)
        assert answer.result.classifications[0].classes[0].score == 3.0
