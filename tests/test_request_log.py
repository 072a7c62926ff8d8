"""Request logging (serving.requestlog): TF Serving's `logging_config`, real servers, real files.

Every test reads the TFRecord files back with TensorFlow's own reader and TF Serving's
PredictionLog, and compares each record with what the client sent and what it was answered.
The models: the exported mlp (predict) and TF Serving's half_plus_two as its own generator writes
it in TF2 mode (classify, regress, multi-inference; conformance.models).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.example import example_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    inference_pb2,
    predict_pb2,
    prediction_log_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.conformance.models import write_tf2_half_plus_two
from graphserve.core.modelconfig import load_model_config_file
from graphserve.core.predictionlog import arrival_ns
from graphserve.core.processes import free_ports, model_available
from graphserve.serving import ServeConfig, ServerOptions, build_server
from graphserve.serving.build import EagerModel
from graphserve.serving.requestlog import LogLimits, RequestLogs, _frame, log_settings
from graphserve.serving.server import ModelServer
from tests.conftest import MlpExport

EPHEMERAL = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)


def _logging_config(prefix: Path, rate: float = 1.0) -> str:
    """A LoggingConfig, as text."""
    return (
        f'log_collector_config {{ filename_prefix: "{prefix}" }} '
        f"sampling_config {{ sampling_rate: {rate} }}"
    )


def _logging(prefix: Path, rate: float = 1.0) -> str:
    """A model config's logging_config entry."""
    return f"logging_config {{ {_logging_config(prefix, rate)} }}"


def _config_file(path: Path, *models: tuple[str, Path, str]) -> Path:
    """A TF Serving model config file: (name, base path, logging_config text or "")."""
    entries = "".join(
        f'  config {{ name: "{name}" base_path: "{base}" model_platform: "tensorflow" {logged} }}\n'
        for name, base, logged in models
    )
    path.write_text(f"model_config_list {{\n{entries}}}\n")
    return path


def _records(directory: Path) -> list[prediction_log_pb2.PredictionLog]:
    """Every record under `directory`, file by file in the order they were written."""
    files = sorted(directory.glob("*.tfrecord"), key=lambda p: p.name.rsplit("-", 1)[-1])
    return [
        prediction_log_pb2.PredictionLog.FromString(raw.numpy())
        for raw in tf.data.TFRecordDataset([str(f) for f in files])
    ]


def _metric(server: ModelServer, outcome: str, reason: str = "", model: str = "mlp") -> float:
    metrics = server.plane.metrics
    assert metrics is not None
    value = metrics.prometheus.get_sample_value(
        "graphserve_request_log_records_total",
        {"model": model, "outcome": outcome, "reason": reason},
    )
    return value or 0.0


def _rest(server: ModelServer, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.rest_port}{path}", json.dumps(body).encode()
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        return json.loads(response.read())


def _stub(server: ModelServer) -> prediction_service_pb2_grpc.PredictionServiceStub:
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


def _predict_request(rows: int, seed: int = 0) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "mlp"
    images = np.random.default_rng(seed).random((rows, 784), dtype=np.float32)
    request.inputs["images"].CopyFrom(tf.make_tensor_proto(images))
    return request


def _example(x: float) -> example_pb2.Example:
    example = example_pb2.Example()
    example.features.feature["x"].float_list.value.append(x)
    return example


@pytest.fixture
def half_plus_two(tmp_path: Path) -> Path:
    base = tmp_path / "half_plus_two"
    write_tf2_half_plus_two(base / "1")
    return base


@pytest.fixture
def logged_server(
    tmp_path: Path, mlp_export: MlpExport, half_plus_two: Path
) -> Iterator[tuple[ModelServer, Path]]:
    """The graph server of a model config file in which both models log every request."""
    logs = tmp_path / "logs"
    config = _config_file(
        tmp_path / "models.config",
        ("mlp", mlp_export.model_dir, _logging(logs / "mlp")),
        ("half_plus_two", half_plus_two, _logging(logs / "hpt")),
    )
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0, metrics_path="/metrics")
    models = load_model_config_file(config)
    with build_server(ServeConfig(models=models, options=options)) as server:
        yield server, logs


