"""`graphserve loadtest replay`: a real graph server's request log sent again to real graph and
eager servers over gRPC and REST, its answers judged against the log and across arms; a version
with one weight changed found and named; TF Serving's half_plus_two (as its own generator writes
it) replayed through Classify, Regress and MultiInference; files and options that cannot be
used refused before anything is sent, exit 2."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    classification_pb2,
    inference_pb2,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.conformance.models import write_tf2_half_plus_two
from graphserve.serving import ServeConfig, ServerOptions, build_server
from graphserve.serving.config import ModelConfig
from tests.conftest import MlpExport, Servers

ROWS = (1, 3, 8)  # the shapes the log holds, 10 requests each


def _logging(prefix: Path) -> str:
    return (
        f'log_collector_config {{ filename_prefix: "{prefix}" }} '
        "sampling_config { sampling_rate: 1 }"
    )


def _predict(rows: int, seed: int) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "mlp"
    values = np.random.default_rng(seed).random((rows, 784), dtype=np.float32)
    request.inputs["images"].CopyFrom(tf.make_tensor_proto(values))
    return request


@pytest.fixture(scope="module")
def mlp_log(mlp_export: MlpExport, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The graph server's log of 30 gRPC predict requests: 1, 3 and 8 rows, in turn."""
    logs = tmp_path_factory.mktemp("replay-logs")
    model = ModelConfig("mlp", mlp_export.model_dir, logging=_logging(logs / "mlp"))
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with build_server(ServeConfig(models=[model], options=options)) as server:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        )
        for n in range(30):
            stub.Predict(_predict(ROWS[n % 3], n), timeout=30)
        assert server.plane.request_logs is not None and server.plane.request_logs.flush()
    (path,) = logs.glob("mlp-*.tfrecord")
    return path


