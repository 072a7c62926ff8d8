"""TF Serving's own test cases, as a table: each a request and the answer its tests expect.

The models they run against are TF Serving's half_plus_two test models, as `write-models` writes
them (conformance/models.py) and serves them under two names:

    default   one version, 123 (a zero-padded `00000123` directory)
    two       versions 123 and 124, labelled stable and canary

Every case names the file of tensorflow/serving it comes from (read there; no code or test data
of theirs is copied). Tests of TF Serving's JSON parser alone (json_tensor_test.cc) are sent as
REST predicts to half_plus_two, whose answer (y = 0.5 x + 2) says what x was read as. A case
with a `deviation` names graphserve's known other answer, given only under an option
(cases.STRICT_JSON_NUMBERS). Tests that cannot be expressed as a request to a server are in
`NOT_EXPRESSIBLE`, each with the reason.
"""

from __future__ import annotations

from typing import Any

from graphserve.conformance.cases import STRICT_JSON_NUMBERS, GrpcCase, RestCase, expect
from graphserve.core import client

__all__ = [
    "GRPC_CASES",
    "ITEST",
    "JSON",
    "LABELS",
    "NOT_EXPRESSIBLE",
    "REST_CASES",
    "SOURCES",
    "STORAGE",
    "TWO",
]

ITEST = "model_servers/tensorflow_model_server_test.py"
HANDLER = "model_servers/http_rest_api_handler_test.cc"
JSON = "util/json_tensor_test.cc"
PREDICT = "servables/tensorflow/predict_util_test.cc"
CLASSIFY = "servables/tensorflow/classifier_test.cc"
REGRESS = "servables/tensorflow/regressor_test.cc"
MULTI = "servables/tensorflow/multi_inference_test.cc"
STATUS = "model_servers/get_model_status_impl_test.cc"
STORAGE = "sources/storage_path/file_system_storage_path_source_test.cc"
SOURCES = (ITEST, HANDLER, JSON, PREDICT, CLASSIFY, REGRESS, MULTI, STATUS, STORAGE)

DEFAULT = "default"
TWO = "two"  # half_plus_two in versions 123 and 124, labelled stable and canary
LABELS = {"stable": 123, "canary": 124}
UINT64_MAX = "18446744073709551615"


# -- REST -------------------------------------------------------------------------------------


def _malformed(method: str, path: str) -> RestCase:
    return RestCase(HANDLER, "UnsupportedApiCalls", method, path, None, 400,
                    error="Malformed request")  # fmt: skip


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


def _available(version: str) -> dict[str, Any]:
    ok = {"error_code": "OK", "error_message": ""}
    return {"model_version_status": [{"version": version, "state": "AVAILABLE", "status": ok}]}


def _every_version_ok(body: Any) -> None:
    """get_model_status_impl_test.cc AllVersionsSuccess, over REST: both versions, OK."""
    statuses = body["model_version_status"]
    versions = sorted(s["version"] for s in statuses)
    expect(versions == ["123", "124"], f"versions {versions}, expected ['123', '124']")
    codes = {s["status"]["error_code"] for s in statuses}
    expect(codes == {"OK"}, f"error codes {codes}, expected OK")


_TF1_SIGNATURES = {"serving_default", "regress_x_to_y", "regress_x_to_y2", "regress_x2_to_y3",
                   "classify_x_to_y"}  # fmt: skip
_TF2_SIGNATURES = {"serving_default", "regress_x_to_y", "classify_x_to_y"}