def test_every_api_is_logged_as_tf_serving_defines_it(
    logged_server: tuple[ModelServer, Path],
) -> None:
    """Predict, Classify, Regress, MultiInference over gRPC, and predict, classify and regress
    over REST: each a PredictionLog holding the request sent (a REST one as its gRPC message),
    the answer given, the version that answered and its arrival to the nanosecond."""
    server, logs = logged_server
    stub = _stub(server)
    sent: list[tuple[str, int, int]] = []  # (kind, arrived after, answered before), in order

    def timed(kind: str, call: Any) -> Any:
        before = time.time_ns()
        answer = call()
        sent.append((kind, before, time.time_ns()))
        return answer

    grpc_predict = _predict_request(2)
    grpc_predicted = timed("predict", lambda: stub.Predict(grpc_predict, timeout=30))
    rest_images = np.random.default_rng(1).random((3, 784), dtype=np.float32)
    rest_predicted = timed(
        "predict",
        lambda: _rest(server, "/v1/models/mlp:predict", {"instances": rest_images.tolist()}),
    )
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name, classify.model_spec.signature_name = (
        "half_plus_two",
        ("classify_x_to_y"),
    )
    classify.input.example_list.examples.extend([_example(1.0), _example(4.0)])
    classified = timed("classify", lambda: stub.Classify(classify, timeout=30))
    regress = regression_pb2.RegressionRequest()
    regress.model_spec.name, regress.model_spec.signature_name = "half_plus_two", "regress_x_to_y"
    regress.input.example_list.examples.append(_example(6.0))
    regressed = timed("regress", lambda: stub.Regress(regress, timeout=30))
    multi = inference_pb2.MultiInferenceRequest()
    for signature, method in (("classify_x_to_y", "classify"), ("regress_x_to_y", "regress")):
        task = multi.tasks.add()
        task.model_spec.name, task.model_spec.signature_name = "half_plus_two", signature
        task.method_name = f"tensorflow/serving/{method}"
    multi.input.example_list.examples.append(_example(2.0))
    inferred = timed("multi_inference", lambda: stub.MultiInference(multi, timeout=30))
    rest_classified = timed(
        "classify",
        lambda: _rest(
            server,
            "/v1/models/half_plus_two:classify",
            {"signature_name": "classify_x_to_y", "examples": [{"x": 8.0}]},
        ),
    )
    rest_regressed = timed(
        "regress",
        lambda: _rest(
            server,
            "/v1/models/half_plus_two/versions/1:regress",
            {"signature_name": "regress_x_to_y", "examples": [{"x": 10.0}]},
        ),
    )
    assert server.plane.request_logs is not None and server.plane.request_logs.flush()

    mlp = [r for r in _records(logs) if r.log_metadata.model_spec.name == "mlp"]
    hpt = [r for r in _records(logs) if r.log_metadata.model_spec.name == "half_plus_two"]
    assert sorted(p.name.split("-")[0] for p in logs.glob("*.tfrecord")) == ["hpt", "mlp"]
    assert [r.WhichOneof("log_type") for r in mlp] == ["predict_log", "predict_log"]
    assert [r.WhichOneof("log_type") for r in hpt] == [
        "classify_log",
        "regress_log",
        "multi_inference_log",
        "classify_log",
        "regress_log",
    ]
    # gRPC: the very messages sent and answered
    assert mlp[0].predict_log.request == grpc_predict
    assert mlp[0].predict_log.response == grpc_predicted
    assert hpt[0].classify_log.request == classify
    assert hpt[0].classify_log.response == classified
    assert hpt[1].regress_log.request == regress and hpt[1].regress_log.response == regressed
    assert hpt[2].multi_inference_log.request == multi
    assert hpt[2].multi_inference_log.response == inferred
    # REST: the equivalent gRPC messages, values and answers as sent and answered
    logged = mlp[1].predict_log
    assert logged.request.model_spec.name == "mlp"
    np.testing.assert_array_equal(tf.make_ndarray(logged.request.inputs["images"]), rest_images)
    np.testing.assert_allclose(
        tf.make_ndarray(logged.response.outputs["logits"]),
        np.array(rest_predicted["predictions"], dtype=np.float32),
        rtol=1e-6,
    )
    rest_classify = hpt[3].classify_log
    assert rest_classify.request.model_spec.signature_name == "classify_x_to_y"
    (example,) = rest_classify.request.input.example_list.examples
    assert list(example.features.feature["x"].float_list.value) == [8.0]
    (row,) = rest_classify.response.result.classifications
    assert [(c.label, c.score) for c in row.classes] == [
        (label, score) for label, score in rest_classified["results"][0]
    ]
    rest_regress = hpt[4].regress_log
    assert rest_regress.request.model_spec.version.value == 1  # the URL's version
    assert [r.value for r in rest_regress.response.result.regressions] == pytest.approx(
        rest_regressed["results"]
    )
    # metadata: the version and signature that answered, the sampling config, the tags, and
    # the arrival within the call, to the nanosecond, in the order sent
    signatures = ["serving_default"] * 2 + [
        "classify_x_to_y",
        "regress_x_to_y",
        "",  # MultiInference's own spec names no one signature
        "classify_x_to_y",
        "regress_x_to_y",
    ]
    records = mlp + hpt  # the order they were sent in
    for record, (kind, before, after), signature in zip(records, sent, signatures, strict=True):
        metadata = record.log_metadata
        assert record.WhichOneof("log_type") == f"{kind}_log"
        assert metadata.model_spec.version.value == 1
        if kind != "multi_inference":
            assert metadata.model_spec.signature_name == signature
        assert metadata.sampling_config.sampling_rate == 1.0
        assert list(metadata.saved_model_tags) == ["serve"]
        assert before <= arrival_ns(record) <= after
        assert metadata.timestamp_secs == arrival_ns(record) // 1_000_000_000
    arrivals = [arrival_ns(record) for record in records]
    assert arrivals == sorted(arrivals) and len(set(arrivals)) == len(arrivals)
    assert (
        _metric(server, "written") == 2 and _metric(server, "written", model="half_plus_two") == 5
    )
    assert _metric(server, "dropped", "queue_full") == 0


