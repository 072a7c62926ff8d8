"""The Session runner: TF 1.x SavedModels served as TF Serving serves them, over REST and gRPC.

The models are rebuilt in tmp_path the way TF Serving's generators wrote its test models
(tests/tf1_models.py): half_plus_two (five signatures, an asset, a main op or legacy init op),
half_plus_three as TF 1.0 wrote it, and the stateful counter with reference variables. Each is
served from a zero-padded version directory (`00000123`), as TF Serving's test data is laid out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

from graphserve.core import client
from graphserve.core.client import GrpcClient, RestClient
from graphserve.core.errors import InvalidInput, Unavailable, UnsafeOpsError
from graphserve.serving import ModelRegistry, ModelServer, ServerOptions
from graphserve.serving.loaders import load_runner
from graphserve.serving.runners import GraphRunner
from graphserve.serving.session_runner import SessionRunner
from tests.savedmodels import write_with_read_file
from tests.tf1_models import (
    write_tf1_counter,
    write_tf1_half_plus_three,
    write_tf1_half_plus_two,
)

VERSION = "00000123"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tf1")
    write_tf1_half_plus_two(root / "half_plus_two" / VERSION)
    write_tf1_half_plus_three(root / "half_plus_three" / VERSION)
    return root


@pytest.fixture(scope="module")
def server(base: Path) -> Iterator[ModelServer]:
    registry = ModelRegistry()
    registry.load_graph("half_plus_two", base / "half_plus_two")
    registry.load_graph("half_plus_three", base / "half_plus_three")
    with ModelServer(registry, ServerOptions("127.0.0.1", 0, 0)) as running:
        yield running


@pytest.fixture
def counter_server(tmp_path: Path) -> Iterator[ModelServer]:
    """A fresh counter per test: its state is the point."""
    write_tf1_counter(tmp_path / "counter" / VERSION)
    registry = ModelRegistry()
    registry.load_graph("counter", tmp_path / "counter")
    with ModelServer(registry, ServerOptions("127.0.0.1", 0, 0)) as running:
        yield running


def _post(server: ModelServer, path: str, body: Any) -> tuple[int, Any]:
    with RestClient(f"127.0.0.1:{server.rest_port}") as rest:
        reply = rest.post(path, body)
    return reply.status, reply.json()


def _metadata(server: ModelServer, model: str) -> Any:
    with RestClient(f"127.0.0.1:{server.rest_port}") as rest:
        reply = rest.metadata(model)
    assert reply.status == 200, reply.text
    return reply.json()


def _grpc(server: ModelServer) -> GrpcClient:
    return GrpcClient.connect(f"127.0.0.1:{server.grpc_port}")


# -- 8. TF 1.x SavedModels: the counter (reference variables, no-input signatures) ------------


def test_counter_sequence_over_grpc(counter_server: ModelServer) -> None:
    """TF Serving's predict_impl_test: get 0, incr 1, reset 0, incr 1, incr_by(3) 4, each a
    float32 scalar of shape [] although the variable's outputs are float_ref."""
    stub = _grpc(counter_server)
    calls: list[tuple[str, dict[str, np.ndarray], tuple[str, ...]]] = [
        ("get_counter", {}, ()),
        ("incr_counter", {}, ()),
        ("reset_counter", {}, ()),
        ("incr_counter", {}, ("output",)),
        ("incr_counter_by", {"delta": np.array(3.0, np.float32)}, ()),
    ]
    for (signature, inputs, output_filter), value in zip(
        calls, [0.0, 1.0, 0.0, 1.0, 4.0], strict=True
    ):
        request = client.predict_request(
            "counter", inputs, signature_name=signature, output_filter=output_filter
        )
        response = stub.predict(request)
        assert list(response.outputs) == ["output"]
        # What TF Serving's test expects, field for field: a float scalar of shape [].
        expected = tensor_pb2.TensorProto(
            dtype=types_pb2.DT_FLOAT,
            tensor_shape=tensor_shape_pb2.TensorShapeProto(),
            float_val=[value],
        )
        assert response.outputs["output"] == expected, signature
        assert response.model_spec.signature_name == signature
        assert response.model_spec.version.value == 123