def _replay(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["loadtest", "replay", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_graph_and_eager_answer_the_logged_traffic_as_the_log_says(
    protocol: str, mlp_log: Path, mlp_servers: Servers, tmp_path: Path
) -> None:
    graph = mlp_servers.graph_grpc if protocol == "grpc" else mlp_servers.graph_rest
    eager = mlp_servers.eager_grpc if protocol == "grpc" else mlp_servers.eager_rest
    code, output = _replay(
        str(mlp_log), "--graph", graph, "--eager", eager, "--protocol", protocol,
        "--speed", "4", "--slo", "answers.mismatch==0", "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0, output
    report = json.loads((tmp_path / "replay.json").read_text())
    assert report["records"] == 30 and report["sent"] == 30
    assert report["baseline"] == "eager"
    assert report["schedule"] == "at the recorded times, speed 4"
    arms = {arm["name"]: arm for arm in report["arms"]}
    assert list(arms) == ["graph", "eager"]
    for arm in arms.values():
        assert arm["requests"] == 30 and arm["failed"] == 0, arm["errors"]
        assert arm["adherence"]["sent"] == arm["adherence"]["scheduled"] == 30
        assert arm["adherence"]["lateness_p50_ms"] >= 0
        shapes = {s["shape"]: s["requests"] for s in arm["shapes"]}
        assert shapes == {"images [1, 784]": 10, "images [3, 784]": 10, "images [8, 784]": 10}
        assert [s["rows"] for s in arm["shapes"]] == [1, 3, 8]
        logged = next(a for a in arm["answers"] if a["reference"] == "logged")
        assert logged["compared"] == 30 and logged["mismatched"] == 0
        (output_row,) = logged["outputs"]
        assert output_row["rows"] == 10 * sum(ROWS)
        assert output_row["max_abs_error"] < 1e-4
        assert output_row["top_class_changed"] == 0  # logits of 10 classes
    across = [a for a in arms["graph"]["answers"] if a["reference"] == "eager"]
    assert across and across[0]["compared"] == 30 and across[0]["mismatched"] == 0
    assert report["gates"] == [
        {"expression": "answers.mismatch==0", "arm": "every arm", "value": 0.0,
         "threshold": 0.0, "passed": True, "why": ""}
    ]  # fmt: skip
    assert report["worst"] == []
    page = (tmp_path / "replay.md").read_text()
    assert "## Latency by request shape" in page and "images [8, 784]" in page
    assert (tmp_path / "shapes.png").read_bytes().startswith(b"\x89PNG")


@pytest.fixture(scope="module")
def changed_weight(mlp_export: MlpExport, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BASE/mlp with one version: the export's, one bias of its last layer moved by 1."""
    base = tmp_path_factory.mktemp("changed") / "mlp"
    loaded = tf.saved_model.load(str(mlp_export.version_dir))
    serving = loaded.signatures["serving_default"]
    bias = next(v for v in serving.variables if v.shape == (10,))
    bias.assign_add(tf.one_hot(3, 10))
    tf.saved_model.save(loaded, str(base / "1"), signatures={"serving_default": serving})
    return base


def _check_worst(worst: dict, changed: str, out: Path) -> int:
    """The request that disagrees most, as a report saves it under `out`: the changed arm's
    logits, its request as JSON and as a message, the curl to the changed arm, and the replay
    command that sends it again and fails the same way; its record number."""
    record = worst["record"]
    assert worst["arm"] == "changed" and worst["output"] == "logits"
    assert sorted(worst["files"]) == [
        f"answers/request-{record}.json", f"answers/request-{record}.pb"
    ]  # fmt: skip
    body = json.loads((out / f"answers/request-{record}.json").read_text())
    assert np.asarray(body["instances"]).shape[1] == 784
    assert worst["curl"].endswith(f"'http://{changed}/v1/models/mlp:predict'")
    again = shlex.split(worst["command"])
    assert again[:3] == ["graphserve", "loadtest", "replay"]
    code, output = _replay(*again[3:], "--slo", "answers.mismatch==0",
                           "--out", str(out / "again"))  # fmt: skip
    assert code == 3, output
    one = json.loads((out / "again" / "replay.json").read_text())
    assert one["sent"] == 1 and one["worst"][0]["record"] == record
    return record


def test_a_version_with_one_weight_changed_is_found_named_and_fails_the_gate(
    mlp_log: Path, mlp_servers: Servers, changed_weight: Path, tmp_path: Path
) -> None:
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    model = ModelConfig("mlp", changed_weight)
    with build_server(ServeConfig(models=[model], options=options)) as server:
        changed = f"127.0.0.1:{server.rest_port}"
        code, output = _replay(
            str(mlp_log), "--arm", f"changed={changed}", "--arm", f"graph={mlp_servers.graph_rest}",
            "--protocol", "rest", "--rate", "100", "--slo", "answers.mismatch==0",
            "--worst", "2", "--out", str(tmp_path),
        )  # fmt: skip
        assert code == 3, output
        assert "SLO missed: answers.mismatch==0 on every arm: 60" in output
        report = json.loads((tmp_path / "replay.json").read_text())
        arms = {arm["name"]: arm for arm in report["arms"]}
        (logged,) = (a for a in arms["graph"]["answers"] if a["reference"] == "logged")
        assert logged["mismatched"] == 0  # the served version is the logged one
        for reference in ("logged", "graph"):
            (found,) = (a for a in arms["changed"]["answers"] if a["reference"] == reference)
            assert found["compared"] == 30 and found["mismatched"] == 30
            assert 0.99 < found["outputs"][0]["max_abs_error"] < 1.01  # the bias moved by 1
        assert len(report["worst"]) == 2
        _check_worst(report["worst"][0], changed, tmp_path)


@pytest.fixture(scope="module")
def hpt_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """TF Serving's half_plus_two, and its server's log of Predict, Classify, Regress and
    MultiInference over gRPC, and classify over REST."""
    import urllib.request

    work = tmp_path_factory.mktemp("hpt")
    write_tf2_half_plus_two(work / "half_plus_two" / "1")
    logs = work / "logs"
    logs.mkdir()
    model = ModelConfig("half_plus_two", work / "half_plus_two", logging=_logging(logs / "hpt"))
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with build_server(ServeConfig(models=[model], options=options)) as server:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        )
        predict = predict_pb2.PredictRequest()
        predict.model_spec.name = "half_plus_two"
        predict.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array([[1.0], [3.0]], np.float32)))
        stub.Predict(predict, timeout=30)
        classify = classification_pb2.ClassificationRequest()
        classify.model_spec.name = "half_plus_two"
        classify.model_spec.signature_name = "classify_x_to_y"
        for x in (1.0, 4.0, 2.5):
            example = classify.input.example_list.examples.add()
            example.features.feature["x"].float_list.value.append(x)
        stub.Classify(classify, timeout=30)
        regress = regression_pb2.RegressionRequest()
        regress.model_spec.name = "half_plus_two"
        regress.model_spec.signature_name = "regress_x_to_y"
        regress.input.example_list.examples.add().features.feature["x"].float_list.value.append(6.0)
        stub.Regress(regress, timeout=30)
        multi = inference_pb2.MultiInferenceRequest()
        for signature, method in (("classify_x_to_y", "classify"), ("regress_x_to_y", "regress")):
            task = multi.tasks.add()
            task.model_spec.name, task.model_spec.signature_name = "half_plus_two", signature
            task.method_name = f"tensorflow/serving/{method}"
        multi.input.example_list.examples.add().features.feature["x"].float_list.value.append(2.0)
        stub.MultiInference(multi, timeout=30)
        body = json.dumps({"signature_name": "classify_x_to_y", "examples": [{"x": 8.0}]})
        url = f"http://127.0.0.1:{server.rest_port}/v1/models/half_plus_two:classify"
        with urllib.request.urlopen(urllib.request.Request(url, body.encode()), timeout=30) as r:
            assert r.status == 200
        assert server.plane.request_logs is not None and server.plane.request_logs.flush()
    (path,) = logs.glob("hpt-*.tfrecord")
    return work / "half_plus_two", path


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_tf_servings_half_plus_two_replays_every_api(
    protocol: str, hpt_log: tuple[Path, Path], tmp_path: Path
) -> None:
    model_dir, log = hpt_log
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with build_server(ServeConfig(models=[ModelConfig("half_plus_two", model_dir)],
                                  options=options)) as server:  # fmt: skip
        port = server.grpc_port if protocol == "grpc" else server.rest_port
        code, output = _replay(
            str(log), "--arm", f"graph=127.0.0.1:{port}", "--protocol", protocol,
            "--rate", "50", "--slo", "answers.mismatch==0", "--slo", "errors==0",
            "--out", str(tmp_path),
        )  # fmt: skip
    assert code == 0, output
    report = json.loads((tmp_path / "replay.json").read_text())
    (arm,) = report["arms"]
    assert arm["failed"] == 0, arm["errors"]
    (logged,) = arm["answers"]
    if protocol == "grpc":
        assert report["sent"] == 5 and logged["compared"] == 5
        outputs = {o["output"] for o in logged["outputs"]}
        assert {"y", "scores", "classes", "value", "classify_x_to_y/scores",
                "regress_x_to_y/value"} <= outputs  # fmt: skip
    else:  # REST has no MultiInference
        assert report["sent"] == 4 and logged["compared"] == 4
        assert report["warnings"] == [
            "1 multi_inference record left out: TF Serving's REST API has no MultiInference "
            "(replay them over gRPC)"
        ]
    assert logged["mismatched"] == 0
    shapes = {s["shape"] for s in arm["shapes"]}
    assert {"x [2, 1]", "examples [3]", "examples [1]"} <= shapes


def test_the_parity_rule_is_the_exporters(tmp_path: Path) -> None:
    """The answers check and the exporter's parity check read one rule and one set of
    tolerances (graphserve.core.parity): the same verdicts and errors on the same arrays."""
    from graphserve.core import parity
    from graphserve.exporter.verify import DEFAULT_TOLERANCES, _compare
    from graphserve.loadtest.results import answers

    assert answers.DEFAULT_TOLERANCES is DEFAULT_TOLERANCES is parity.DEFAULT_TOLERANCES
    rng = np.random.default_rng(0)
    base = rng.normal(size=(4, 10)).astype(np.float32) * 600
    cases = [
        (base, base + np.float32(1e-3)),  # within 1e-4 * scale 600
        (base, base + np.float32(0.5)),  # past it
        (base.astype(np.float16), (base + 3).astype(np.float16)),
        (np.array([1.0, np.nan, np.inf], np.float32), np.array([1.0, np.nan, np.inf], np.float32)),
        (np.array([1.0, np.nan], np.float32), np.array([1.0, 2.0], np.float32)),
        (np.array([1, 2, 3], np.int64), np.array([1, 2, 4], np.int64)),
        (np.array([b"a", b"b"], object), np.array([b"a", b"c"], object)),
    ]
    for expected, got in cases:
        theirs = _compare("s", "out", got, expected, DEFAULT_TOLERANCES)
        (ours,) = answers.compare({"out": got}, {"out": expected})
        assert ours.passed == theirs.passed, (expected, got)
        assert ours.max_abs_error == pytest.approx(theirs.max_abs_error)
        assert ours.allowed_abs_error == theirs.allowed_abs_error


def _warmup_file(path: Path) -> Path:
    from graphserve.model.warmup import write_warmup_records

    return write_warmup_records(path, [_predict(2, 0)])


def test_traffic_that_cannot_be_sent_is_refused_before_anything_is_sent(
    mlp_log: Path, mlp_servers: Servers, tmp_path: Path
) -> None:
    arms = ["--graph", mlp_servers.graph_grpc]
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(mlp_log.read_bytes()[:-100])
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    warm = tmp_path / "v"
    warm.mkdir()
    cases = [
        ([str(truncated), *arms], "is truncated or corrupt after 29 whole records"),
        ([str(empty), *arms], "is empty: expected TFRecord PredictionLogs"),
        ([str(tmp_path / "none.tfrecord"), *arms], "no such file"),
        ([str(mlp_log), *arms, "--from-model", "bert"],
         "holds no record of model 'bert': it has 'mlp'"),
        ([str(_warmup_file(warm)), *arms],
         "1 of the 1 records carry no arrival time (a warm-up file, or traffic made without "
         "--rate): give --rate"),
        ([str(mlp_log), *arms, "--records", "30"], "--records 30: the file's records are 0 to 29"),
        ([str(mlp_log), "--graph", "10.1.2.3:8500"], "is not on this machine"),
        ([str(mlp_log), *arms, "--slo", "answers.mismatched==0"], "expected [ARM.]METRIC"),
        ([str(mlp_log), *arms, "--slo", "ratio.p50<0.5"], "no ratio gates"),
        ([str(mlp_log), *arms, "--slo", "eager.p99<1s"],
         "--slo 'eager.p99<1s' names arm 'eager'; the replay has 'graph'"),
    ]  # fmt: skip
    for args, message in cases:
        code, output = _replay(*args, "--out", str(tmp_path / "out"))
        assert code == 2, (args, output)
        assert message in output, (args, output)
    assert not (tmp_path / "out" / "replay.json").exists()
    code, output = _replay(str(mlp_log), "--rate", "10", "--speed", "2", *arms)
    assert code == 2 and "not both" in output


def test_a_server_that_is_gone_fails_every_request_and_says_so(
    mlp_log: Path, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, output = _replay(str(mlp_log), "--arm", f"gone=127.0.0.1:{port}", "--protocol", "rest",
                           "--rate", "200", "--timeout", "2s", "--out", str(tmp_path))  # fmt: skip
    assert code == 1, output
    assert "no successful answer from gone" in output
    report = json.loads((tmp_path / "replay.json").read_text())
    assert report["arms"][0]["failed"] == 30
    assert "ConnectionRefusedError" in next(iter(report["arms"][0]["errors"]))


def test_an_unreadable_tolerance_source_is_refused(mlp_log: Path, tmp_path: Path) -> None:
    code, output = _replay(str(mlp_log), "--graph", "127.0.0.1:1", "--model-base-path",
                           str(tmp_path / "nothing"))  # fmt: skip
    assert code == 2 and "no version directory under it" in output


def test_the_eager_function_mode_traces_each_new_shape_and_the_replay_counts_them(
    mlp_log: Path, tmp_path: Path
) -> None:
    """The eager server's function mode (an unsigned tf.function) traces a batch size it has
    not seen: the traces the log's 1, 3 and 8 rows added, as its metrics count them."""
    import urllib.request

    from graphserve.serving import ModelRegistry, ModelServer

    def traces(port: int) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/m", timeout=30) as answer:
            text = answer.read().decode()
        (line,) = [x for x in text.splitlines() if x.startswith("graphserve_function_traces{")]
        return float(line.rsplit(" ", 1)[1])

    registry = ModelRegistry()
    registry.load_eager("mlp", "examples:mlp", mode="function")
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0, metrics_path="/m")
    with ModelServer(registry, options) as server:
        before = traces(server.rest_port)
        code, output = _replay(
            str(mlp_log), "--arm", f"function=127.0.0.1:{server.grpc_port}",
            "--metrics", f"function=http://127.0.0.1:{server.rest_port}/m",
            "--rate", "100", "--out", str(tmp_path),
        )  # fmt: skip
        added = traces(server.rest_port) - before
    assert code == 0, output
    assert added >= 1  # 3 and 8 rows at least: the start-up probe may have traced 1
    (arm,) = json.loads((tmp_path / "replay.json").read_text())["arms"]
    assert arm["traces_added"] == {"mlp:1:serving_default": added}
    page = (tmp_path / "replay.md").read_text()
    assert f"(graphserve_function_traces): mlp:1:serving_default {added:g}" in page


# -- loadtest compare --traffic: the locust sweep cycling through the log, answers checked ----

_SHORT = ("--users", "2", "--warmup", "0.5s", "--window", "0.5s", "--min-windows", "1",
          "--max-windows", "1")  # fmt: skip


def _compare(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["loadtest", "compare", "--model-name", "mlp", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("protocol", ["grpc", "rest"])
def test_compare_cycles_through_the_traffic_and_checks_every_answer(
    protocol: str, mlp_log: Path, mlp_servers: Servers, tmp_path: Path
) -> None:
    graph = mlp_servers.graph_grpc if protocol == "grpc" else mlp_servers.graph_rest
    eager = mlp_servers.eager_grpc if protocol == "grpc" else mlp_servers.eager_rest
    code, output = _compare(
        "--graph", graph, "--eager", eager, "--protocol", protocol, "--traffic", str(mlp_log),
        *_SHORT, "--slo", "answers.mismatch==0", "--slo", "graph.errors==0",
        "--out", str(tmp_path),
    )  # fmt: skip
    assert code == 0, output
    report = json.loads((tmp_path / "report.json").read_text())
    traffic = report["settings"]["payload"]["traffic"]
    assert traffic["file"] == str(mlp_log.resolve()) and traffic["model"] == "mlp"
    assert traffic["records"] == traffic["requests"] == 30
    assert traffic["shapes"] == {f"images [{n}, 784]": 10 for n in ROWS}
    assert report["settings"]["payload"]["file"] == "requests.bin"
    answers = report["answers"]
    assert answers["requests"] == 30
    assert answers["answered"] == {"graph": 30, "eager": 30}  # each arm was sent every record
    assert answers["tolerances_from"] == "the defaults" and answers["worst"] == []
    graph_checks = {a["reference"]: a for a in answers["agreements"]["graph"]}
    assert set(graph_checks) == {"logged", "eager"}
    for found in [*graph_checks.values(), *answers["agreements"]["eager"]]:
        assert found["compared"] == 30 and found["mismatched"] == 0
        (out,) = found["outputs"]
        assert out["rows"] == 10 * sum(ROWS) and out["top_class_changed"] == 0
    assert [a["reference"] for a in answers["agreements"]["eager"]] == ["logged"]
    gates = {g["expression"]: g for g in report["slo"]["gates"]}
    assert gates["answers.mismatch==0"]["value"] == 0.0 and gates["answers.mismatch==0"]["passed"]
    assert report["slo"]["passed"] is True
    for arm in report["steps"][0]["arms"].values():
        assert arm["failures"] == 0 and arm["requests"] > 30  # the file went round more than once
    page = (tmp_path / "report.md").read_text()
    assert "## Answers" in page and "30 predict requests of model mlp" in page


def test_compare_under_traffic_finds_names_and_gates_a_changed_weight(
    mlp_log: Path, mlp_servers: Servers, changed_weight: Path, tmp_path: Path
) -> None:
    """Over two locust workers: the answers they keep reach the master's report."""
    options = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    config = ServeConfig(models=[ModelConfig("mlp", changed_weight)], options=options)
    with build_server(config) as server:
        changed = f"127.0.0.1:{server.rest_port}"
        code, output = _compare(
            "--arm", f"changed={changed}", "--arm", f"graph={mlp_servers.graph_rest}",
            "--protocol", "rest", "--traffic", str(mlp_log), *_SHORT, "--workers", "2",
            "--slo", "answers.mismatch==0", "--out", str(tmp_path),
        )  # fmt: skip
        assert code == 3, output
        assert "answers.mismatch==0 missed on every arm: 60" in " ".join(output.split())
        report = json.loads((tmp_path / "report.json").read_text())
        answers = report["answers"]
        assert answers["answered"] == {"changed": 30, "graph": 30}
        changed_checks = {a["reference"]: a for a in answers["agreements"]["changed"]}
        for reference in ("logged", "graph"):
            found = changed_checks[reference]
            assert found["compared"] == 30 and found["mismatched"] == 30
            assert 0.99 < found["outputs"][0]["max_abs_error"] < 1.01  # the bias moved by 1
        (logged,) = answers["agreements"]["graph"]
        assert logged["reference"] == "logged" and logged["mismatched"] == 0
        assert len(answers["worst"]) == 5
        record = _check_worst(answers["worst"][0], changed, tmp_path)
        page = (tmp_path / "report.md").read_text()
        assert f"Record {record} (images [" in page and "loadtest replay" in page


def test_compare_refuses_traffic_it_cannot_send_before_any_load(
    mlp_log: Path, mlp_servers: Servers, tmp_path: Path
) -> None:
    broken = tmp_path / "cut.tfrecord"
    broken.write_bytes(mlp_log.read_bytes()[:-7])
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    graph = ("--graph", mlp_servers.graph_grpc)
    npz = tmp_path / "p.npz"
    np.savez(npz, images=np.zeros((1, 784), np.float32))
    for args, said in (
        (["--traffic", str(tmp_path / "none")], "no such file"),
        (["--traffic", str(empty)], "is empty"),
        (["--traffic", str(broken)], "is truncated or corrupt after 29 whole records"),
        (["--traffic", str(mlp_log), "--traffic-model", "bert"],
         "no predict request of model 'bert', signature 'serving_default' (the file holds 30 "
         "predict of 'mlp' (serving_default))"),
        (["--traffic", str(mlp_log), "--payload-file", str(npz)],
         "--traffic and --payload-file both say what to send"),
        (["--slo", "answers.mismatch==0"], "answers are checked under --traffic FILE only"),
    ):  # fmt: skip
        code, output = _compare(*graph, *_SHORT, "--out", str(tmp_path / "out"), *args)
        assert code == 2, (args, output)
        assert said in " ".join(output.split()), output
        assert not (tmp_path / "out" / "raw" / "records.npz").exists()  # nothing was sent


def test_compare_refuses_records_that_do_not_fit_the_signature(
    mlp_servers: Servers, tmp_path: Path
) -> None:
    from tensorflow_serving.apis import prediction_log_pb2

    log = prediction_log_pb2.PredictionLog()
    log.predict_log.request.model_spec.name = "mlp"
    wrong = tf.make_tensor_proto(np.zeros((2, 10), np.float32))
    log.predict_log.request.inputs["images"].CopyFrom(wrong)
    path = tmp_path / "wrong.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(log.SerializeToString())
    code, output = _compare(
        "--graph", mlp_servers.graph_grpc, "--traffic", str(path), *_SHORT,
        "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 2, output
    said = " ".join(output.split())
    assert "record 0, input 'images': float32 of shape [2, 10]; signature 'serving_default'" in said
    assert "of metadata of graph" in said and "[-1, 784]" in said


def test_late_requests_say_whether_they_waited_for_a_cpu() -> None:
    """A late send whose thread waited for a CPU half its lateness or more is counted so, and
    the warning names the busy cores when they explain most of the late."""
    from graphserve.loadtest.replay.report import Adherence, ArmReplay
    from graphserve.loadtest.replay.run import _late_waiting_for_cpu, _warnings
    from graphserve.loadtest.replay.send import Outcome

    def sent(position: int, late_ms: float, waited_ms: float | None) -> Outcome:
        due = position * 0.002
        return Outcome(position, due, due + late_ms / 1e3, 1.0, b"", None, waited_ms)

    outcomes = [sent(0, 0.1, 0.0), sent(1, 5.0, 4.0), sent(2, 5.0, 1.0), sent(3, 3.0, 2.0)]
    assert _late_waiting_for_cpu(outcomes) == 2  # 4 of 5 ms and 2 of 3 ms; not 1 of 5
    assert _late_waiting_for_cpu([*outcomes, sent(4, 0.0, None)]) is None  # not known
    adherence = Adherence(
        scheduled=4, sent=4, on_time=1, on_time_ms=2.0, lateness_p50_ms=4.0,
        lateness_p99_ms=5.0, lateness_max_ms=5.0, planned_rps=500.0, sent_rps=500.0,
        late_senders_busy=0, late_cpu_wait=2,
    )  # fmt: skip
    arm = ArmReplay(
        name="graph", address="127.0.0.1:1", requests=4, failed=0, errors={},
        latency_ms={}, throughput_rps=None, adherence=adherence, shapes=[], answers=[],
    )  # fmt: skip
    (warning,) = _warnings([arm])
    assert "2 of the 3 late waited for a CPU" in warning and "cores were busy" in warning