def test_records_are_framed_byte_for_byte_as_tensorflows_writer_frames_them(
    tmp_path: Path,
) -> None:
    """The log frames its own records (one write a drain): TensorFlow's TFRecordWriter, given
    the same records, writes the same bytes, and its reader reads them back."""
    records = [b"", b"x", os.urandom(7000), os.urandom(1 << 17)]
    theirs = tmp_path / "theirs.tfrecord"
    with tf.io.TFRecordWriter(str(theirs)) as writer:
        for record in records:
            writer.write(record)
    ours = tmp_path / "ours.tfrecord"
    ours.write_bytes(b"".join(_frame(record) for record in records))
    assert ours.read_bytes() == theirs.read_bytes()
    assert list(tf.data.TFRecordDataset(str(ours)).as_numpy_iterator()) == records


def test_files_are_the_owners_alone(logged_server: tuple[ModelServer, Path]) -> None:
    server, logs = logged_server
    _stub(server).Predict(_predict_request(1), timeout=30)
    assert server.plane.request_logs is not None and server.plane.request_logs.flush()
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    (written,) = logs.glob("mlp-*.tfrecord")
    assert stat.S_IMODE(written.stat().st_mode) == 0o600


def test_a_sampling_rate_logs_that_share(tmp_path: Path, mlp_export: MlpExport) -> None:
    """Rate 0.25 over 400 requests: a binomial count (mean 100, sd 8.7), far from 0 and 400."""
    config = _config_file(
        tmp_path / "models.config", ("mlp", mlp_export.model_dir, _logging(tmp_path / "m", 0.25))
    )
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0, metrics_path="/metrics")
    with build_server(ServeConfig(models=load_model_config_file(config), options=options)) as s:
        stub, request = _stub(s), _predict_request(1)
        for _ in range(400):
            stub.Predict(request, timeout=30)
        assert s.plane.request_logs is not None and s.plane.request_logs.flush()
        logged = len(_records(tmp_path))
        assert 50 <= logged <= 150, logged
        assert _metric(s, "written") == logged
        assert all(r.log_metadata.sampling_config.sampling_rate == 0.25 for r in _records(tmp_path))


