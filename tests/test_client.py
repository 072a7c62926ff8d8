"""The one client (graphserve.core.client) against both embedded servers: the same answers over
gRPC and REST, typed and raw, and the pieces a load generator shares without the send."""

from __future__ import annotations

import subprocess
import sys

import grpc
import numpy as np
import pytest

from graphserve.core import client
from graphserve.core.client import GrpcClient, RestClient, VersionStatus
from graphserve.model.examples import mlp
from tests.conftest import Servers

ARMS = ["graph", "eager"]
X = np.random.default_rng(21).standard_normal((2, 784)).astype(np.float32)


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    return mlp.build()(X).numpy()


def test_importing_it_loads_neither_grpc_numpy_nor_tensorflow() -> None:
    probe = (
        "import sys, graphserve.core.client; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'grpc', 'numpy', 'tensorflow', 'tensorflow_serving', 'locust'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "kwargs", "path"),
    [
        (("m", "predict"), {}, "/v1/models/m:predict"),
        (("m", "classify"), {"version": 3}, "/v1/models/m/versions/3:classify"),
        (("m", "regress"), {"label": "canary"}, "/v1/models/m/labels/canary:regress"),
        (("m", "metadata"), {"version": 1}, "/v1/models/m/versions/1/metadata"),
        (("m",), {}, "/v1/models/m"),
        (("a b/c", "predict"), {}, "/v1/models/a%20b%2Fc:predict"),
    ],
)
def test_rest_paths_are_tf_serving_urls(args: tuple, kwargs: dict, path: str) -> None:
    assert client.rest_path(*args, **kwargs) == path


def test_rest_path_refuses_what_tf_serving_has_no_url_for() -> None:
    with pytest.raises(ValueError, match="a version or a label, not both"):
        client.rest_path("m", "predict", version=1, label="x")
    with pytest.raises(ValueError, match="REST verb 'explain'"):
        client.rest_path("m", "explain")


def test_requests_carry_what_they_are_given() -> None:
    request = client.predict_request(
        "m", {"x": X}, signature_name="s", version=4, output_filter=["y"]
    )
    assert (request.model_spec.name, request.model_spec.signature_name) == ("m", "s")
    assert request.model_spec.version.value == 4
    assert list(request.output_filter) == ["y"]
    assert request.inputs["x"].tensor_content == X.tobytes()
    labelled = client.status_request("m", label="stable")
    assert labelled.model_spec.version_label == "stable"
    assert not labelled.model_spec.HasField("version")

    example = client.example(x=1.5, n=[1, 2], word="hi")
    features = example.features.feature
    assert list(features["x"].float_list.value) == [1.5]
    assert list(features["n"].int64_list.value) == [1, 2]
    assert list(features["word"].bytes_list.value) == [b"hi"]
    context = client.example(x=4.0)
    regress = client.regress_request("m", [example], signature_name="r", context=context)
    assert regress.input.example_list_with_context.context == context
    multi = client.multi_inference_request([("m", "r", "tensorflow/serving/regress")], [example])
    assert [t.model_spec.signature_name for t in multi.tasks] == ["r"]
    assert list(multi.input.example_list.examples) == [example]


@pytest.mark.parametrize("arm", ARMS)
def test_grpc_predict_typed_and_raw(mlp_servers: Servers, arm: str, expected: np.ndarray) -> None:
    request = client.predict_request("mlp", {"images": X})
    with GrpcClient.connect(getattr(mlp_servers, f"{arm}_grpc")) as grpc_client:
        typed = client.predict_outputs(grpc_client.predict(request))
        raw = grpc_client.raw("Predict")(request.SerializeToString(), timeout=30)
    np.testing.assert_allclose(typed["logits"], expected, atol=1e-5)
    np.testing.assert_array_equal(client.predict_outputs(raw)["logits"], typed["logits"])


