"""Traffic files (graphserve.model.traffic, `graphserve traffic show`): a real server's request
log and a real export's warm-up file read back and counted; files that cannot be traffic refused
with the reason, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    predict_pb2,
    prediction_log_pb2,
    prediction_service_pb2_grpc,
)
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.model.warmup import WARMUP_FILE, read_warmup_records
from graphserve.serving import ServeConfig, ServerOptions, build_server
from graphserve.serving.config import ModelConfig
from tests.conftest import MlpExport


def _show(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["traffic", "show", "--json", str(path)])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def request_log(mlp_export: MlpExport, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The graph server's log of 2 gRPC requests of 3 rows and 3 REST requests of 1 row."""
    import urllib.request

    logs = tmp_path_factory.mktemp("logs")
    text = f'log_collector_config {{ filename_prefix: "{logs / "mlp"}" }} '
    text += "sampling_config { sampling_rate: 1 }"
    model = ModelConfig("mlp", mlp_export.model_dir, logging=text)
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with build_server(ServeConfig(models=[model], options=options)) as server:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        )
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "mlp"
        request.inputs["images"].CopyFrom(tf.make_tensor_proto(np.zeros((3, 784), np.float32)))
        for _ in range(2):
            stub.Predict(request, timeout=30)
        body = json.dumps({"instances": np.ones((1, 784)).tolist()}).encode()
        for _ in range(3):
            url = f"http://127.0.0.1:{server.rest_port}/v1/models/mlp:predict"
            with urllib.request.urlopen(urllib.request.Request(url, body), timeout=30) as answer:
                assert answer.status == 200
        assert server.plane.request_logs is not None and server.plane.request_logs.flush()
    (path,) = logs.glob("mlp-*.tfrecord")
    return path


def test_a_request_log_is_counted_by_model_signature_kind_and_shape(request_log: Path) -> None:
    code, output = _show(request_log)
    assert code == 0, output
    counts = json.loads(output)
    assert counts["records"] == 5
    assert counts["by_model"] == {"mlp": 5}
    assert counts["by_signature"] == {"mlp:serving_default": 5}
    assert counts["by_kind"] == {"predict": 5}
    assert counts["by_shape"] == {"mlp: images [1, 784]": 3, "mlp: images [3, 784]": 2}
    # 784 float32s as tensor_content (REST as gRPC's message), and three times as many
    assert 784 * 4 < counts["request_bytes"]["min"] < 784 * 4 + 200
    assert 3 * 784 * 4 < counts["request_bytes"]["max"] < 3 * 784 * 4 + 200
    assert counts["timed"] == 5 and counts["span_s"] > 0 and counts["rate_per_s"] > 0
    assert counts["first_ns"] < counts["last_ns"]


def test_the_table_says_the_same(request_log: Path) -> None:
    result = CliRunner().invoke(app, ["traffic", "show", str(request_log)])
    assert result.exit_code == 0
    text = result.output
    assert "5 requests" in text and "requests a second" in text
    assert "mlp: images [1, 784]" in text and "mlp: images [3, 784]" in text


def test_a_warm_up_file_is_traffic_without_times(mlp_export: MlpExport) -> None:
    path = mlp_export.version_dir / WARMUP_FILE
    code, output = _show(path)
    assert code == 0, output
    counts = json.loads(output)
    warmup = list(read_warmup_records(mlp_export.version_dir))
    assert counts["records"] == len(warmup) > 0
    assert counts["timed"] == 0 and counts["rate_per_s"] is None
    shapes = sorted(
        tuple(d.size for d in r.predict_log.request.inputs["images"].tensor_shape.dim)
        for r in warmup
    )
    listed = sorted(tuple(json.loads(label.split("images ")[1])) for label in counts["by_shape"])
    assert listed == sorted(set(shapes))


def _framed(path: Path, *records: bytes) -> Path:
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    return path