def test_files_rotate_by_size_and_the_oldest_go_past_the_cap(
    tmp_path: Path, mlp_export: MlpExport
) -> None:
    logs = tmp_path / "logs"
    config = _config_file(
        tmp_path / "models.config", ("mlp", mlp_export.model_dir, _logging(logs / "mlp"))
    )
    # a record of one mlp row: ~3.2 kB of request, 40 B of answer; three fit a file
    limits = LogLimits(file_bytes=10_000, total_bytes=30_000)
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0, metrics_path="/metrics")
    models = load_model_config_file(config)
    with build_server(ServeConfig(models=models, options=options, request_log_limits=limits)) as s:
        stub = _stub(s)
        for seed in range(40):
            stub.Predict(_predict_request(1, seed), timeout=30)
        assert s.plane.request_logs is not None and s.plane.request_logs.flush()
        assert _metric(s, "written") == 40
    files = sorted(logs.glob("mlp-*.tfrecord"))
    sizes = [f.stat().st_size for f in files]
    assert all(size <= limits.file_bytes for size in sizes), sizes
    assert sum(sizes) <= limits.total_bytes, sizes
    sequences = sorted(int(f.name.rsplit("-", 1)[1].removesuffix(".tfrecord")) for f in files)
    assert sequences[0] > 1 and sequences == list(range(sequences[0], sequences[-1] + 1))
    # what is left is the newest requests, the last one sent last
    kept = _records(logs)
    last = tf.make_ndarray(kept[-1].predict_log.request.inputs["images"])
    np.testing.assert_array_equal(last, tf.make_ndarray(_predict_request(1, 39).inputs["images"]))
    assert len(kept) < 40


def test_a_writer_that_falls_behind_drops_and_counts_never_blocks(
    tmp_path: Path, mlp_export: MlpExport
) -> None:
    """The writer held on its first record (a disk that does not answer): the queue fills, the
    records past it are dropped and counted, and every request is answered meanwhile."""
    from prometheus_client import CollectorRegistry

    settings = log_settings("mlp", _logging_config(tmp_path / "logs" / "mlp"))
    assert settings is not None
    registry = CollectorRegistry()
    logs = RequestLogs([settings], LogLimits(queue_records=3), registry)
    held, holding = threading.Event(), threading.Event()
    request = _predict_request(1)

    def slow() -> predict_pb2.PredictRequest:
        holding.set()
        held.wait(30)
        return request

    config = _config_file(tmp_path / "models.config", ("mlp", mlp_export.model_dir, ""))
    with build_server(ServeConfig(models=load_model_config_file(config), options=EPHEMERAL)) as (
        server
    ):
        response = _stub(server).Predict(request, timeout=30)
        server.plane.request_logs = logs
        servable = server.registry.get("mlp")
        logs.record(
            settings, "predict", servable, "serving_default", time.time_ns(), slow, response
        )
        assert holding.wait(30)
        started = time.perf_counter()
        for _ in range(10):  # answered while the writer is held
            assert _stub(server).Predict(request, timeout=30).outputs["logits"].tensor_shape
        assert time.perf_counter() - started < 25  # the held writer stays held meanwhile
        held.set()
        assert logs.flush()
        logs.close()

    def count(outcome: str, reason: str = "") -> float:
        sample = registry.get_sample_value(
            "graphserve_request_log_records_total",
            {"model": "mlp", "outcome": outcome, "reason": reason},
        )
        return sample or 0.0

    assert count("written") == 4  # the held one and the three the queue held
    assert count("dropped", "queue_full") == 7
    assert len(_records(tmp_path / "logs")) == 4