def _metadata_body(body: Any) -> None:
    """testGetModelMetadataREST: the body TF Serving's *_metadata.json files hold, key for key:
    model_spec, then metadata.signature_def.signature_def with dtypes as DT_* names, sizes as
    strings, `name` and `unknown_rank` in every shape and `defaults` in every signature. On the
    TF1 model, its tensors' names and shapes as the file has them."""
    spec = body.get("model_spec")
    expect(spec == {"name": DEFAULT, "signature_name": "", "version": "123"}, f"model_spec {spec}")
    keys = set(body.get("metadata", {}))
    expect(keys == {"signature_def"}, f"metadata keys {sorted(keys)}, expected signature_def")
    signatures = body["metadata"]["signature_def"]["signature_def"]
    expect(set(signatures) in (_TF1_SIGNATURES, _TF2_SIGNATURES),
           f"signatures {sorted(signatures)}, expected half_plus_two's")  # fmt: skip
    for name, signature in signatures.items():
        keys = set(signature)
        expect(keys == {"inputs", "outputs", "method_name", "defaults"}, f"{name} has {keys}")
        for tensor in [*signature["inputs"].values(), *signature["outputs"].values()]:
            expect(set(tensor) == {"dtype", "tensor_shape", "name"}, f"{name}: {tensor}")
            expect(tensor["dtype"].startswith("DT_"), f"{name}: dtype {tensor['dtype']}")
            shape = tensor["tensor_shape"]
            expect(set(shape) == {"dim", "unknown_rank"} and all(
                isinstance(d["size"], str) and set(d) == {"size", "name"} for d in shape["dim"]
            ), f"{name}: tensor_shape {shape}")  # fmt: skip
    if set(signatures) != _TF1_SIGNATURES:
        return
    regress = signatures["regress_x2_to_y3"]
    expect(regress["method_name"] == "tensorflow/serving/regress", "method_name")
    shape = {"dim": [{"size": "-1", "name": ""}, {"size": "1", "name": ""}], "unknown_rank": False}
    want = {"dtype": "DT_FLOAT", "tensor_shape": shape, "name": "x2:0"}
    got = regress["inputs"]["inputs"]
    expect(got == want, f"regress_x2_to_y3's input is {got}, expected {want}")
    expect(regress["outputs"]["outputs"]["name"] == "y3:0", "output name is not y3:0")
    expect(signatures["serving_default"]["outputs"]["y"]["name"] == "y:0", "y is not y:0")


def _half_plus_two(*xs: float) -> Any:
    """A check of `predictions`: half_plus_two's answer, in float32, for each x read as TF
    Serving reads a JSON number for a float input (the nearest double, cast to float32)."""

    def check(body: Any) -> None:
        import numpy as np

        with np.errstate(over="ignore"):  # past float32's range: +-inf, as the cast gives
            want = [float(np.float32(0.5) * np.float32(x) + np.float32(2)) for x in xs]
        got = body.get("predictions") if isinstance(body, dict) else None
        as_float32 = [float(np.float32(v)) for v in got] if isinstance(got, list) else None
        expect(as_float32 == want, f"predictions {got}, expected {want}")

    return check


def _json_number(test: str, what: str, *xs: float, **kw: Any) -> RestCase:
    return RestCase(JSON, test, "POST", "/v1/models/default:predict", {"instances": list(xs)},
                    200, check=_half_plus_two(*xs), what=what, **kw)  # fmt: skip


DOUBLE_MAX, DOUBLE_MIN = 1.79769e308, 2.22507e-308  # as absl::Substitute writes them: 6 digits

