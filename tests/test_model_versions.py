"""Models and versions as TF Serving manages them: config files, policies, labels, polling,
availability-preserving swaps under traffic, and broken versions beside good ones."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from typer.testing import CliRunner

from exporter import ExportSpec, export_model, parse_input_spec
from graphserve.cli import app
from serving import ModelRegistry, ModelServer, ServerOptions
from serving.codec import array_from_proto, array_to_proto
from serving.config import ModelConfig, ModelConfigError, VersionPolicy, load_model_config_file
from serving.manager import ModelManager

X = np.array([[1.0, 1.0, 1.0]], dtype=np.float32)


def _export(base: Path, name: str = "affine", version: int | None = None) -> Path:
    spec = ExportSpec(
        source="tests.factories:affine",
        name=name,
        base_path=base,
        version=version,
        inputs=[parse_input_spec("x:float32:-1,3")],
        parity_batches=1,
        warmup_samples=1,
    )
    return export_model(spec).path


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def serve() -> Iterator[Callable[[ModelManager], ModelServer]]:
    started: list[tuple[ModelManager, ModelServer]] = []

    def start(manager: ModelManager) -> ModelServer:
        server = ModelServer(
            manager.registry, ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
        ).start()
        started.append((manager, server))
        return server

    yield start
    for manager, server in started:
        manager.stop()
        server.stop(grace=1.0)


def _predict(server: ModelServer, name: str, **spec: Any) -> predict_pb2.PredictResponse:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    if "version" in spec:
        request.model_spec.version.value = spec["version"]
    if "label" in spec:
        request.model_spec.version_label = spec["label"]
    request.inputs["x"].CopyFrom(array_to_proto(X))
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        return stub.Predict(request, timeout=30)


def _status(server: ModelServer, name: str) -> dict[int, tuple[str, str]]:
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = name
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        response = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(request)
    state = get_model_status_pb2.ModelVersionStatus.State.Name
    return {
        s.version: (state(s.state), s.status.error_message) for s in response.model_version_status
    }


def _http(server: ModelServer, path: str, body: Any = None) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{server.rest_port}{path}"
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


CONFIG = """
# two models, as TF Serving reads them
model_config_list {
  config {
    name: "affine"
    base_path: "models/affine"
    model_platform: "tensorflow"
    model_version_policy { all {} }
    version_labels { key: "stable" value: 1 }
    version_labels { key: "canary" value: 2 }
  }
  config {
    name: "other"
    base_path: "models/other"
    model_version_policy { specific { versions: 1 } }
  }
}
"""


def test_config_file_policies_and_labels(tmp_path: Path, serve) -> None:
    for version in (1, 2):
        _export(tmp_path / "models", version=version)
    _export(tmp_path / "models", name="other", version=1)
    _export(tmp_path / "models", name="other", version=2)  # not aspired: specific {1}
    (tmp_path / "models.config").write_text(CONFIG)
    models = load_model_config_file(tmp_path / "models.config")
    assert models[0].policy == VersionPolicy("all")
    assert models[0].labels == {"stable": 1, "canary": 2}
    assert models[0].base_path == tmp_path / "models" / "affine"  # relative to the file

    server = serve(ModelManager(ModelRegistry(), models).start())
    assert _status(server, "affine") == {1: ("AVAILABLE", ""), 2: ("AVAILABLE", "")}
    assert _status(server, "other") == {1: ("AVAILABLE", "")}
    assert _predict(server, "affine", label="canary").model_spec.version.value == 2
    assert _predict(server, "affine", label="stable").model_spec.version.value == 1
    assert _predict(server, "affine").model_spec.version.value == 2  # newest by default

    status, body = _http(
        server, "/v1/models/affine/labels/stable:predict", {"instances": X.tolist()}
    )
    assert status == 200
    np.testing.assert_allclose(body["predictions"][0]["scores"], [3.75, 0.0])
    status, body = _http(server, "/v1/models/affine/labels/stable")
    assert status == 200 and body["model_version_status"][0]["version"] == "1"
    status, body = _http(
        server, "/v1/models/affine/labels/nope:predict", {"instances": [[1, 1, 1]]}
    )
    assert status == 400 and "Unrecognized servable version label: nope" in body["error"]
    with pytest.raises(grpc.RpcError) as err:
        _predict(server, "other", version=2)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model_config_list { config { name: 'a' base_pth: '/x' } }", "base_pth"),
        ("model_config_list { config { name: 'a' } }", "needs a name and a base_path"),
        ("model_config_list { }", "lists no models"),
        (
            "model_config_list { config { name: 'a' base_path: '/x' model_platform: 'onnx' } }",
            "model_platform 'onnx'",
        ),
    ],
)
def test_bad_config_files_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.config"
    path.write_text(text)
    with pytest.raises(ModelConfigError, match=message):
        load_model_config_file(path)
    result = CliRunner().invoke(app, ["serve", "graph", "--model-config-file", str(path)])
    assert result.exit_code == 2 and message in result.stderr


def test_new_version_swaps_in_under_traffic_with_no_failed_request(tmp_path: Path, serve) -> None:
    base = tmp_path / "models"
    _export(base)
    manager = ModelManager(ModelRegistry(), [ModelConfig("affine", base / "affine")]).start()
    server = serve(manager)
    manager.poll(0.1)
    seen: dict[int, int] = {}
    failures: list[str] = []
    stop = threading.Event()

    def drive() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "affine"
            request.inputs["x"].CopyFrom(array_to_proto(X))
            while not stop.is_set():
                try:
                    response = stub.Predict(request, timeout=30)
                    version = response.model_spec.version.value
                    seen[version] = seen.get(version, 0) + 1
                    scores = array_from_proto(response.outputs["scores"])
                    np.testing.assert_allclose(scores, [[3.75, 0.0]])
                except Exception as exc:  # any failure is a test failure, counted below
                    failures.append(repr(exc))

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        _wait_for(lambda: seen.get(1, 0) > 20, "traffic on version 1")
        _export(base)  # version 2 appears atomically while requests flow
        _wait_for(lambda: seen.get(2, 0) > 20, "traffic on version 2")
    finally:
        stop.set()
        driver.join()
    assert failures == []
    assert _status(server, "affine") == {1: ("END", ""), 2: ("AVAILABLE", "")}


def test_broken_version_beside_a_good_one(tmp_path: Path, serve) -> None:
    base = tmp_path / "models"
    _export(base, version=1)
    broken = base / "affine" / "2"
    broken.mkdir()
    (broken / "saved_model.pb").write_bytes(b"not a SavedModel")
    manager = ModelManager(ModelRegistry(), [ModelConfig("affine", base / "affine")]).start()
    server = serve(manager)
    status = _status(server, "affine")
    assert status[1] == ("AVAILABLE", "")  # latest policy wanted 2; 1 keeps serving
    assert status[2][0] == "END" and status[2][1]  # with the load error
    assert _predict(server, "affine").model_spec.version.value == 1
    shutil.rmtree(broken)
    _export(base, version=2)  # a good version 2 replaces the broken one
    manager.sync()
    assert _status(server, "affine") == {1: ("END", ""), 2: ("AVAILABLE", "")}


def test_a_deleted_version_is_unloaded_and_the_others_keep_serving(tmp_path: Path, serve) -> None:
    base = tmp_path / "models"
    for version in (1, 2):
        _export(base, version=version)
    config = ModelConfig("affine", base / "affine", VersionPolicy("all"))
    manager = ModelManager(ModelRegistry(), [config]).start()
    server = serve(manager)
    shutil.rmtree(base / "affine" / "2")
    manager.sync()
    assert _status(server, "affine") == {1: ("AVAILABLE", ""), 2: ("END", "")}
    assert _predict(server, "affine").model_spec.version.value == 1
    with pytest.raises(grpc.RpcError) as err:
        _predict(server, "affine", version=2)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