def test_a_log_directory_removed_under_the_server(logged_server: tuple[ModelServer, Path]) -> None:
    server, logs = logged_server
    stub, request = _stub(server), _predict_request(1)
    request_logs = server.plane.request_logs
    assert request_logs is not None
    for _ in range(3):
        stub.Predict(request, timeout=30)
    assert request_logs.flush()
    shutil.rmtree(logs)
    for _ in range(5):  # the first into the removed file: found at its flush, dropped, counted
        assert stub.Predict(request, timeout=30).outputs["logits"].float_val
    assert request_logs.flush()
    written, dropped = _metric(server, "written"), _metric(server, "dropped", "write_failed")
    assert written + dropped == 8 and dropped >= 1
    assert len(_records(logs)) == written - 3  # the rest in a new file, its directory made again


def test_the_eager_server_logs_with_its_flags(tmp_path: Path) -> None:
    """`serve eager --request-log PREFIX --request-log-rate 1`, as ServeFlags writes it: the
    eager model logged, with no SavedModel tags (it has none)."""
    from graphserve.serving.flags import ServeFlags

    flags = ServeFlags(request_log=str(tmp_path / "eager" / "hpt"), request_log_rate=1.0)
    what = flags.request_log_settings({"eager": (EagerModel("hpt", "tests.half_plus_two:build"),)})
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with build_server(ServeConfig(options=options, **what)) as server:
        answer = _rest(server, "/v1/models/hpt:predict", {"instances": [[1.0], [3.0]]})
        assert server.plane.request_logs is not None and server.plane.request_logs.flush()
    (record,) = _records(tmp_path / "eager")
    assert record.log_metadata.model_spec.name == "hpt"
    assert list(record.log_metadata.saved_model_tags) == []
    (inputs,) = record.predict_log.request.inputs.values()
    np.testing.assert_array_equal(tf.make_ndarray(inputs), [[1.0], [3.0]])
    (outputs,) = record.predict_log.response.outputs.values()
    np.testing.assert_allclose(tf.make_ndarray(outputs), answer["predictions"])


def test_a_reloaded_config_starts_logging(tmp_path: Path, mlp_export: MlpExport) -> None:
    path = _config_file(tmp_path / "models.config", ("mlp", mlp_export.model_dir, ""))
    config = ServeConfig(
        models=load_model_config_file(path),
        options=EPHEMERAL,
        model_config_file=path,
        model_config_poll_seconds=0.2,
    )
    with build_server(config) as server:
        stub, request = _stub(server), _predict_request(1)
        stub.Predict(request, timeout=30)
        _config_file(path, ("mlp", mlp_export.model_dir, _logging(tmp_path / "logs" / "mlp")))
        logs = server.plane.request_logs
        assert logs is not None
        deadline = time.monotonic() + 30
        while "mlp" not in logs.models and time.monotonic() < deadline:
            time.sleep(0.1)
        stub.Predict(request, timeout=30)
        assert logs.flush()
    (record,) = _records(tmp_path / "logs")
    assert record.predict_log.request == request


