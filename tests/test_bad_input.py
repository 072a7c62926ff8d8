"""Bad input, case by case: over REST and gRPC, against the graph and the eager server, each gets
its status and a message naming what was wrong, and the next good request still succeeds.

CASES is the table the manual shows in docs/reliability.md (a test checks that every case is
listed there). A `None` protocol entry means the case cannot be expressed in that
protocol (gRPC has no JSON; REST has no output filter), not that it is untested.

The model is examples:multi_io (float32 `features` [-1, 8], int64 `category` [-1], string
`text` [-1]): every dtype family the codec has. `fixed` is tests.factories:affine exported with a
fixed batch dimension, x float32 [4, 3].
"""

from __future__ import annotations

import gzip
import http.client
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import predict_pb2

from graphserve.core import client
from graphserve.core.client import GrpcClient, HttpConnection, HttpReply
from graphserve.exporter import ExportSpec, export_model, parse_input_spec
from graphserve.model.examples import multi_io
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.batching import BatchingParameters, BatchingRunner
from graphserve.serving.registry import Servable

LIMIT = 1 << 20  # the servers' --max-message-bytes here
FEATURES = np.linspace(-1.0, 1.0, 16, dtype=np.float32).reshape(2, 8)
CATEGORY = np.array([3, 7], dtype=np.int64)
TEXT = np.array([b"alpha", b"beta"], dtype=object)
GOOD = {"features": FEATURES, "category": CATEGORY, "text": TEXT}
GOOD_JSON = {
    "features": FEATURES.tolist(),
    "category": CATEGORY.tolist(),
    "text": ["alpha", "beta"],
}
ARMS = ["graph", "eager"]
# gRPC's cases also go to the graph model on the asyncio front end (--grpc-front-end asyncio):
# its Predict is a coroutine of its own, with its own way to abort.
GRPC_ARMS = [*ARMS, "graph-asyncio"]