REST_CASES = [
    # tensorflow_model_server_test.py: the integration test's REST calls and bodies
    RestCase(ITEST, "testPredictREST", "POST", "/v1/models/default:predict",
             {"instances": [2.0, 3.0, 4.0]}, 200, {"predictions": [3.0, 3.5, 4.0]}),
    RestCase(ITEST, "testPredictColumnarREST", "POST", "/v1/models/default:predict",
             {"inputs": [2.0, 3.0, 4.0]}, 200, {"outputs": [3.0, 3.5, 4.0]}),
    RestCase(ITEST, "testClassifyREST", "POST", "/v1/models/default:classify",
             {"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]}, 200,
             {"results": [[["", 3.0]]]}),
    RestCase(ITEST, "testRegressREST", "POST", "/v1/models/default:regress",
             {"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]}, 200,
             {"results": [3.0]}),
    RestCase(ITEST, "testGetStatusREST", "GET", "/v1/models/default", None, 200,
             _available("123")),
    RestCase(ITEST, "testGetModelMetadataREST", "GET", "/v1/models/default/metadata", None, 200,
             check=_metadata_body),
    # http_rest_api_handler_test.cc: routing, errors, and its bodies (model: two versions)
    *(_malformed(method, path) for method, path in _MALFORMED),
    RestCase(HANDLER, "UnsupportedApiCalls", "GET", "/v1/models", None, 400,
             error="Missing model name"),
    RestCase(HANDLER, "UnsupportedApiCalls", "POST",
             f"/v1/models/foo/versions/{UINT64_MAX}:regress", None, 400,
             error="Failed to convert version"),
    RestCase(HANDLER, "PredictModelNameVersionErrors", "POST", "/v1/models/foo:predict",
             {"instances": [1]}, 404),
    RestCase(HANDLER, "PredictModelNameVersionErrors", "POST",
             "/v1/models/foo/versions/50:predict", {"instances": [1]}, 404),
    RestCase(HANDLER, "PredictModelNameVersionErrors", "POST", f"/v1/models/{TWO}99:predict",
             {"instances": [1]}, 404),
    RestCase(HANDLER, "PredictRequestErrors", "POST", f"/v1/models/{TWO}:predict", b"", 400,
             error="JSON Parse error: The document is empty", what="empty body"),
    RestCase(HANDLER, "PredictRequestErrors", "POST", f"/v1/models/{TWO}:predict",
             b"instances = [1, 2]", 400, error="JSON Parse error: Invalid value",
             what="not JSON"),
    RestCase(HANDLER, "PredictRequestErrors", "POST", f"/v1/models/{TWO}:predict",
             {"instances": ["x", "y"]}, 400, error="not of expected type: float",
             what="strings for floats"),
    RestCase(HANDLER, "PredictRequestErrors", "POST", f"/v1/models/{TWO}/labels/nope:predict",
             {"instances": ["x", "y"]}, 400, error="Unrecognized servable version label"),
    RestCase(HANDLER, "PredictRequestErrors", "POST", f"/v1/models/{TWO}:predict",
             {"signature_name": 100}, 400, error="'signature_name' key must be a string value.",
             what="signature_name 100"),
    RestCase(HANDLER, "Predict", "POST", f"/v1/models/{TWO}:predict",
             {"instances": [[1.0, 2.0], [3.0, 4.0]]}, 200,
             {"predictions": [[2.5, 3.0], [3.5, 4.0]]}),
    RestCase(HANDLER, "Predict", "POST", f"/v1/models/{TWO}/versions/123:predict",
             {"instances": [1.0, 2.0]}, 200, {"predictions": [2.5, 3.0]}),
    RestCase(HANDLER, "Predict", "POST", f"/v1/models/{TWO}/labels/stable:predict",
             {"instances": [1.0, 2.0]}, 200, {"predictions": [2.5, 3.0]}),
    RestCase(HANDLER, "Predict", "POST", f"/v1/models/{TWO}/versions/124:predict",
             {"signature_name": "serving_default", "instances": [3.0, 4.0]}, 200,
             {"predictions": [3.5, 4.0]}, what="row"),
    RestCase(HANDLER, "Predict", "POST", f"/v1/models/{TWO}/versions/124:predict",
             {"signature_name": "serving_default", "inputs": [3.0, 4.0]}, 200,
             {"outputs": [3.5, 4.0]}, what="columnar"),
    RestCase(HANDLER, "Regress", "POST", f"/v1/models/{TWO}:regress",
             {"signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]}, 200,
             {"results": [42]}),
    RestCase(HANDLER, "Regress", "POST", f"/v1/models/{TWO}/versions/123:regress",
             {"signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]}, 200,
             {"results": [42]}),
    RestCase(HANDLER, "Regress", "POST", f"/v1/models/{TWO}/labels/canary:regress",
             {"signature_name": "regress_x_to_y", "examples": [{"x": 80.0}]}, 200,
             {"results": [42]}),
    RestCase(HANDLER, "Classify", "POST", f"/v1/models/{TWO}:classify",
             {"signature_name": "classify_x_to_y", "examples": [{"x": 20.0}]}, 200,
             {"results": [[["", 12]]]}),
    RestCase(HANDLER, "Classify", "POST", f"/v1/models/{TWO}/labels/stable:classify",
             {"signature_name": "classify_x_to_y", "examples": [{"x": 10.0}]}, 200,
             {"results": [[["", 7]]]}),
    RestCase(HANDLER, "GetStatus", "GET", f"/v1/models/{TWO}/versions/123", None, 200,
             _available("123")),
    RestCase(HANDLER, "GetStatus", "GET", f"/v1/models/{TWO}/labels/canary", None, 200,
             _available("124")),
    RestCase(STATUS, "AllVersionsSuccess", "GET", f"/v1/models/{TWO}", None, 200,
             check=_every_version_ok),
    # json_tensor_test.cc: JSON numbers read for a float input
    _json_number("MixedInputForFloatTensor", "integers and decimals", 1, 2.0, 3, 4, 5.003,
                 0.007, 0.0),
    _json_number("FloatTensorWithPrecisionLoss", "1435774380 rounds to a float32", 1435774380),
    _json_number("FloatTensorWithPrecisionLoss", "1435774380.0 rounds to a float32",
                 1435774380.0),
    _json_number("FloatTensorThatExceedsMaxReturnsInf", "double's max reads as inf", DOUBLE_MAX,
                 deviation=STRICT_JSON_NUMBERS),
    _json_number("FloatTensorThatExceedsMaxReturnsInf", "minus double's max reads as -inf",
                 -DOUBLE_MAX, deviation=STRICT_JSON_NUMBERS),
    _json_number("FloatTensorThatExceedsMinReturnsZero", "double's least normal reads as 0",
                 DOUBLE_MIN),
    _json_number("FloatTensorThatExceedsMinReturnsZero", "its negative reads as -0",
                 -DOUBLE_MIN),
]  # fmt: skip


# -- gRPC -------------------------------------------------------------------------------------


def _tensor(dtype: str, values: list[Any], shape: tuple[int, ...] | None = None) -> Any:
    """A TensorProto filled as a client fills it by hand: typed `*_val`, an explicit shape."""
    from tensorflow.core.framework import tensor_pb2, types_pb2

    tensor = tensor_pb2.TensorProto(dtype=getattr(types_pb2, f"DT_{dtype.upper()}"))
    getattr(tensor, f"{dtype}_val").extend(values)
    for size in shape if shape is not None else (len(values),):
        tensor.tensor_shape.dim.add().size = size
    return tensor


def _x(*values: float, shape: tuple[int, ...] | None = None) -> Any:
    return _tensor("float", list(values), shape)


def _predict(model: str = DEFAULT, signature: str = "serving_default", **kw: Any) -> Any:
    return client.predict_request(
        model,
        kw.pop("inputs", {"x": _x(2.0)}),
        signature_name=signature,
        output_filter=kw.pop("output_filter", []),
    )


def _examples(*xs: float) -> list[Any]:
    return [client.example(x=x) for x in xs]


def _classify(signature: str, *xs: float) -> Any:
    return client.classify_request(DEFAULT, _examples(*xs), signature_name=signature)


def _regress(signature: str, *xs: float) -> Any:
    return client.regress_request(DEFAULT, _examples(*xs), signature_name=signature)


def _multi(tasks: list[tuple[str, str, str]], *xs: float) -> Any:
    return client.multi_inference_request(tasks, _examples(*xs))


REG, CLS = "tensorflow/serving/regress", "tensorflow/serving/classify"


def _y(response: Any, expected: float, signature: str = "serving_default") -> None:
    """VerifyPredictRequest: y in typed float_val, and the model_spec echoed with version 123."""
    from tensorflow.core.framework import types_pb2

    expect(list(response.outputs) == ["y"], f"outputs {list(response.outputs)}, expected ['y']")
    y = response.outputs["y"]
    expect(y.dtype == types_pb2.DT_FLOAT, f"y has dtype {y.dtype}, expected DT_FLOAT")
    expect(list(y.float_val) == [expected], f"y.float_val {list(y.float_val)} != [{expected}]")
    spec = response.model_spec
    echoed = (spec.name, spec.signature_name, spec.version.value)
    want = (DEFAULT, signature, 123)
    expect(echoed == want, f"model_spec (name, signature, version) {echoed}, expected {want}")


def _y_values(response: Any, expected: list[float]) -> None:
    got = list(response.outputs["y"].float_val)
    expect(got == expected, f"y {got}, expected {expected}")


def _score(response: Any, expected: float) -> None:
    (classification,) = response.result.classifications
    classes = [(c.label, c.score) for c in classification.classes]
    expect(classes == [("", expected)], f"classes {classes}, expected [('', {expected})]")
    expect(response.model_spec.version.value == 123, "model_spec.version is not 123")


def _regressions(response: Any, expected: list[float]) -> None:
    got = [r.value for r in response.result.regressions]
    expect(got == expected, f"regressions {got}, expected {expected}")


def _multi_result(response: Any) -> None:
    regression, classification = response.results
    values = [r.value for r in regression.regression_result.regressions]
    expect(values == [3.0], f"regressions {values}, expected [3.0]")
    score = classification.classification_result.classifications[0].classes[0].score
    expect(score == 3.0, f"score {score}, expected 3.0")
    names = [r.model_spec.signature_name for r in response.results]
    expect(names == ["regress_x_to_y", "classify_x_to_y"], f"signatures {names}")
    versions = {r.model_spec.version.value for r in response.results}
    expect(versions == {123}, f"versions {versions}, expected {{123}}")


def _status(name: str, version: int | None = None) -> Any:
    return lambda: client.status_request(name, version=version)


def _versions(expected: list[tuple[int, int]]) -> Any:
    def check(response: Any) -> None:
        got = sorted((s.version, s.status.error_code) for s in response.model_version_status)
        expect(got == expected, f"(version, error_code) {got}, expected {expected}")

    return check


def _metadata_answer(response: Any) -> None:
    spec = response.model_spec
    expect((spec.name, spec.version.value) == (DEFAULT, 123), f"model_spec {spec}")
    expect(list(response.metadata) == ["signature_def"], f"metadata {list(response.metadata)}")


INVALID, NOT_FOUND = "INVALID_ARGUMENT", "NOT_FOUND"
GOOD_TASKS = [(DEFAULT, "regress_x_to_y", REG), (DEFAULT, "classify_x_to_y", CLS)]

GRPC_CASES = [
    # tensorflow_model_server_test.py
    GrpcCase(ITEST, "testPredictSavedModel", "Predict", lambda: _predict(output_filter=["y"]),
             check=lambda r: _y(r, 3.0)),
    GrpcCase(ITEST, "testClassify", "Classify", lambda: _classify("classify_x_to_y", 2.0),
             check=lambda r: _score(r, 3.0)),
    GrpcCase(ITEST, "testRegress", "Regress", lambda: _regress("regress_x_to_y", 2.0),
             check=lambda r: _regressions(r, [3.0])),
    GrpcCase(ITEST, "testMultiInference", "MultiInference", lambda: _multi(GOOD_TASKS, 2.0),
             check=_multi_result),
    GrpcCase(ITEST, "testGetModelStatus", "GetModelStatus", _status(DEFAULT),
             check=_versions([(123, 0)])),
    GrpcCase(ITEST, "testGetModelMetadata", "GetModelMetadata",
             lambda: client.metadata_request(DEFAULT), check=_metadata_answer),
    # predict_util_test.cc
    GrpcCase(PREDICT, "PredictionSuccess", "Predict", lambda: _predict(inputs={"x": _x(2.0)}),
             check=lambda r: _y(r, 3.0)),
    GrpcCase(PREDICT, "PredictionWithNamedRegressionSignature", "Predict",
             lambda: _predict(inputs={"x": _x(2.0, shape=(1, 1))}),
             check=lambda r: _y_values(r, [3.0]), what="x of shape [1, 1]"),
    GrpcCase(PREDICT, "PredictionInvalidTensor", "Predict",
             lambda: _predict(inputs={"unknown_key1": _x(1.0), "unknown_key2": _x(1.0)}),
             INVALID, error="Sent extra: {unknown_key1,unknown_key2}. Missing but required: {x}.",
             what="extra and missing inputs"),
    GrpcCase(PREDICT, "PredictionInvalidTensor", "Predict",
             lambda: _predict(inputs={"x": _tensor("bool", [True], ())}),
             INVALID, error="Expects arg[0] to be float but bool is provided",
             what="bool for float"),
    GrpcCase(PREDICT, "InputTensorsHaveWrongType", "Predict",
             lambda: _predict(inputs={"x": _tensor("string", [b"any_value"])},
                              output_filter=["y"]),
             INVALID, error="to be float but string is provided"),
    GrpcCase(PREDICT, "OutputFiltersDontMatchModelSpecOutputs", "Predict",
             lambda: _predict(output_filter=["output_filter"]), INVALID,
             error="output tensor alias not found in signature: output_filter"),
    GrpcCase(PREDICT, "OutputFiltersDontMatchModelSpecOutputs", "Predict",
             lambda: _predict(output_filter=["y", "y"]), INVALID,
             error="duplicate output tensor alias: y", what="duplicate filter"),
    GrpcCase(PREDICT, "ModelMissingSignatures", "Predict",
             lambda: _predict(signature="nope"), "FAILED_PRECONDITION",
             error='Serving signature key "nope" not found', what="unknown key"),
    # classifier_test.cc, regressor_test.cc: an Input with no examples
    GrpcCase(CLASSIFY, "EmptyInput", "Classify", lambda: _classify("classify_x_to_y"), INVALID,
             error="Input is empty"),
    GrpcCase(REGRESS, "EmptyInput", "Regress", lambda: _regress("regress_x_to_y"), INVALID,
             error="Input is empty"),
    GrpcCase(CLASSIFY, "ClassificationSignature", "Classify",
             lambda: _classify("serving_default", 2.0), INVALID,
             error="No classification inputs found in SignatureDef",
             what="on a predict signature"),
    # multi_inference_test.cc
    GrpcCase(MULTI, "MissingInputTest", "MultiInference", lambda: _multi(GOOD_TASKS[:1]),
             INVALID, error="Input is empty"),
    GrpcCase(MULTI, "UndefinedSignatureTest", "MultiInference",
             lambda: _multi([(DEFAULT, "ThisSignatureDoesNotExist", REG)], 2.0), INVALID,
             error="signature not found"),
    GrpcCase(MULTI, "InconsistentModelSpecsInRequestTest", "MultiInference",
             lambda: _multi([GOOD_TASKS[0], ("ModelDoesNotExist", "regress_x_to_y", REG)], 2.0),
             INVALID, error="must access the same model name"),
    GrpcCase(MULTI, "EvaluateDuplicateSignaturesTest", "MultiInference",
             lambda: _multi([GOOD_TASKS[0], GOOD_TASKS[0]], 2.0), INVALID,
             error="Duplicate evaluation of signature: regress_x_to_y"),
    GrpcCase(MULTI, "UsupportedSignatureTypeTest", "MultiInference",
             lambda: _multi([(DEFAULT, "serving_default", "tensorflow/serving/predict")], 2.0),
             "UNIMPLEMENTED", error="Unsupported signature"),
    GrpcCase(MULTI, "ValidSingleSignatureTest", "MultiInference",
             lambda: _multi(GOOD_TASKS[:1], 2.0),
             check=lambda r: expect(r.results[0].regression_result.regressions[0].value == 3.0,
                                    f"regression {r.results[0]}, expected 3.0")),
    # get_model_status_impl_test.cc
    GrpcCase(STATUS, "InvalidModelNameFailure", "GetModelStatus", _status("nope"), NOT_FOUND,
             error="Could not find any versions of model nope"),
    GrpcCase(STATUS, "InvalidModelVersionFailure", "GetModelStatus", _status(DEFAULT, 9),
             NOT_FOUND, error="Could not find version 9 of model default"),
    GrpcCase(STATUS, "SingleVersionSuccess", "GetModelStatus", _status(TWO, 123),
             check=_versions([(123, 0)])),
    GrpcCase(STATUS, "AllVersionsSuccess", "GetModelStatus", _status(TWO),
             check=_versions([(123, 0), (124, 0)])),
]  # fmt: skip


# -- what cannot be expressed here ------------------------------------------------------------

NOT_EXPRESSIBLE = [
    (ITEST, "testPredictOnTfLite, testPredictWithSignatureDefOnTfLite",
     "need a TF Lite model served (--prefer_tflite_model): graphserve serves SavedModels only, "
     "so no model of it takes these requests"),
    (ITEST, "test_profiler_service_with_valid_trace_request",
     "TensorFlow's profiler service, not TF Serving's API: a trace makes the server write a "
     "profile to its own disk, which no conformance run should do to the server it tests. "
     "graphserve serves no profiler service (it answers UNIMPLEMENTED)"),
    (ITEST, "test_tf_text", "a server process given TF Serving's tf_text_regression model: "
     "tests/test_op_libraries.py serves our equivalent of it (from TF Text's generator) with "
     "`serve graph` and checks it as the test does (x = [2.0] gives y = [3.0]); the itest "
     "runner script does not copy that model"),
    (ITEST, "testGoodModelConfig, testBadModelConfig, testModelConfigReload*, testPredictUDS, "
     "testPrometheusEndpoint", "process-level: run by tests/test_tfserving_flags.py and by "
     "TF Serving's own test through ../shared/tools/tfserving-itest"),
    (HANDLER, "GetModelMetadata (exact file)",
     "compares with a JSON file of TF Serving's test data; the same keys are checked here"),
    (PREDICT, "ModelMissingSignatures, PredictionWithCustomizedSignatures",
     "need a model without signatures or TF Serving's internal signature override"),
    (CLASSIFY + ", " + REGRESS, "the fake-Session tests (Run totally failed, wrong output dtype)",
     "inject a mock Session; the output dtype checks are in serving/dataplane.py and named there"),
]  # fmt: skip