def test_files_that_are_not_traffic_exit_2_saying_why(tmp_path: Path, request_log: Path) -> None:
    whole = request_log.read_bytes()
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(whole[: len(whole) - 100])
    session = prediction_log_pb2.PredictionLog()
    session.session_run_log.SetInParent()
    cases = {
        tmp_path / "missing": "no such file",
        _framed(tmp_path / "empty", *()): "is empty",
        cut: "is truncated or corrupt after 4 whole records (truncated record at",
        _framed(tmp_path / "junk", b"\xff\xff\xff"): "record 0: not a PredictionLog (3 bytes)",
        _framed(tmp_path / "session", session.SerializeToString()): (
            "record 0: a session_run_log record; expected predict_log, classify_log, "
            "regress_log or multi_inference_log"
        ),
    }
    for path, said in cases.items():
        code, output = _show(path)
        assert code == 2, (path, output)
        assert said in " ".join(output.split()), (path, output)
        assert "Traceback" not in output


def test_warm_up_records_from_a_log_cover_each_shape_and_load(
    tmp_path: Path, request_log: Path, mlp_export: MlpExport
) -> None:
    import shutil

    from graphserve.serving import ModelRegistry

    version = tmp_path / "mlp" / "7"
    shutil.copytree(mlp_export.version_dir, version)
    result = CliRunner().invoke(app, ["traffic", "warmup", str(request_log), str(version)])
    assert result.exit_code == 0, result.output
    assert "2 warm-up requests, 2 input shapes" in result.output
    records = list(read_warmup_records(version))
    shapes = [
        tuple(d.size for d in r.predict_log.request.inputs["images"].tensor_shape.dim)
        for r in records
    ]
    assert shapes == [(1, 784), (3, 784)]  # the most frequent first
    assert all(not r.predict_log.HasField("response") for r in records)
    registry = ModelRegistry()
    servable = registry.load_graph("mlp", tmp_path / "mlp")  # replays them as it loads
    assert servable.version == 7


def test_warm_up_refuses_traffic_that_does_not_fit(tmp_path: Path, request_log: Path) -> None:
    from graphserve.conformance.models import write_tf2_half_plus_two

    other = write_tf2_half_plus_two(tmp_path / "hpt" / "1")
    result = CliRunner().invoke(app, ["traffic", "warmup", str(request_log), str(other)])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert "record 0 sends inputs ['images']; signature 'serving_default'" in said
    assert "takes ['x']" in said
    result = CliRunner().invoke(
        app, ["traffic", "warmup", str(request_log), str(other), "--model", "half_plus_two"]
    )
    assert result.exit_code == 2
    assert "holds no predict request for model 'half_plus_two'" in " ".join(result.output.split())
    assert not (other / "assets.extra" / "tf_serving_warmup_requests").exists()


def test_export_warms_up_from_a_log(tmp_path: Path, request_log: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "export",
            "examples:mlp",
            "--name",
            "mlp",
            "--base-path",
            str(tmp_path),
            "--warmup-from",
            str(request_log),
            "--output",
            "json",
        ],
    )
    assert result.exit_code == 0, result.output
    version = tmp_path / "mlp" / "1"
    shapes = sorted(
        tuple(d.size for d in r.predict_log.request.inputs["images"].tensor_shape.dim)
        for r in read_warmup_records(version)
    )
    assert shapes == [(1, 784), (3, 784)]
    manifest = json.loads((version / "assets.extra" / "graphserve.json").read_text())
    assert manifest["warmup"]["records"] == 2


def test_export_refuses_a_log_that_does_not_fit(tmp_path: Path, request_log: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "export",
            "tests.factories:affine",
            "--name",
            "affine",
            "--base-path",
            str(tmp_path),
            "--input",
            "x:float32:-1,3",
            "--warmup-from",
            str(request_log),
        ],
    )
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "--warmup-from: record 0 sends inputs ['images']" in said
    assert not (tmp_path / "affine" / "1").exists()