@pytest.mark.parametrize(
    ("logged", "said"),
    [
        (
            'logging_config { log_collector_config { filename_prefix: "PREFIX" } '
            "sampling_config { sampling_rate: 1.5 } }",
            "model 'mlp': logging_config: sampling_config.sampling_rate 1.5 is outside [0, 1]",
        ),
        (
            'logging_config { log_collector_config { filename_prefix: "FILE/under/it" } }',
            "model 'mlp': logging_config: cannot make the directory of filename_prefix",
        ),
        (
            "logging_config { sampling_config { sampling_rate: 0.5 } }",
            "model 'mlp': logging_config: log_collector_config.filename_prefix is empty",
        ),
    ],
)
def test_a_bad_logging_config_stops_the_server_at_start_naming_it(
    tmp_path: Path, mlp_export: MlpExport, logged: str, said: str
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    logged = logged.replace("PREFIX", str(tmp_path / "logs" / "mlp"))
    logged = logged.replace("FILE", str(blocker))
    config = _config_file(tmp_path / "models.config", ("mlp", mlp_export.model_dir, logged))
    result = CliRunner().invoke(
        app, ["serve", "graph", "--model-config-file", str(config), "--grpc-port", "0"]
    )
    assert result.exit_code == 2, result.output
    assert said in result.output


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--request-log-rate", "0.5"], "--request-log-rate: give --request-log PREFIX too"),
        (["--request-log", "x", "--request-log-rate", "2"], "value for '--request-log-rate'"),
        (
            ["--request-log-file-size", "2GiB", "--request-log-max-size", "1GiB"],
            "is smaller than one file",
        ),
        (["--request-log-file-size", "lots"], "--request-log-file-size"),
    ],
)
def test_request_log_flags_that_cannot_work_exit_2(
    mlp_export: MlpExport, args: list[str], said: str
) -> None:
    result = CliRunner().invoke(
        app, ["serve", "graph", "--model-base-path", str(mlp_export.model_dir), *args]
    )
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.split())


def test_request_log_with_a_config_file_exits_2(tmp_path: Path, mlp_export: MlpExport) -> None:
    config = _config_file(tmp_path / "models.config", ("mlp", mlp_export.model_dir, ""))
    result = CliRunner().invoke(
        app, ["serve", "graph", "--model-config-file", str(config), "--request-log", "x"]
    )
    assert result.exit_code == 2
    assert "give each model to log a logging_config in the file" in result.output


@pytest.mark.slow
def test_a_full_disk_drops_records_and_every_request_is_answered(
    tmp_path: Path, mlp_export: MlpExport
) -> None:
    """The server run under a file-size limit (prlimit --fsize: a write past it fails with
    EFBIG, as a write to a full disk fails with ENOSPC; here each new file fills again):
    every request answered, the records that did not fit dropped, counted and said in the
    server's log, and every file cut back to its last whole record, so it reads to the end."""
    if shutil.which("prlimit") is None:
        pytest.fail("needs util-linux's prlimit")
    grpc_port, rest_port = free_ports(2)
    log_path = tmp_path / "server.log"
    args = [
        "prlimit",
        f"--fsize={16 * 1024}",
        sys.executable,
        "-m",
        "graphserve",
        "serve",
        "graph",
        "--model-base-path",
        str(mlp_export.model_dir),
        "--grpc-port",
        str(grpc_port),
        "--rest-port",
        str(rest_port),
        "--metrics",
        "--request-log",
        str(tmp_path / "logs" / "mlp"),
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=log, env=os.environ.copy())
    try:
        address = f"127.0.0.1:{grpc_port}"
        deadline = time.monotonic() + 180
        while not model_available(address, "mlp"):
            assert process.poll() is None, log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            time.sleep(0.25)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(address))
        request = _predict_request(1)
        for _ in range(30):  # ~3.2 kB a record: the 16 kB limit holds four
            assert len(stub.Predict(request, timeout=30).outputs["logits"].float_val) == 10
        time.sleep(1.0)  # the writer's last flush
        with urllib.request.urlopen(
            f"http://127.0.0.1:{rest_port}/monitoring/prometheus/metrics"
        ) as r:
            page = r.read().decode()
    finally:
        process.terminate()
        process.wait(30)
    written = _sample(page, 'outcome="written",reason=""')
    dropped = _sample(page, 'outcome="dropped",reason="write_failed"')
    assert written + dropped == 30 and dropped > 0, (written, dropped)
    said = log_path.read_text()
    assert "records dropped (write_failed)" in said and "serving goes on" in said
    assert process.returncode == 0
    assert len(_records(tmp_path / "logs")) == written


def _sample(page: str, labels: str) -> float:
    for line in page.splitlines():
        if line.startswith("graphserve_request_log_records_total{") and labels in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
