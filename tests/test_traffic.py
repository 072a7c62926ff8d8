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


def _make(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["traffic", "make", *args])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def sequence_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BASE/seq/1: plain tf.function code over token ids of any length (a [-1, -1] input)."""

    class Pooled(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = tf.Variable(tf.random.stateless_normal((101, 4), seed=(1, 2)))

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="token_ids")])
        def __call__(self, token_ids: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"pooled": tf.reduce_mean(tf.gather(self.table, token_ids), axis=1)}

    base = tmp_path_factory.mktemp("seq") / "seq"
    module = Pooled()
    tf.saved_model.save(module, str(base / "1"), signatures={"serving_default": module.__call__})
    return base


def test_made_traffic_draws_rows_and_sequence_lengths_and_replays(
    sequence_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "seq.tfrecord"
    code, output = _make(str(sequence_model), "--out", str(out), "--count", "60",
                         "--batch-sizes", "1:0.5,4:0.5", "--seq-lens", "8,16,128",
                         "--rate", "200")  # fmt: skip
    assert code == 0, output
    assert f"{out}: 60 requests for seq:serving_default" in output
    assert ", 0.295 s at 200 req/s" in output  # 59 gaps of 5 ms
    assert out.stat().st_mode & 0o777 == 0o600
    code, shown = _show(out)
    counts = json.loads(shown)
    assert counts["records"] == 60 and counts["by_model"] == {"seq": 60}
    shapes = {label.removeprefix("seq: token_ids ") for label in counts["by_shape"]}
    assert shapes <= {f"[{r}, {n}]" for r in (1, 4) for n in (8, 16, 128)}
    assert len(shapes) == 6  # every pair drawn in 60 requests
    assert counts["rate_per_s"] == pytest.approx(200, rel=1e-3)
    records = [
        prediction_log_pb2.PredictionLog.FromString(r)
        for r in tf.data.TFRecordDataset(str(out)).as_numpy_iterator()
    ]
    ids = tf.make_ndarray(records[0].predict_log.request.inputs["token_ids"])
    assert ids.dtype == np.int32 and ids.min() >= 0 and ids.max() <= 100
    # the same seed makes the same file; the file replays against the model at its own rate
    again = tmp_path / "again.tfrecord"
    assert _make(str(sequence_model), "--out", str(again), "--count", "60", "--batch-sizes",
                 "1:0.5,4:0.5", "--seq-lens", "8,16,128")[0] == 0  # fmt: skip
    plain = [prediction_log_pb2.PredictionLog.FromString(r)
             for r in tf.data.TFRecordDataset(str(again)).as_numpy_iterator()]  # fmt: skip
    assert [p.predict_log.request for p in plain] == [r.predict_log.request for r in records]
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with build_server(ServeConfig(models=[ModelConfig("seq", sequence_model)],
                                  options=options)) as server:  # fmt: skip
        result = CliRunner().invoke(app, [
            "loadtest", "replay", str(out), "--graph", f"127.0.0.1:{server.rest_port}",
            "--protocol", "rest", "--out", str(tmp_path / "replay"), "--slo", "errors==0",
        ])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "replay" / "replay.json").read_text())
    assert report["schedule"] == "at the recorded times, speed 1"
    assert {s["shape"] for s in report["arms"][0]["shapes"]} == {
        f"token_ids [{r}, {n}]" for r in (1, 4) for n in (8, 16, 128)
    }


def test_made_traffic_takes_the_exports_inputs_and_a_samples_file(
    mlp_export: MlpExport, tmp_path: Path
) -> None:
    out = tmp_path / "mlp.tfrecord"
    code, output = _make(str(mlp_export.model_dir), "--out", str(out), "--count", "5",
                         "--batch-sizes", "2-3")  # fmt: skip
    assert code == 0, output
    assert "values generated within the ranges the export of" in output
    assert "2 input shapes" in output or "1 input shapes" in output
    samples = tmp_path / "samples.npz"
    np.savez(samples, images=np.full((4, 784), 0.25, np.float32))
    code, output = _make(str(mlp_export.version_dir), "--out", str(out), "--samples-file",
                         str(samples), "--count", "3", "--batch-sizes", "2")  # fmt: skip
    assert code == 0, output
    assert f"values the samples file {samples}" in output
    first = next(tf.data.TFRecordDataset(str(out)).as_numpy_iterator())
    request = prediction_log_pb2.PredictionLog.FromString(first).predict_log.request
    assert (tf.make_ndarray(request.inputs["images"]) == 0.25).all()


def test_traffic_that_cannot_be_made_exits_2_and_writes_nothing(
    mlp_export: MlpExport, sequence_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "never.tfrecord"
    cases = [
        ([str(mlp_export.model_dir), "--batch-sizes", "0,2"], "sizes are whole numbers from 1"),
        ([str(mlp_export.model_dir), "--batch-sizes", "1:0.5,4"], "expected 1,2,4,8 (each alike)"),
        ([str(mlp_export.model_dir), "--batch-sizes", "9-3"], "or 1-32 (a range)"),
        ([str(mlp_export.model_dir), "--seq-lens", "8,16"],
         "--seq-lens: no input of signature 'serving_default' has an open dimension past the "
         "batch (images [-1, 784])"),
        ([str(mlp_export.model_dir), "--signature-name", "nope"],
         "has no signature 'nope': it has serving_default"),
        ([str(tmp_path)], "neither a SavedModel version directory nor BASE/NAME with one"),
        ([str(sequence_model), "--samples-file", str(tmp_path / "none.npz")], "does not exist"),
    ]  # fmt: skip
    for args, message in cases:
        code, output = _make(*args, "--out", str(out))
        assert code == 2, (args, output)
        assert message in output, (args, output)
        assert not out.exists() and not list(tmp_path.glob(".never*"))
