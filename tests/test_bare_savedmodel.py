"""A SavedModel a user points at as it is (a Keras `model.export()` archive, no version
directory) is served by `serve graph` as version 1, and the start line says so and that TF
Serving would serve nothing there (a deviation, reported as one). Once a numeric version
directory appears, the versions are the directories, as TF Serving has them.

The archive is written by Keras itself; the server is `graphserve serve graph` in a child
process on 127.0.0.1, asked over REST and gRPC (tensorflow-serving-api's stubs)."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from graphserve.core.processes import ServerProcess
from graphserve.core.versions import bare_savedmodel, served_versions
from graphserve.serving.config import ModelConfig
from graphserve.serving.sources import FileSystemSource


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, np.ndarray]:
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    path = tmp_path_factory.mktemp("keras") / "classifier"
    model.export(str(path), verbose=False)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    return path, x, np.asarray(model(x))


def test_a_keras_export_archive_serves_as_version_1_and_says_so(
    archive: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    path, x, expected = archive
    assert bare_savedmodel(path)
    server = ServerProcess.on_free_ports(
        ["graph", "--model-base-path", str(path)], "classifier", tmp_path / "server.log"
    )
    server.start()
    try:
        body = json.dumps({"instances": x.tolist()}).encode()
        request = urllib.request.Request(
            f"http://{server.rest_address}/v1/models/classifier:predict", data=body
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
            got = np.asarray(json.loads(response.read())["predictions"])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        with grpc.insecure_channel(server.grpc_address) as channel:
            status = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
                get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "classifier"}),
                timeout=30,
            )
        versions = [(v.version, v.state) for v in status.model_version_status]
        assert versions == [(1, get_model_status_pb2.ModelVersionStatus.AVAILABLE)]
    finally:
        server.stop()
    log = " ".join(server.log_path.read_text().split())
    assert (
        f"{path} is a SavedModel with no version directory: serving it as version 1 of "
        "'classifier'. TF Serving serves only numeric version directories and would serve "
        f"nothing here (a deviation from TF Serving): for TF Serving, move it to {path / '1'}"
    ) in log


def test_a_version_directory_makes_the_versions_the_directories(
    archive: tuple[Path, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    base = tmp_path / "classifier"
    shutil.copytree(archive[0], base)
    source = FileSystemSource([ModelConfig("classifier", base)], load=lambda p: None)  # type: ignore[arg-type,return-value]
    assert source.versions("classifier") == [1]
    assert source.where("classifier", 1) == base
    shutil.copytree(archive[0], base / "7")
    assert not bare_savedmodel(base)
    assert source.versions("classifier") == [7]
    assert source.where("classifier", 7) == base / "7"
    assert source.where("classifier", 1) == base / "1"  # not there: where it would be
    assert served_versions(base) == {7: base / "7"}
    assert served_versions(tmp_path / "nothing") == {}