@dataclass(frozen=True)
class Rest:
    path: str = "/v1/models/multi:predict"
    body: Any = None  # bytes as they are, anything else as JSON
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "POST"

    def data(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()


def _inputs(**change: Any) -> dict[str, Any]:
    """GOOD_JSON's columns with some replaced (a value of None drops that input)."""
    return {k: v for k, v in {**GOOD_JSON, **change}.items() if v is not None}


def _request(
    model: str = "multi",
    signature: str = "",
    version: int | None = None,
    label: str = "",
    **arrays: Any,
) -> predict_pb2.PredictRequest:
    """A gRPC Predict of GOOD with some inputs replaced (None drops one)."""
    inputs = {name: array for name, array in {**GOOD, **arrays}.items() if array is not None}
    return client.predict_request(
        model, inputs, signature_name=signature, version=version, label=label or None
    )


def _with_filter(request: predict_pb2.PredictRequest, *names: str) -> predict_pb2.PredictRequest:
    request.output_filter.extend(names)
    return request


def _content_mismatch() -> predict_pb2.PredictRequest:
    request = _request()
    request.inputs["features"].tensor_content = FEATURES.tobytes()[:-4]
    return request


@dataclass(frozen=True)
class Case:
    id: str
    what: str  # as the manual's table (docs/reliability.md) says it
    rest: Rest | None
    http: int | None
    rest_message: str | None
    grpc: Callable[[], predict_pb2.PredictRequest | bytes] | None = None  # bytes: sent raw
    code: grpc.StatusCode | None = None
    grpc_message: str | None = None
    grpc_gzip: bool = False  # send it gzip-compressed


INVALID = grpc.StatusCode.INVALID_ARGUMENT
DEEP = b'{"instances": ' + b"[" * 150 + b"1" + b"]" * 150 + b"}"

CASES = [
    Case(
        "wrong-dtype",
        "wrong dtype",
        Rest(body={"inputs": _inputs(category=[1.5, 2.5])}),
        400,
        "input 'category' expects int64 of shape [-1], got floating-point values",
        lambda: _request(features=FEATURES.astype(np.float64)),
        INVALID,
        "input 'features' expects float32 of shape [-1, 8], got float64 of shape [2, 8]",
    ),
    Case(
        "wrong-rank",
        "wrong rank",
        Rest(body={"inputs": _inputs(features=FEATURES[0].tolist())}),
        400,
        "input 'features' is declared float32 of shape [-1, 8], got shape [8]",
        lambda: _request(features=FEATURES[..., None]),
        INVALID,
        "input 'features' is declared float32 of shape [-1, 8], got shape [2, 8, 1]",
    ),
    Case(
        "wrong-inner-shape",
        "wrong inner shape",
        Rest(body={"inputs": _inputs(features=FEATURES[:, :5].tolist())}),
        400,
        "input 'features' is declared float32 of shape [-1, 8], got shape [2, 5]",
        lambda: _request(features=FEATURES[:, :5]),
        INVALID,
        "Matrix size-incompatible: In[0]: [2,5], In[1]: [8,1]",
    ),
    Case(
        "ragged",
        "ragged `instances` (gRPC: tensor_content that does not fill the shape)",
        Rest(
            body={
                "instances": [
                    {"features": [0.0] * 8, "category": 1, "text": "a"},
                    {"features": [0.0] * 7, "category": 2, "text": "b"},
                ]
            }
        ),
        400,
        "input 'features' is ragged (Expecting tensor size: lists of 7 and 8 values at one "
        "depth): every row must have the same shape",
        _content_mismatch,
        INVALID,
        "input 'features': tensor_content holds 60 bytes, expected 64 for float32 of shape [2, 8]",
    ),
    Case(
        "missing-input",
        "missing input",
        Rest(body={"inputs": _inputs(text=None)}),
        400,
        "missing input 'text': expected string of shape [-1]",
        lambda: _request(text=None),
        INVALID,
        "missing input 'text': expected string of shape [-1]",
    ),
    Case(
        "extra-input",
        "extra input",
        Rest(body={"inputs": _inputs(extra=[1.0, 2.0])}),
        400,
        "unknown input 'extra': this signature takes 'category', 'features', 'text'",
        lambda: _request(extra=np.zeros(2, np.float32)),
        INVALID,
        "unknown input 'extra': this signature takes 'category', 'features', 'text'",
    ),
    Case(
        "both-formats",
        "both `instances` and `inputs`",
        Rest(body={"instances": [{"text": "a"}], "inputs": _inputs()}),
        400,
        "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist",
    ),
    Case(
        "neither-format",
        "neither `instances` nor `inputs` (gRPC: no inputs)",
        Rest(body={"signature_name": "serving_default"}),
        400,
        "request must have 'instances' (row format) or 'inputs' (columnar format)",
        lambda: _request(features=None, category=None, text=None),
        INVALID,
        "missing inputs 'category', 'features', 'text': expected all of them",
    ),
    Case(
        "empty-body",
        "empty body (gRPC: a request naming no model)",
        Rest(body=b""),
        400,
        "JSON Parse error: The document is empty: expected a JSON object with 'instances' or "
        "'inputs'",
        lambda: predict_pb2.PredictRequest(),
        INVALID,
        "model_spec.name is empty",
    ),
    Case(
        "not-json",
        "body that is not JSON (gRPC: bytes that are not a PredictRequest)",
        Rest(body=b'{"inputs": {"features": [1.0,'),
        400,
        "request body is not valid JSON",
        lambda: b"\xff\xff\xff not a protobuf",
        INVALID,
        "the request is not a valid message for /tensorflow.serving.PredictionService/Predict",
    ),
    Case(
        "not-an-object",
        "JSON that is not an object",
        Rest(body=[1, 2, 3]),
        400,
        "request body must be a JSON object with 'instances' or 'inputs'",
    ),
    Case(
        "too-deep",
        "JSON nested deeper than the limit (--max-json-depth, default 100)",
        Rest(body=DEEP),
        400,
        "request body nests JSON arrays and objects 151 deep; the limit is 100",
    ),
    Case(
        "int-out-of-range",
        "integer out of range for the dtype",
        Rest(body={"inputs": _inputs(category=[1, 2**70])}),
        400,
        "input 'category': values out of range for int64",
    ),
    Case(
        "bool-for-number",
        "true/false for a number",
        Rest(body={"inputs": _inputs(features=[[True] * 8] * 2)}),
        400,
        "input 'features' expects float32 of shape [-1, 8], got true/false",
    ),
    Case(
        "null-for-number",
        "null for a number",
        Rest(body={"inputs": _inputs(category=[1, None])}),
        400,
        "input 'category' expects int64 of shape [-1], got null",
    ),
    Case(
        "bad-base64",
        "malformed base64",
        Rest(body={"inputs": _inputs(text=[{"b64": "not base64!"}, {"b64": "YQ=="}])}),
        400,
        "input 'text': 'b64' value is not valid base64",
    ),
    Case(
        "b64-for-number",
        '`{"b64": ...}` for a non-string input',
        Rest(body={"inputs": _inputs(category=[{"b64": "AQ=="}, {"b64": "Ag=="}])}),
        400,
        "input 'category' is int64: {\"b64\": ...} is only for string inputs",
    ),
    Case(
        "unknown-model",
        "unknown model",
        Rest(path="/v1/models/nope:predict", body={"inputs": _inputs()}),
        404,
        "Servable not found for request: Latest(nope)",
        lambda: _request(model="nope"),
        grpc.StatusCode.NOT_FOUND,
        "Servable not found for request: Latest(nope)",
    ),
    Case(
        "unknown-version",
        "unknown version",
        Rest(path="/v1/models/multi/versions/9:predict", body={"inputs": _inputs()}),
        404,
        "Servable not found for request: Specific(multi, 9)",
        lambda: _request(version=9),
        grpc.StatusCode.NOT_FOUND,
        "Servable not found for request: Specific(multi, 9)",
    ),
    Case(
        "unknown-label",
        "unknown version label",
        Rest(path="/v1/models/multi/labels/canary:predict", body={"inputs": _inputs()}),
        400,
        "Unrecognized servable version label: canary",
        lambda: _request(label="canary"),
        INVALID,
        "Unrecognized servable version label: canary",
    ),
    Case(
        "non-numeric-version",
        "version that is not a number",
        Rest(path="/v1/models/multi/versions/x:predict", body={"inputs": _inputs()}),
        400,
        "Malformed request: POST /v1/models/multi/versions/x:predict",
    ),
    Case(
        "unknown-signature",
        "unknown signature",
        Rest(body={"signature_name": "nope", "inputs": _inputs()}),
        400,
        'Serving signature key "nope" not found',
        lambda: _request(signature="nope"),
        grpc.StatusCode.FAILED_PRECONDITION,
        'Serving signature key "nope" not found',
    ),
    Case(
        "unknown-output-filter",
        "unknown output filter (REST has none)",
        None,
        None,
        None,
        lambda: _with_filter(_request(), "score", "nope"),
        INVALID,
        "output tensor alias not found in signature: nope Outputs expected to be in the set "
        "{bucket,label,score}.",
    ),
    Case(
        "zero-batch",
        "batch of zero",
        Rest(body={"instances": []}),
        400,
        "No values in 'instances' array: send at least one row",
        # gRPC: a tensor of zero rows runs, as in TF Serving (tests/test_conformance.py)
    ),
    Case(
        "over-size-limit",
        "payload over the size limit (--max-message-bytes)",
        Rest(body=b" " * (LIMIT + 1)),
        413,
        f"request body of {LIMIT + 1} bytes exceeds the limit of {LIMIT} bytes",
        lambda: _request(
            features=np.zeros((LIMIT // 32 + 1, 8), np.float32),
            category=np.zeros(LIMIT // 32 + 1, np.int64),
            text=np.full(LIMIT // 32 + 1, b"", object),
        ),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "Received message larger than max",
    ),
    Case(
        "gzip-bomb",
        "gzip body that decompresses past the limit",
        Rest(
            body=gzip.compress(b" " * (4 * LIMIT)),
            headers={"Content-Encoding": "gzip"},
        ),
        413,
        f"gzip request body decompresses past the limit of {LIMIT} bytes",
        lambda: _request(text=np.full(4 * LIMIT // 64, b" " * 64, object)),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "Decompressed message larger than max",
        grpc_gzip=True,
    ),
    Case(
        "bad-gzip",
        "body that says gzip and is not",
        Rest(body=b'{"inputs": {}}', headers={"Content-Encoding": "gzip"}),
        400,
        "request body is not valid gzip",
    ),
    Case(
        "chunked",
        "chunked body, read as TF Serving reads one: `{}` names no inputs",
        Rest(body=b"5\r\n{}   \r\n0\r\n\r\n", headers={"Transfer-Encoding": "chunked"}),
        400,
        "request must have 'instances' (row format) or 'inputs' (columnar format)",
    ),
    Case(
        "expired-deadline",
        "deadline already expired (REST: `Grpc-Timeout: 0m`; gRPC: see the batch queue test)",
        Rest(body={"inputs": _inputs()}, headers={"Grpc-Timeout": "0m"}),
        504,
        "the request's deadline passed before the model ran",
    ),
    Case(
        "bad-timeout",
        "`Grpc-Timeout` header that is not a timeout",
        Rest(body={"inputs": _inputs()}, headers={"Grpc-Timeout": "soon"}),
        400,
        "Grpc-Timeout header 'soon' is not a timeout",
    ),
    Case(
        "nan-infinity",
        "NaN, Infinity, -Infinity: accepted, as TF Serving does (a NaN in gives a NaN out)",
        Rest(
            body=b'{"inputs": {"features": [[NaN, 0, 0, 0, 0, 0, 0, Infinity]], '
            b'"category": [1], "text": ["a"]}}'
        ),
        200,
        None,
        lambda: _request(
            features=np.array([[np.nan, 0, 0, 0, 0, 0, 0, np.inf]], np.float32),
            category=np.array([1]),
            text=np.array([b"a"], object),
        ),
        grpc.StatusCode.OK,
        None,
    ),
]


# -- servers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arm:
    grpc: str
    rest: str
    server: ModelServer


def _export(base: Path) -> None:
    export_model(ExportSpec("examples:multi_io", "multi", base, parity_batches=1, warmup_samples=1))
    export_model(
        ExportSpec(
            "tests.factories:affine",
            "fixed",
            base,
            inputs=[parse_input_spec("x:float32:4,3")],
            parity_batches=1,
            warmup_samples=1,
        )
    )


@pytest.fixture(scope="module")
def arms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Arm]]:
    base = tmp_path_factory.mktemp("models")
    _export(base)
    graph = ModelRegistry()
    graph.load_graph("multi", base / "multi")
    graph.load_graph("fixed", base / "fixed")
    eager = ModelRegistry()
    eager.load_eager("multi", "examples:multi_io")
    eager.load_eager("fixed", "tests.factories:affine", [parse_input_spec("x:float32:4,3")])
    options = ServerOptions(grpc_port=0, rest_port=0, max_message_bytes=LIMIT)
    asyncio = replace(options, grpc_asyncio=True, rest_port=None)
    with (
        ModelServer(graph, options) as g,
        ModelServer(eager, options) as e,
        ModelServer(graph, asyncio) as a,
    ):
        yield {
            name: Arm(f"127.0.0.1:{s.grpc_port}", f"127.0.0.1:{s.rest_port}", s)
            for name, s in (("graph", g), ("eager", e), ("graph-asyncio", a))
        }


@pytest.fixture(scope="module")
def expected() -> dict[str, np.ndarray]:
    outputs = multi_io.build()({k: np.asarray(v) for k, v in GOOD.items()})
    return {k: v.numpy() for k, v in outputs.items()}


def _http_raw(address: str, rest: Rest) -> HttpReply:
    """The answer to `rest` sent with exactly its headers, on a connection of its own."""
    connection = HttpConnection(address)
    try:
        return connection.request(rest.method, rest.path, rest.data(), rest.headers)
    finally:
        connection.close()


def _http(address: str, rest: Rest) -> tuple[int, dict[str, Any], HttpReply]:
    reply = _http_raw(address, rest)
    return reply.status, reply.json(), reply


def _assert_good_rest(address: str, expected: dict[str, np.ndarray]) -> None:
    status, body, _ = _http(address, Rest(body={"inputs": _inputs()}))
    assert status == 200, body
    _assert_outputs({k: np.asarray(v) for k, v in body["outputs"].items()}, expected)


def _assert_good_grpc(grpc_client: GrpcClient, expected: dict[str, np.ndarray]) -> None:
    _assert_outputs(client.predict_outputs(grpc_client.predict(_request())), expected)


def _assert_outputs(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    np.testing.assert_allclose(got["score"].astype(np.float32), expected["score"], atol=1e-5)
    np.testing.assert_array_equal(got["bucket"], expected["bucket"])
    labels = [v if isinstance(v, str) else v.decode() for v in got["label"].tolist()]
    assert labels == [v.decode() for v in expected["label"].tolist()]


# -- the table -----------------------------------------------------------------------------------


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("case", [c for c in CASES if c.rest], ids=lambda c: c.id)
def test_rest(arms: dict[str, Arm], expected: dict[str, np.ndarray], arm: str, case: Case) -> None:
    assert case.rest is not None
    address = arms[arm].rest
    status, body, reply = _http(address, case.rest)
    assert status == case.http, body
    assert reply.headers.get("content-type") == "application/json"
    if case.rest_message is None:
        assert "error" not in body
    else:
        assert case.rest_message in body["error"], body["error"]
    _assert_good_rest(address, expected)


@pytest.mark.parametrize("arm", GRPC_ARMS)
@pytest.mark.parametrize("case", [c for c in CASES if c.grpc], ids=lambda c: c.id)
def test_grpc(arms: dict[str, Arm], expected: dict[str, np.ndarray], arm: str, case: Case) -> None:
    assert case.grpc is not None
    with GrpcClient.connect(arms[arm].grpc) as stub:
        request = case.grpc()
        compression = grpc.Compression.Gzip if case.grpc_gzip else None
        call = stub.raw("Predict") if isinstance(request, bytes) else stub.predict
        if case.code == grpc.StatusCode.OK:
            response = call(request, timeout=30)
            assert response.outputs
        else:
            with pytest.raises(grpc.RpcError) as info:
                call(request, timeout=30, compression=compression)
            assert info.value.code() == case.code
            assert case.grpc_message is not None
            assert case.grpc_message in info.value.details(), info.value.details()
        _assert_good_grpc(stub, expected)


@pytest.mark.parametrize("arm", ARMS)
def test_nan_and_infinity_flow_through_as_tf_serving_lets_them(
    arms: dict[str, Arm], arm: str
) -> None:
    nan_case = next(c for c in CASES if c.id == "nan-infinity")
    assert nan_case.rest is not None
    reply = _http_raw(arms[arm].rest, nan_case.rest)
    raw = reply.body
    assert reply.status == 200
    assert np.isnan(json.loads(raw)["outputs"]["score"][0])  # NaN in the features: NaN out
    assert b"NaN" in raw  # written as TF Serving writes it, a bare NaN


PAST_FLOAT32 = np.array([[1e39, -1e39, 0, 0, 0, 0, 0, 0]] * 2)  # finite in JSON, past float32's


@pytest.mark.parametrize("arm", ARMS)
def test_a_number_past_float32s_range_is_infinity_as_tf_serving_reads_it(
    arms: dict[str, Arm], expected: dict[str, np.ndarray], arm: str
) -> None:
    """TF Serving casts the double it reads to float32 (json_tensor.cc, GetFloat()): 1e39 is
    inf there, and here by default, so REST answers what gRPC answers with inf in its place."""
    body = {"inputs": _inputs(features=PAST_FLOAT32.tolist())}
    status, answer, _ = _http(arms[arm].rest, Rest(body=body))
    assert status == 200, answer
    infinite = PAST_FLOAT32.copy()
    infinite[:, :2] = [np.inf, -np.inf]
    with GrpcClient.connect(arms[arm].grpc) as stub:
        want = client.predict_outputs(stub.predict(_request(features=infinite.astype(np.float32))))
    np.testing.assert_array_equal(np.asarray(answer["outputs"]["score"], np.float32),
                                  want["score"])  # fmt: skip
    assert answer["outputs"]["bucket"] == want["bucket"].tolist()
    _assert_good_rest(arms[arm].rest, expected)


@pytest.mark.parametrize("strict", [False, True])
def test_a_number_past_doubles_range_is_refused_as_tf_servings_parser_refuses_it(
    arms: dict[str, Arm], expected: dict[str, np.ndarray], strict: bool
) -> None:
    """rapidjson, TF Serving's JSON parser, cannot hold 1e400 in a double and refuses the body
    (kParseErrorNumberTooBig); so does graphserve, in its words, strict numbers or not."""
    body = b'{"inputs": {"features": [[1e400, 0, 0, 0, 0, 0, 0, 0]], "category": [1], ' \
        b'"text": ["a"]}}'  # fmt: skip
    registry = arms["graph"].server.registry
    options = ServerOptions(grpc_port=0, rest_port=0, strict_json_numbers=strict)
    with ModelServer(registry, options) as server:
        address = f"127.0.0.1:{server.rest_port}"
        status, answer, _ = _http(address, Rest(body=body))
        assert status == 400
        assert answer["error"] == (
            "JSON Parse error: Number too big to be stored in double: 1e400 is past float64's range"
        )
        _assert_good_rest(address, expected)


def test_strict_json_numbers_refuses_a_number_past_float32s_range(
    arms: dict[str, Arm], expected: dict[str, np.ndarray]
) -> None:
    """ServerOptions(strict_json_numbers=True), `serve --strict-json-numbers`: the finite number
    TF Serving would read as inf is refused with 400, naming the input, the range and the
    option; a body within the range is served as before, on the same server."""
    registry = arms["graph"].server.registry
    options = ServerOptions(grpc_port=0, rest_port=0, strict_json_numbers=True)
    with ModelServer(registry, options) as server:
        address = f"127.0.0.1:{server.rest_port}"
        rows = {"instances": [{"features": [3.5e38] * 8, "category": 1, "text": "a"}]}
        for body in ({"inputs": _inputs(features=PAST_FLOAT32.tolist())}, rows):
            status, answer, reply = _http(address, Rest(body=body))
            assert status == 400
            assert reply.headers.get("content-type") == "application/json"
            assert answer["error"] == (
                "input 'features': values out of range for float32 [-3.4028234663852886e+38, "
                "3.4028234663852886e+38] (--strict-json-numbers; TF Serving reads such a number "
                "as ±inf)"
            )
        _assert_good_rest(address, expected)


@pytest.mark.parametrize("arm", ARMS)
def test_a_bad_request_leaves_its_keep_alive_connection_usable(
    arms: dict[str, Arm], expected: dict[str, np.ndarray], arm: str
) -> None:
    """A 400 answers the request, not the connection: the client's next request on the same
    connection is served. A body the server did not read (413) ends the connection, said so."""
    connection = http.client.HTTPConnection(arms[arm].rest, timeout=30)
    connection.request("POST", "/v1/models/multi:predict", b"{not json")
    bad = connection.getresponse()
    assert bad.status == 400 and bad.getheader("Connection") != "close"
    bad.read()
    connection.request("POST", "/v1/models/multi:predict", json.dumps({"inputs": _inputs()}))
    good = connection.getresponse()
    assert good.status == 200
    _assert_outputs(
        {k: np.asarray(v) for k, v in json.loads(good.read())["outputs"].items()}, expected
    )
    connection.request("POST", "/v1/models/multi:predict", b" " * (LIMIT + 1))
    too_big = connection.getresponse()
    assert too_big.status == 413 and too_big.getheader("Connection") == "close"
    connection.close()


def test_gzip_bodies_within_the_limit_are_served(
    arms: dict[str, Arm], expected: dict[str, np.ndarray]
) -> None:
    body = gzip.compress(json.dumps({"inputs": _inputs()}).encode())
    for arm in ARMS:
        status, answer, _ = _http(
            arms[arm].rest, Rest(body=body, headers={"Content-Encoding": "gzip"})
        )
        assert status == 200, answer
        _assert_outputs({k: np.asarray(v) for k, v in answer["outputs"].items()}, expected)


def test_deep_nesting_limit_is_an_option(tmp_path: Path) -> None:
    """--max-json-depth moves the limit; the message names the option."""
    base = tmp_path / "models"
    export_model(ExportSpec("examples:multi_io", "multi", base, parity_batches=1, warmup_samples=1))
    registry = ModelRegistry()
    registry.load_graph("multi", base / "multi")
    options = ServerOptions(grpc_port=0, rest_port=0, max_json_depth=4)
    with ModelServer(registry, options) as server:
        address = f"127.0.0.1:{server.rest_port}"
        row = {"features": [0.0] * 8, "category": 1, "text": "a"}  # depth 4: allowed
        status, _, _ = _http(address, Rest(body={"instances": [row]}))
        assert status == 200
        status, body, _ = _http(address, Rest(body={"instances": [[row]]}))
        assert status == 400
        assert (
            "nests JSON arrays and objects 5 deep; the limit is 4 (--max-json-depth)"
            in (body["error"])
        )


def test_readme_lists_every_case() -> None:
    readme = (Path(__file__).parent.parent / "docs" / "reliability.md").read_text()
    missing = [c.what for c in CASES if c.what not in readme]
    assert missing == []


# -- deadlines in the batch queue ----------------------------------------------------------------


@pytest.fixture(scope="module", params=["threads", "asyncio"])
def batching(
    arms: dict[str, Arm], request: pytest.FixtureRequest
) -> Iterator[tuple[Arm, BatchingRunner]]:
    """The graph model behind a batching runner whose batches wait a second for company, on
    each gRPC front end."""
    source = arms["graph"].server.registry.get("multi")
    runner = BatchingRunner(
        source.runner,
        BatchingParameters(max_batch_size=64, batch_timeout_micros=1_000_000, num_batch_threads=1),
    )
    registry = ModelRegistry()
    registry.add(Servable("multi", source.version, runner))
    options = ServerOptions(grpc_port=0, rest_port=0, grpc_asyncio=request.param == "asyncio")
    with ModelServer(registry, options) as server:
        yield Arm(f"127.0.0.1:{server.grpc_port}", f"127.0.0.1:{server.rest_port}", server), runner
    runner.close()


def test_a_deadline_that_passes_in_the_batch_queue_is_not_run(
    batching: tuple[Arm, BatchingRunner], expected: dict[str, np.ndarray]
) -> None:
    """The request waits for its batch past its deadline: the client hears DEADLINE_EXCEEDED
    (gRPC) or 504 (REST), and the model never runs it."""
    arm, runner = batching
    before = runner.stats
    with GrpcClient.connect(arm.grpc) as stub:
        with pytest.raises(grpc.RpcError) as info:
            stub.predict(_request(), timeout=0.2)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        status, body, _ = _http(
            arm.rest, Rest(body={"inputs": _inputs()}, headers={"Grpc-Timeout": "200m"})
        )
        assert status == 504
        assert "the request's deadline passed while it waited to be batched" in body["error"]
        _wait_for(lambda: runner.stats.expired == before.expired + 2)
        assert runner.stats.batches == before.batches  # neither ran
        _assert_good_grpc(stub, expected)  # no deadline: waits its second, then answers
    _assert_good_rest(arm.rest, expected)
    assert runner.stats.batches == before.batches + 2


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_past_max_concurrent_rpcs_a_call_is_refused_at_once(
    batching: tuple[Arm, BatchingRunner], expected: dict[str, np.ndarray]
) -> None:
    """--max-concurrent-rpcs bounds gRPC's queue: one call waits for its batch, the next is
    turned away with RESOURCE_EXHAUSTED instead of queueing; both servers' front end is one."""
    arm, runner = batching
    registry = ModelRegistry()
    registry.add(Servable("multi", 1, runner))
    options = replace(
        arm.server.options, grpc_port=0, rest_port=0, grpc_workers=2, max_concurrent_rpcs=1
    )
    with (
        ModelServer(registry, options) as server,
        GrpcClient.connect(f"127.0.0.1:{server.grpc_port}") as stub,
    ):
        waiting = stub.method("Predict").future(_request(), timeout=30)
        _wait_for(lambda: runner.stats.queued_rows > 0)
        with pytest.raises(grpc.RpcError) as info:
            stub.predict(_request())
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "Concurrent RPC limit exceeded" in info.value.details()
        first = waiting.result()
        _assert_outputs(client.predict_outputs(first), expected)
        _assert_good_grpc(stub, expected)