def test_counter_over_rest_and_its_metadata(counter_server: ModelServer) -> None:
    """No-input signatures over REST (an empty `inputs` object), and metadata that reports the
    SignatureDefs as TF Serving does: DT_FLOAT_REF outputs, `delta` of unknown rank."""
    for signature, expected in [("incr_counter", 1.0), ("incr_counter", 2.0), ("get_counter", 2.0)]:
        status, got = _post(
            counter_server,
            "/v1/models/counter:predict",
            {"signature_name": signature, "inputs": {}},
        )
        assert status == 200, got
        assert got == {"outputs": expected}
    status, got = _post(
        counter_server,
        "/v1/models/counter:predict",
        {"signature_name": "incr_counter_by", "inputs": {"delta": 3.0}},
    )
    assert (status, got) == (200, {"outputs": 5.0})

    metadata = _metadata(counter_server, "counter")
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    assert sorted(signatures) == ["get_counter", "incr_counter", "incr_counter_by", "reset_counter"]
    assert signatures["get_counter"]["inputs"] == {}
    assert signatures["reset_counter"]["outputs"]["output"]["dtype"] == "DT_FLOAT_REF"
    delta = signatures["incr_counter_by"]["inputs"]["delta"]
    assert delta["dtype"] == "DT_FLOAT" and delta["tensor_shape"]["unknown_rank"] is True

    response = _grpc(counter_server).metadata(client.metadata_request("counter"))
    sigmap = client.signature_defs(response)
    output = sigmap.signature_def["incr_counter"].outputs["output"]
    assert output.dtype == types_pb2.DT_FLOAT_REF and output.name == "incr_counter_op/AssignAdd:0"


def test_the_counter_loads_only_in_a_session(tmp_path: Path) -> None:
    path = write_tf1_counter(tmp_path / "counter" / VERSION)
    with pytest.raises(Exception, match="reference type float_ref"):
        GraphRunner(path)
    runner = load_runner(path)
    assert isinstance(runner, SessionRunner)
    assert (runner.kind, runner.execution) == ("graph", "session")
    assert runner.signatures["incr_counter_by"].inputs["delta"].shape is None  # not a scalar
    assert runner.signatures["get_counter"].outputs["output"].dtype == "float32"
    runner.close()


# -- 8. TF 1.x SavedModels: half_plus_three as TF 1.0 wrote it ---------------------------------


def test_half_plus_three_loads_and_predicts(server: ModelServer) -> None:
    status, got = _post(server, "/v1/models/half_plus_three:predict", {"instances": [1.0, 2.0]})
    assert (status, got) == (200, {"predictions": [3.5, 4.0]})
    status, got = _post(
        server,
        "/v1/models/half_plus_three:regress",
        {"signature_name": "tensorflow/serving/regress", "examples": [{"x": 2.0}, {"x": 4.0}]},
    )
    assert (status, got) == (200, {"results": [4.0, 5.0]})

    stub = _grpc(server)
    x = np.array([[1.0], [3.0]], np.float32)
    response = stub.predict(client.predict_request("half_plus_three", {"x": x}))
    np.testing.assert_array_equal(client.predict_outputs(response)["y"], [[3.5], [4.5]])
    assert response.model_spec.version.value == 123
    regress = client.regress_request(
        "half_plus_three", [client.example(x=0.0)], signature_name="tensorflow/serving/regress"
    )
    result = stub.regress(regress)
    assert [r.value for r in result.result.regressions] == [3.0]


def test_half_plus_three_metadata_keeps_tensor_infos_without_shape(server: ModelServer) -> None:
    metadata = _metadata(server, "half_plus_three")
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    x = signatures["serving_default"]["inputs"]["x"]
    assert x == {"dtype": "DT_FLOAT", "name": "x:0"}  # as in the file: no tensor_shape


def test_half_plus_three_fails_as_tf2_function_and_loads_in_a_session(base: Path) -> None:
    path = base / "half_plus_three" / VERSION
    with pytest.raises(ValueError, match="Shape"):
        GraphRunner(path)
    runner = load_runner(path)
    assert runner.execution == "session"
    assert runner.signatures["serving_default"].inputs["x"].shape is None  # unknown, not []


# -- half_plus_two on the Session path: Classify and Regress, main op and legacy init op -------


@pytest.mark.parametrize(
    ("signature", "examples", "expected"),
    [
        ("regress_x_to_y", [{"x": 1.0}, {"x": 2.0}], [2.5, 3.0]),
        ("regress_x_to_y2", [{"x": 1.0}, {"x": 2.0}], [3.5, 4.0]),
    ],
)
def test_half_plus_two_regress_over_rest(
    server: ModelServer, signature: str, examples: list[dict[str, float]], expected: list[float]
) -> None:
    status, got = _post(
        server,
        "/v1/models/half_plus_two/versions/123:regress",
        {"signature_name": signature, "examples": examples},
    )
    assert (status, got) == (200, {"results": expected})