@pytest.mark.parametrize("arm", ARMS)
def test_rest_predict_answers_as_grpc(mlp_servers: Servers, arm: str, expected: np.ndarray) -> None:
    with RestClient(getattr(mlp_servers, f"{arm}_rest")) as rest:
        reply = rest.predict("mlp", {"instances": X.tolist()})
        missing = rest.predict("nope", {"instances": X.tolist()})
    assert reply.status == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    np.testing.assert_allclose(np.asarray(reply.json()["predictions"]), expected, atol=1e-5)
    assert missing.status == 404
    assert "nope" in client.rest_error_text(missing.body)


@pytest.mark.parametrize("arm", ARMS)
def test_metadata_is_the_same_signature_map_over_both(mlp_servers: Servers, arm: str) -> None:
    with GrpcClient.connect(getattr(mlp_servers, f"{arm}_grpc")) as grpc_client:
        over_grpc = client.signature_defs(grpc_client.metadata(client.metadata_request("mlp")))
    with RestClient(getattr(mlp_servers, f"{arm}_rest")) as rest:
        reply = rest.metadata("mlp")
    assert reply.status == 200
    over_rest = client.signature_defs_from_json(reply.json())
    assert over_rest == over_grpc
    assert set(over_grpc.signature_def["serving_default"].inputs) == {"images"}


@pytest.mark.parametrize("arm", ARMS)
def test_status_is_the_same_over_both(mlp_servers: Servers, arm: str) -> None:
    address = getattr(mlp_servers, f"{arm}_grpc")
    with GrpcClient.connect(address) as grpc_client:
        over_grpc = client.version_statuses(grpc_client.status(client.status_request("mlp")))
    with RestClient(getattr(mlp_servers, f"{arm}_rest")) as rest:
        reply = rest.status("mlp")
    assert reply.status == 200
    assert client.version_statuses_from_json(reply.json()) == over_grpc
    assert [(s.state, s.error_code, s.error_message) for s in over_grpc] == [("AVAILABLE", 0, "")]
    assert client.model_status(address, "mlp") == over_grpc
    assert over_grpc[0].to_json() == {
        "version": over_grpc[0].version,
        "state": "AVAILABLE",
        "error_code": 0,
        "error_message": "",
    }


def test_errors_are_the_servers(mlp_servers: Servers) -> None:
    with (
        GrpcClient.connect(mlp_servers.graph_grpc) as grpc_client,
        pytest.raises(grpc.RpcError) as info,
    ):
        grpc_client.predict(client.predict_request("nope", {"images": X}))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert client.grpc_error_text(info.value).startswith("NOT_FOUND: ")
    assert client.model_status(mlp_servers.graph_grpc, "nope") == []
    with pytest.raises(ValueError, match=r"no 'metadata\.signature_def' entry"):
        client.signature_defs_from_json({"model_spec": {}})
    assert client.version_statuses_from_json({"model_version_status": []}) == []


def test_model_status_of_nothing_listening_is_empty() -> None:
    from graphserve.core.processes import free_port

    assert client.model_status(f"127.0.0.1:{free_port()}", "mlp", timeout=0.5) == []


def test_one_connection_is_kept_alive_and_reopened(mlp_servers: Servers) -> None:
    connection = client.HttpConnection(mlp_servers.graph_rest)
    rest = RestClient(mlp_servers.graph_rest, transport=connection)
    first = rest.status("mlp")
    kept = connection._sock
    # Status and body: the Date header changes when a second passes between two answers.
    assert rest.status("mlp").body == first.body and connection._sock is kept
    closing = rest.request("GET", client.rest_path("mlp"), headers={"Connection": "close"})
    assert closing.status == 200 and connection._sock is None
    again = rest.status("mlp")  # a new connection, opened on demand
    assert (again.status, again.body) == (first.status, first.body) and connection._sock is not None
    rest.close()


def test_version_status_is_a_plain_value() -> None:
    status = VersionStatus(3, "END", 5, "gone")
    assert status.to_json() == {
        "version": 3,
        "state": "END",
        "error_code": 5,
        "error_message": "gone",
    }