def test_half_plus_two_classify_over_rest(server: ModelServer) -> None:
    status, got = _post(
        server,
        "/v1/models/half_plus_two:classify",
        {"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}, {"x": -2.0}]},
    )
    assert (status, got) == (200, {"results": [[["", 2.5]], [["", 1.0]]]})


def test_half_plus_two_classify_regress_and_predict_over_grpc(server: ModelServer) -> None:
    stub = _grpc(server)
    examples = [client.example(x=10.0), client.example(x=0.0, x2=5.0)]
    classify = client.classify_request("half_plus_two", examples, signature_name="classify_x_to_y")
    result = stub.classify(classify)
    assert [[c.score for c in row.classes] for row in result.result.classifications] == [
        [7.0],
        [2.0],
    ]
    assert result.model_spec.version.value == 123

    regress = client.regress_request(
        "half_plus_two",
        [client.example(), client.example(x=6.0)],  # the first takes x from the context
        signature_name="regress_x_to_y",
        context=client.example(x=4.0),
    )
    result = stub.regress(regress)
    assert [r.value for r in result.result.regressions] == [4.0, 5.0]

    # regress_x2_to_y3 feeds x2, a parsed-example identity, directly (y3 = 0.5 * x2 + 3).
    request = client.predict_request(
        "half_plus_two",
        {"inputs": np.array([[2.0]], np.float32)},
        signature_name="regress_x2_to_y3",
    )
    response = stub.predict(request)
    np.testing.assert_array_equal(client.predict_outputs(response)["outputs"], [[4.0]])


def test_half_plus_two_multi_inference_over_grpc(server: ModelServer) -> None:
    request = client.multi_inference_request(
        [
            ("half_plus_two", "regress_x_to_y", "tensorflow/serving/regress"),
            ("half_plus_two", "classify_x_to_y", "tensorflow/serving/classify"),
        ],
        [client.example(x=1.0), client.example(x=2.0)],
    )
    response = _grpc(server).multi_inference(request)
    regression, classification = response.results
    assert [r.value for r in regression.regression_result.regressions] == [2.5, 3.0]
    scores = [
        [c.score for c in row.classes]
        for row in classification.classification_result.classifications
    ]
    assert scores == [[2.5], [3.0]]
    assert regression.model_spec.version.value == 123


def test_the_init_op_ran_at_load_in_both_variants(tmp_path: Path) -> None:
    """The asset is copied into assets/, and the init op (main_op, or legacy_init_op as TF 1.1
    recorded it) ran at load: it is what gives `filename_tensor` a value."""
    for init in ("main_op", "legacy_init_op"):
        path = write_tf1_half_plus_two(tmp_path / init / "1", init=init)  # type: ignore[arg-type]
        assert (path / "assets" / "foo.txt").read_text() == "asset-file-contents"
        runner = SessionRunner(path)
        assert runner._session.run("filename_tensor:0") == b"foo.txt"
        x = np.array([[1.0]], np.float32)
        np.testing.assert_array_equal(runner.run("serving_default", {"x": x})["y"], [[2.5]])
        runner.close()


# -- 1. Shapes: the graph decides, not the signature --------------------------------------------


def test_a_vector_to_an_input_declared_minus_one_by_one(server: ModelServer) -> None:
    """half_plus_two's x is declared [-1, 1]; TF Serving feeds [3] and [1] as they are."""
    status, got = _post(server, "/v1/models/half_plus_two:predict", {"instances": [2.0, 3.0, 4.0]})
    assert (status, got) == (200, {"predictions": [3.0, 3.5, 4.0]})

    request = client.predict_request("half_plus_two", {"x": np.array([2.0], np.float32)})
    y = client.predict_outputs(_grpc(server).predict(request))["y"]
    assert y.shape == (1,) and float(y[0]) == 3.0


# -- the runner itself ----------------------------------------------------------------------------


def test_feeds_are_checked_and_graph_errors_are_the_clients(base: Path) -> None:
    runner = SessionRunner(base / "half_plus_two" / VERSION)
    with pytest.raises(InvalidInput, match="unknown input 'z'"):
        runner.run("serving_default", {"z": np.zeros((1, 1), np.float32)})
    with pytest.raises(InvalidInput, match=r"Type mismatch: actual int64 vs\. expect float"):
        runner.run("serving_default", {"x": np.zeros((1, 1), np.int64)})
    with pytest.raises(InvalidInput, match="Could not parse example input"):
        runner.run("regress_x_to_y", {"inputs": np.array([b"not an example"], dtype=object)})
    runner.close()
    with pytest.raises(Unavailable, match="its Session is closed"):
        runner.run("serving_default", {"x": np.zeros((1, 1), np.float32)})


def test_concurrent_requests_get_their_own_answers(base: Path) -> None:
    runner = SessionRunner(base / "half_plus_two" / VERSION)
    failures: list[str] = []

    def client(seed: int) -> None:
        for i in range(50):
            x = np.full((i % 5 + 1, 1), float(seed * 100 + i), np.float32)
            y = runner.run("serving_default", {"x": x})["y"]
            if not np.array_equal(y, x * 0.5 + 2.0):
                failures.append(f"client {seed}, call {i}: {y.ravel()} for {x.ravel()}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    runner.close()
    assert failures == []


def test_the_op_scan_applies_to_the_session_path(tmp_path: Path) -> None:
    path = write_with_read_file(tmp_path / "reads" / "1")
    with pytest.raises(UnsafeOpsError, match="ReadFile"):
        SessionRunner(path)
    with pytest.raises(UnsafeOpsError, match="ReadFile"):
        load_runner(path)
    runner = load_runner(path, allow_ops=["ReadFile"])
    assert runner.execution == "session"


def test_a_model_the_session_cannot_load_falls_back_to_functions(
    mlp_export: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import graphserve.serving.session_runner

    class Broken:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("the Session cannot load this")

    monkeypatch.setattr(graphserve.serving.session_runner, "SessionRunner", Broken)
    with caplog.at_level(logging.WARNING, logger="graphserve.runners"):
        runner = load_runner(mlp_export.version_dir)
    assert runner.execution == "function"
    assert "the Session cannot load this" in caplog.text


def test_when_both_paths_fail_the_session_error_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import graphserve.serving.session_runner

    class Broken:
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise RuntimeError("the Session cannot load this")

    monkeypatch.setattr(graphserve.serving.session_runner, "SessionRunner", Broken)
    with pytest.raises(RuntimeError, match="the Session cannot load this"):
        load_runner(write_tf1_counter(tmp_path / "counter" / "1"))  # no function path either


def test_tf2_exports_take_the_session_path_with_the_same_answers(mlp_export: Any) -> None:
    session, function = load_runner(mlp_export.version_dir), GraphRunner(mlp_export.version_dir)
    assert session.execution == "session"
    assert session.signatures.keys() == function.signatures.keys()
    for name, sig in function.signatures.items():
        assert session.signatures[name].signature_def == sig.signature_def
    (x_name,) = function.signatures["serving_default"].inputs
    x = np.random.default_rng(3).standard_normal((4, 784)).astype(np.float32)
    want = function.run("serving_default", {x_name: x})
    got = session.run("serving_default", {x_name: x})
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-6, atol=1e-6)


def test_the_runner_benchmark_times_both_paths(base: Path) -> None:
    from tools.bench.runners import compare_runners

    (b1,) = compare_runners(base / "half_plus_two" / VERSION, batch_sizes=[1], budget_s=0.2)
    assert set(b1.timings) == {"session", "function"} and b1.ratio() is not None
    assert "session p50" in b1.line()
    (only,) = compare_runners(base / "half_plus_three" / VERSION, batch_sizes=[1], budget_s=0.2)
    assert set(only.timings) == {"session"} and "Shape" in only.failed["function"]


def test_the_session_uses_the_thread_pools_the_server_was_given() -> None:
    """--tensorflow_intra_op_parallelism / --tensorflow_inter_op_parallelism set eager
    TensorFlow's pools; a Session has its own unless its config says so."""
    import subprocess
    import sys

    code = (
        "import tensorflow as tf\n"
        "tf.config.threading.set_intra_op_parallelism_threads(1)\n"
        "tf.config.threading.set_inter_op_parallelism_threads(3)\n"
        "from graphserve.serving.session_runner import _session_config\n"
        "c = _session_config()\n"
        "print(c.intra_op_parallelism_threads, c.inter_op_parallelism_threads)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split() == ["1", "3"]
