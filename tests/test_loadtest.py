"""The load test: targets, metadata → specs, payloads, locust statistics, the report, the CLI, and
real short locust runs against the real graph and eager servers of `mlp_servers`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import typer
from google.protobuf import json_format
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow_serving.apis import get_model_metadata_pb2, predict_pb2
from typer.testing import CliRunner

from graphserve.core.codec import array_from_proto, shape_proto
from graphserve.core.errors import LoadTestError, PayloadError, RemoteTargetError
from graphserve.core.processes import free_port
from graphserve.core.signature import TensorSpec
from graphserve.loadtest.cli import app, parse_loads
from graphserve.loadtest.generator.metadata import (
    specs_from_grpc_metadata,
    specs_from_rest_metadata,
)
from graphserve.loadtest.generator.payloads import (
    build_payload,
    grpc_request_bytes,
    load_payload,
    rest_body,
    save_payload,
)
from graphserve.loadtest.generator.scrape import scrape, snapshot_from_text
from graphserve.loadtest.generator.targets import check_loopback, http_base_url
from graphserve.loadtest.results.run import REPORT_SCHEMA

# ---------------------------------------------------------------------------------------------
# Targets: loopback only unless --allow-remote


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1:8500",
        "127.8.9.10:1",
        "localhost:8500",
        "LOCALHOST:8500",
        "[::1]:8500",
        "http://127.0.0.1:8501",
        "https://localhost:8501/",
    ],
)
def test_check_loopback_accepts(address: str) -> None:
    check_loopback(address)


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.1:8500",
        "example.com:8500",
        "http://example.com:8501",
        "0.0.0.0:8500",
        "[::2]:8500",
        "localhost.example.com:8500",
    ],
)
def test_check_loopback_refuses(address: str) -> None:
    with pytest.raises(RemoteTargetError, match="--allow-remote"):
        check_loopback(address)
    check_loopback(address, allow_remote=True)


def test_check_loopback_refuses_unreadable_address_even_when_remote_allowed() -> None:
    with pytest.raises(RemoteTargetError, match="invalid port"):
        check_loopback("127.0.0.1:http", allow_remote=True)
    with pytest.raises(RemoteTargetError, match="not an address"):
        check_loopback("ftp://127.0.0.1:21")


def test_http_base_url() -> None:
    assert http_base_url("127.0.0.1:8501") == "http://127.0.0.1:8501"
    assert http_base_url("http://localhost:8501/") == "http://localhost:8501"


# ---------------------------------------------------------------------------------------------
# Metadata → specs, from a real GetModelMetadataResponse and its REST JSON form


def _signature_map() -> get_model_metadata_pb2.SignatureDefMap:
    def info(dtype: int, shape: tuple[int | None, ...]) -> meta_graph_pb2.TensorInfo:
        return meta_graph_pb2.TensorInfo(name="x:0", dtype=dtype, tensor_shape=shape_proto(shape))

    signature = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
    signature.inputs["images"].CopyFrom(info(types_pb2.DT_FLOAT, (None, 784)))
    signature.inputs["ids"].CopyFrom(info(types_pb2.DT_INT64, (None,)))
    signature.outputs["output_0"].CopyFrom(info(types_pb2.DT_FLOAT, (None, 10)))
    odd = meta_graph_pb2.SignatureDef()
    odd.inputs["z"].CopyFrom(info(types_pb2.DT_COMPLEX64, (None,)))
    unranked = meta_graph_pb2.SignatureDef()
    unranked.inputs["u"].CopyFrom(
        meta_graph_pb2.TensorInfo(dtype=types_pb2.DT_FLOAT, tensor_shape={"unknown_rank": True})
    )
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    signature_map.signature_def["serving_default"].CopyFrom(signature)
    signature_map.signature_def["complex"].CopyFrom(odd)
    signature_map.signature_def["unranked"].CopyFrom(unranked)
    return signature_map


def _grpc_metadata() -> get_model_metadata_pb2.GetModelMetadataResponse:
    response = get_model_metadata_pb2.GetModelMetadataResponse()
    response.model_spec.name = "mlp"
    response.metadata["signature_def"].Pack(_signature_map())
    return response


EXPECTED_SPECS = [
    TensorSpec(name="ids", dtype="int64", shape=(None,)),
    TensorSpec(name="images", dtype="float32", shape=(None, 784)),
]


def test_specs_from_grpc_metadata() -> None:
    assert specs_from_grpc_metadata(_grpc_metadata(), "serving_default") == EXPECTED_SPECS


def test_specs_from_rest_metadata_match_grpc() -> None:
    # The JSON TF Serving's REST API returns: proto field names, enum names, int64 as strings.
    document = {
        "model_spec": {"name": "mlp", "signature_name": "", "version": "1"},
        "metadata": {
            "signature_def": json_format.MessageToDict(
                _signature_map(), preserving_proto_field_name=True
            )
        },
    }
    images = document["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
    assert images["images"]["dtype"] == "DT_FLOAT"
    assert images["images"]["tensor_shape"]["dim"][0]["size"] == "-1"
    assert specs_from_rest_metadata(document, "serving_default") == EXPECTED_SPECS


def test_specs_errors_name_the_problem() -> None:
    response = _grpc_metadata()
    with pytest.raises(PayloadError, match=r"no signature 'nope': it has '?complex'?, "):
        specs_from_grpc_metadata(response, "nope")
    with pytest.raises(PayloadError, match=r"input 'z'.*complex64.*--payload-file"):
        specs_from_grpc_metadata(response, "complex")
    # an unknown rank is a shape of its own, sampled as one value per row (tf.Example inputs)
    (unranked,) = specs_from_grpc_metadata(response, "unranked")
    assert unranked.shape is None
    with pytest.raises(PayloadError, match=r"no 'metadata\.signature_def'"):
        specs_from_rest_metadata({"model_spec": {}}, "serving_default")


# ---------------------------------------------------------------------------------------------
# Payloads


def test_build_payload_is_reproducible_and_fits_the_specs() -> None:
    first = build_payload(EXPECTED_SPECS, batch_size=3, seed=7)
    again = build_payload(EXPECTED_SPECS, batch_size=3, seed=7)
    assert first["images"].shape == (3, 784) and first["images"].dtype == np.float32
    assert first["ids"].shape == (3,) and first["ids"].dtype == np.int64
    np.testing.assert_array_equal(first["images"], again["images"])
    with pytest.raises(PayloadError, match="at least 1"):
        build_payload(EXPECTED_SPECS, batch_size=0)


def test_payload_file_round_trip_without_pickle(tmp_path: Path) -> None:
    strings = np.empty((2, 2), dtype=object)
    strings[:] = [[b"a\x00", b"\xff\xfe"], [b"", b"text"]]  # NUL, non-UTF-8, empty: kept exact
    inputs = {
        "images": np.arange(6, dtype=np.float32).reshape(2, 3),
        "mask": np.array([True, False]),
        "tokens": strings,
    }
    path = tmp_path / "payload.npz"
    save_payload(path, inputs)
    with np.load(path, allow_pickle=False) as npz:  # the file itself needs no pickle
        assert sorted(npz.files) == ["images", "mask", "tokens:bytes", "tokens:lengths"]
    loaded = load_payload(path)
    np.testing.assert_array_equal(loaded["images"], inputs["images"])
    assert loaded["images"].dtype == np.float32
    np.testing.assert_array_equal(loaded["mask"], inputs["mask"])
    assert loaded["tokens"].shape == (2, 2)
    assert loaded["tokens"].tolist() == strings.tolist()


def test_load_payload_refuses_pickles_and_missing_files(tmp_path: Path) -> None:
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(PayloadError, match="pickle-free"):
        load_payload(pickled)
    with pytest.raises(PayloadError, match="does not exist"):
        load_payload(tmp_path / "absent.npz")


def test_grpc_request_bytes_decode_to_the_payload() -> None:
    inputs = build_payload(EXPECTED_SPECS, batch_size=2, seed=1)
    request = predict_pb2.PredictRequest.FromString(grpc_request_bytes(inputs, "mlp", "sig"))
    assert request.model_spec.name == "mlp" and request.model_spec.signature_name == "sig"
    assert len(request.inputs["images"].tensor_content) == 2 * 784 * 4
    for name, array in inputs.items():
        np.testing.assert_array_equal(array_from_proto(request.inputs[name]), array)


def test_rest_body_row_and_columnar_formats() -> None:
    images = np.array([[1.5, 2.0], [3.0, 4.0]], dtype=np.float32)
    single = json.loads(rest_body({"images": images}))
    assert single == {"signature_name": "serving_default", "instances": [[1.5, 2.0], [3.0, 4.0]]}

    words = np.array([b"a", b"b"], dtype=object)
    rows = json.loads(rest_body({"images": images, "words": words}, "sig"))
    assert rows["instances"] == [
        {"images": [1.5, 2.0], "words": "a"},
        {"images": [3.0, 4.0], "words": "b"},
    ]
    # Different batch sizes cannot be rows: the columnar format carries them.
    mixed = json.loads(rest_body({"images": images, "scale": np.array([2.0], np.float32)}))
    assert mixed["inputs"] == {"images": [[1.5, 2.0], [3.0, 4.0]], "scale": [2.0]}
    assert "instances" not in mixed


# ---------------------------------------------------------------------------------------------
# The CLI without servers


def test_cli_refuses_remote_targets(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["compare", "--graph", "10.0.0.1:8500", "--eager", "127.0.0.1:9500",
              "--model-name", "mlp", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "'10.0.0.1:8500' is not on this machine" in result.output
    assert not (tmp_path / "payload.npz").exists()


def test_cli_bad_duration_is_a_usage_error() -> None:
    result = CliRunner().invoke(
        app, ["compare", "--graph", "127.0.0.1:1", "--eager", "127.0.0.1:2", "--duration", "5d"]
    )
    assert result.exit_code == 2
    assert "--duration" in result.output and "'5d' is not a duration" in result.output


def test_cli_import_loads_neither_tensorflow_nor_locust() -> None:
    probe = (
        "import sys, loadtest, graphserve.loadtest.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'locust', 'grpc'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_rpc_methods_are_the_tf_serving_ones() -> None:
    from tensorflow_serving.apis import model_service_pb2, prediction_service_pb2

    from graphserve.core.client import RPC_METHODS

    prediction = prediction_service_pb2.DESCRIPTOR.services_by_name["PredictionService"]
    model = model_service_pb2.DESCRIPTOR.services_by_name["ModelService"]
    assert RPC_METHODS["Predict"] == f"/{prediction.full_name}/Predict"
    for service in (prediction, model):
        for method in service.methods:
            if method.name in RPC_METHODS:
                assert RPC_METHODS[method.name] == f"/{service.full_name}/{method.name}"
    assert set(RPC_METHODS) == {m.name for m in prediction.methods} | {"GetModelStatus"}


@pytest.mark.parametrize(
    ("text", "option", "loads"),
    [("1,4,16,64", "--users", (1, 4, 16, 64)), ("100, 250.5", "--rate", (100, 250.5))],
)
def test_parse_loads(text: str, option: str, loads: tuple[float, ...]) -> None:
    assert parse_loads(text, option) == loads


@pytest.mark.parametrize(("text", "option"), [("", "--users"), ("1,0", "--users"),
                                              ("2.5", "--users"), ("a", "--rate")])  # fmt: skip
def test_parse_loads_rejects(text: str, option: str) -> None:
    with pytest.raises(typer.BadParameter, match="comma-separated list of positive"):
        parse_loads(text, option)


def test_cli_needs_arms_or_a_model() -> None:
    result = CliRunner().invoke(app, ["compare", "--users", "1"])
    assert result.exit_code == 2
    assert "name the arms" in result.output


def test_cli_needs_the_model_name_for_addresses(tmp_path: Path) -> None:
    # TF Serving's APIs address a model by name; there is no right default (it was "mlp").
    result = CliRunner().invoke(
        app, ["compare", "--graph", "127.0.0.1:1", "--eager", "127.0.0.1:2", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "--model-name" in result.output and "--model-base-path" in result.output
    assert not (tmp_path / "plan.json").exists()


def test_string_inputs_from_metadata_alone_are_said_to_be_words() -> None:
    """By address, the payload comes from the server's metadata, which says "string" and not
    "JPEG": the run warns, naming the input and what to give instead."""
    from graphserve.loadtest.comparison.run import Arm, CompareSpec, _words_only

    arms = (Arm("graph", "127.0.0.1:1"),)
    inputs = {"image_bytes": np.array([b"the cat"], dtype=object), "x": np.zeros(1)}
    assert _words_only(CompareSpec(arms, model_name="m"), inputs) == (
        "string input image_bytes: phrases of words, from the server's metadata alone; if the "
        "model decodes it (images, tf.Examples), pass --model-base-path BASE (the export's "
        "manifest records what it takes) or --payload-file"
    )
    assert _words_only(CompareSpec(arms, model_name="m"), {"x": np.zeros(1)}) is None
    with_base = CompareSpec(arms, model_name="m", model_base_path=Path("models/m"))
    assert _words_only(with_base, inputs) is None


def test_model_name_comes_from_the_option_or_the_base_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphserve.loadtest.comparison.run import Arm, CompareSpec, compare, model_name_of

    arms = (Arm("graph", "127.0.0.1:1"),)
    assert model_name_of(CompareSpec(arms, model_base_path=Path("models/mobilenet"))) == "mobilenet"
    (tmp_path / "tiny").mkdir()
    monkeypatch.chdir(tmp_path / "tiny")
    assert model_name_of(CompareSpec(arms, model_base_path=Path("."))) == "tiny"
    named = CompareSpec(arms, model_name="m", model_base_path=Path("models/mobilenet"))
    assert model_name_of(named) == "m"
    with pytest.raises(LoadTestError, match="pass --model-name NAME"):
        compare(CompareSpec(arms), tmp_path)
    assert not (tmp_path / "plan.json").exists()


def test_cli_bad_slo_fails_before_any_load(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["compare", "--graph", "127.0.0.1:1", "--eager", "127.0.0.1:2", "--model-name", "m",
              "--slo", "p99<<5", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--slo 'p99<<5'" in result.output
    assert not (tmp_path / "plan.json").exists()


def test_scrape_reads_both_metric_dialects() -> None:
    ours = """# TYPE graphserve_requests_total counter
graphserve_requests_total{model="mlp",version="1",signature="serving_default",runner="graph",protocol="grpc",status="OK"} 7.0
graphserve_requests_total{model="other",version="1",signature="s",runner="graph",protocol="grpc",status="OK"} 5.0
# TYPE graphserve_request_latency_seconds histogram
graphserve_request_latency_seconds_count{model="mlp",version="1",signature="serving_default",runner="graph",protocol="grpc"} 7.0
graphserve_request_latency_seconds_sum{model="mlp",version="1",signature="serving_default",runner="graph",protocol="grpc"} 0.014
"""  # noqa: E501
    snapshot = snapshot_from_text(ours, "mlp")
    assert snapshot.requests == 7 and snapshot.request_count == 7
    assert snapshot.request_sum_s == pytest.approx(0.014)
    tfserving = """# TYPE :tensorflow:serving:request_count counter
:tensorflow:serving:request_count{model_name="mlp",status="OK"} 3
# TYPE :tensorflow:serving:runtime_latency histogram
:tensorflow:serving:runtime_latency_bucket{API="Predict",model_name="mlp",runtime="TF1",le="+Inf"} 3
:tensorflow:serving:runtime_latency_sum{API="Predict",model_name="mlp",runtime="TF1"} 1500
:tensorflow:serving:runtime_latency_count{API="Predict",model_name="mlp",runtime="TF1"} 3
"""
    snapshot = snapshot_from_text(tfserving, "mlp")
    assert snapshot.requests == 3 and snapshot.runtime_count == 3
    assert snapshot.runtime_sum_s == pytest.approx(0.0015)  # microseconds -> seconds


# ---------------------------------------------------------------------------------------------
# Real locust sweeps against real graph and eager servers with metrics on


@pytest.fixture(scope="module")
def metered_servers(mlp_export):  # type: ignore[no-untyped-def]
    from graphserve.core.defaults import DEFAULT_METRICS_PATH
    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions

    graph_registry = ModelRegistry()
    graph_registry.load_graph("mlp", mlp_export.model_dir)
    eager_registry = ModelRegistry()
    eager_registry.load_eager("mlp", "examples:mlp")
    options = ServerOptions(
        host="127.0.0.1", grpc_port=0, rest_port=0, metrics_path=DEFAULT_METRICS_PATH
    )
    with (
        ModelServer(graph_registry, options) as graph,
        ModelServer(eager_registry, options) as eager,
    ):
        yield {
            name: {
                "grpc": f"127.0.0.1:{server.grpc_port}",
                "rest": f"127.0.0.1:{server.rest_port}",
                "metrics": f"http://127.0.0.1:{server.rest_port}{DEFAULT_METRICS_PATH}",
            }
            for name, server in (("graph", graph), ("eager", eager))
        }


_SHORT = ["--warmup", "0.5s", "--window", "0.5s", "--min-windows", "2", "--max-windows", "2"]


def _server_requests(url: str) -> float:
    snapshot = scrape(url, "mlp")
    assert snapshot is not None
    return snapshot.requests


def test_sweep_report_against_real_servers(metered_servers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    servers = metered_servers
    before = {name: _server_requests(s["metrics"]) for name, s in servers.items()}
    result = CliRunner().invoke(
        app,
        ["compare", "--users", "1,2", *_SHORT, "--model-name", "mlp", "--out", str(tmp_path),
         "--graph", servers["graph"]["grpc"], "--eager", servers["eager"]["grpc"],
         "--metrics", f"graph={servers['graph']['metrics']}",
         "--metrics", f"eager={servers['eager']['metrics']}",
         "--slo", "ratio.throughput>0", "--max-failures", "0"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["schema"] == REPORT_SCHEMA == "graphserve.loadtest/4"
    assert report["settings"]["arm_order"] == ["graph", "eager"]
    assert report["settings"]["baseline"] == "eager"
    assert [step["load"] for step in report["steps"]] == [1, 2]

    # Every request the client sent is one the server counted, per arm, over the whole run.
    for name, s in servers.items():
        client = sum(step["arms"][name]["requests"] for step in report["steps"])
        assert client == _server_requests(s["metrics"]) - before[name] > 0

    for step in report["steps"]:
        for name, arm in step["arms"].items():
            assert arm["failures"] == 0 and arm["errors"] == {}
            assert arm["requests"] == arm["warmup_requests"] + arm["measured_requests"]
            assert arm["server"]["requests"] == arm["requests"]  # scraped around the step
            assert len(arm["windows"]) == 2 and arm["throughput_rps"] > 0
            latency = arm["latency_ms"]
            ordered = [latency[k] for k in ("min", "p50", "p90", "p95", "p99", "p99.9", "max")]
            assert ordered == sorted(ordered) and ordered[0] > 0, (name, latency)
            for key, (low, high) in arm["ci95_ms"].items():
                assert low <= latency[key] <= high, (name, key)
            breakdown = arm["server"]["breakdown_ms"]
            assert 0 < breakdown["model"] < arm["server"]["request_mean_ms"] < latency["mean"]
            assert sum(breakdown.values()) == pytest.approx(latency["mean"])
        ratio = step["ratios"]["graph/eager"]
        assert ratio["p50"]["ci95"][0] <= ratio["p50"]["value"] <= ratio["p50"]["ci95"][1]
        assert ratio["throughput"]["value"] > 0

    # Windows alternate: each round reverses the arms' order (graph eager, eager graph).
    phases = json.loads((tmp_path / "raw" / "phases.json").read_text())["phases"]
    windows = [(p["step"], p["window"], p["arm"]) for p in phases if p["kind"] == "window"]
    assert windows[:4] == [(0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 0)]

    records = np.load(tmp_path / "raw" / "records.npz")
    assert records["latency_ms"].size == sum(
        arm["requests"] for step in report["steps"] for arm in step["arms"].values()
    )
    stats_csv = (tmp_path / "locust_stats.csv").read_text()
    assert "graph" in stats_csv and "eager" in stats_csv
    assert report["slo"]["passed"] is True and report["slo"]["failures"] == 0
    assert len(report["headline"]) == 2 and report["title"].startswith("mlp: graph vs eager")
    _assert_html_images_decode(tmp_path / "report.html")


def _assert_html_images_decode(path: Path) -> None:
    import base64
    import io
    import re

    from PIL import Image

    html = path.read_text()
    sources = re.findall(r'<img[^>]* src="([^"]+)"', html)
    assert len(sources) >= 3
    for source in sources:
        assert source.startswith("data:image/png;base64,")
        image = Image.open(io.BytesIO(base64.b64decode(source.split(",", 1)[1])))
        image.verify()
        assert image.size[0] > 100 and image.size[1] > 100
    assert "http://" not in html and "https://" not in html


def test_slo_breach_exits_3_over_rest(metered_servers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    servers = metered_servers
    result = CliRunner().invoke(
        app,
        ["compare", "--protocol", "rest", "--rest-format", "columnar", "--users", "2", *_SHORT,
         "--model-name", "mlp",
         "--graph", servers["graph"]["rest"], "--eager", servers["eager"]["rest"],
         "--slo", "p99<0.001ms", "--slo", "ratio.p50<100", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 3, result.output
    assert "SLO missed: p99<0.001ms missed on graph at 2 users" in result.output
    report = json.loads((tmp_path / "report.json").read_text())
    gates = {(g["expression"], g["passed"]) for g in report["slo"]["gates"]}
    assert gates == {("p99<0.001ms", False), ("ratio.p50<100", True)}
    body = json.loads((tmp_path / "request.bin").read_bytes())
    assert set(body) == {"signature_name", "inputs"}  # the columnar format
    # REST arms on our servers get their metrics found on the same port.
    assert report["arms"]["graph"]["metrics_url"] == servers["graph"]["metrics"]
    assert report["steps"][0]["arms"]["graph"]["server"]["requests"] > 0


def test_open_loop_distributed_stops_at_max_requests(metered_servers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    servers = metered_servers
    before = _server_requests(servers["graph"]["metrics"])
    result = CliRunner().invoke(
        app,
        ["compare", "--arm", f"graph={servers['graph']['grpc']}", "--rate", "200",
         "--model-name", "mlp",
         "--arrivals", "poisson", "--workers", "2", "--max-requests", "300",
         "--warmup", "0.5s", "--window", "1s", "--min-windows", "3", "--max-windows", "60",
         "--metrics", f"graph={servers['graph']['metrics']}", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["truncated"] == "max requests (300) reached"
    arm = report["steps"][0]["arms"]["graph"]
    assert arm["requests"] == 300  # 150 per worker, never more
    assert _server_requests(servers["graph"]["metrics"]) - before == 300
    assert arm["open_loop"]["target_rps"] == 200 and arm["open_loop"]["achieved_rps"] > 0
    assert report["settings"]["workers"] == 2 and report["steps"][0]["ratios"] == {}


def test_an_arm_without_successes_exits_1(metered_servers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens: every call is refused
    result = CliRunner().invoke(
        app,
        ["compare", "--graph", metered_servers["graph"]["grpc"], "--eager", nobody, *_SHORT,
         "--model-name", "mlp", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "no successful request on eager" in result.output
    report = json.loads((tmp_path / "report.json").read_text())
    eager = report["steps"][0]["arms"]["eager"]
    assert eager["failures"] == eager["measured_requests"] > 0
    assert any(message.startswith("UNAVAILABLE") for message in eager["errors"])
    assert report["steps"][0]["ratios"]["graph/eager"]["p50"]["value"] is None


def test_a_run_in_which_every_request_failed_never_says_the_slo_passed(
    mlp_export,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens: every call is refused
    result = CliRunner().invoke(
        app,
        ["compare", "--graph", nobody, "--model-base-path", str(mlp_export.model_dir), *_SHORT,
         "--max-failures", "1000000", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 1, result.output  # an arm with no answer: the job failed
    assert "SLO: not judged: every request failed" in result.output
    assert "passed" not in result.output
    assert "no successful request on graph" in result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["slo"]["passed"] is False and report["slo"]["failures"] > 0
    assert "**SLO not judged: every request failed ✗**" in (tmp_path / "report.md").read_text()


def test_a_rest_body_payload_with_grpc_is_a_usage_error(tmp_path: Path) -> None:
    body = tmp_path / "body.json"
    body.write_text('{"instances": [[1.0]]}')
    result = CliRunner().invoke(
        app,
        ["compare", "--graph", "127.0.0.1:1", "--model-name", "mlp", "--payload-file", str(body),
         "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.replace("│", " ").split())
    assert f"'{body}' is a REST predict body (.json), which gRPC cannot send" in message
    assert "--protocol grpc takes an .npz of inputs" in message
    assert "--protocol rest" in message
    assert not (tmp_path / "out").exists()  # refused before any work


def test_the_report_names_the_payload_file(
    metered_servers,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.chdir(tmp_path)
    images = TensorSpec(name="images", dtype="float32", shape=(None, 784))  # the MLP's input
    save_payload(tmp_path / "inputs.npz", build_payload([images], batch_size=2, seed=3))
    result = CliRunner().invoke(
        app,
        ["compare", "--graph", metered_servers["graph"]["grpc"], "--model-name", "mlp",
         "--payload-file", "inputs.npz", *_SHORT, "--out", "out"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    given = f"--payload-file {tmp_path / 'inputs.npz'}"  # absolute: the report is read elsewhere
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["settings"]["payload"]["source"] == given
    assert report["settings"]["payload"]["inputs"]["images"] == {
        "dtype": "float32",
        "shape": [2, 784],
    }
    for name in ("report.md", "report.html"):
        text = (tmp_path / "out" / name).read_text()
        assert f"payload payload.npz: {given}; " in text, name


@pytest.mark.slow
def test_locustfile_alone_refuses_a_remote_host() -> None:
    locustfile = Path(__file__).parent.parent / "loadtest" / "generator" / "locustfile.py"
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "-u", "1",
         "-t", "2s", "--host", "10.0.0.1:8500", "GrpcPredictUser"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "'10.0.0.1:8500' is not on this machine" in done.stderr


def test_calibration_adds_the_null_endpoint_and_reports_render_again(
    metered_servers,
    mlp_export,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    servers = metered_servers
    result = CliRunner().invoke(
        app,
        ["compare", "--arm", f"graph={servers['graph']['grpc']}", "--calibrate",
         "--metrics", f"graph={servers['graph']['metrics']}",
         "--model-base-path", str(mlp_export.model_dir), *_SHORT, "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    # The null endpoint is started on the SavedModel's signature, loaded like any arm, and is
    # the baseline here only because it is the last arm; the calibration section names it.
    assert report["settings"]["arm_order"] == ["graph", "null"]
    assert report["arms"]["null"]["managed"] is True
    null = report["steps"][0]["arms"]["null"]
    assert null["failures"] == 0 and null["throughput_rps"] > 0
    assert (
        null["server"]["runtime_mean_ms"]
        < report["steps"][0]["arms"]["graph"]["server"]["runtime_mean_ms"]
    )
    (calibration,) = report["calibration"]["steps"]
    assert calibration["throughput_rps"] == null["throughput_rps"]
    assert report["settings"]["payload"]["source"] == (
        f"generated with seed 0 from SavedModel {mlp_export.version_dir}"
    )

    (tmp_path / "report.md").unlink()
    rendered = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert rendered.exit_code == 0, rendered.output
    assert "## Calibration" in (tmp_path / "report.md").read_text()


# ---------------------------------------------------------------------------------------------
# Issue 14, failure 3: a self-managed comparison of a model that is not the MLP


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from graphserve.exporter.api import ExportSpec, export_model

    base = tmp_path_factory.mktemp("models")
    export_model(ExportSpec(source="examples:mlp", name="tiny", base_path=base))
    return base / "tiny"


_HEADLINE = re.compile(
    r"graph answers in [\d.]+× the time of eager at (?P<load>1 user|4 users) \(p50 ratio, "
    r"95% CI [\d.]+–[\d.]+(: no clear difference)?\), with [\d.]+× the throughput"  # noqa: RUF001
    r"( \(read with the warnings below\))?\."
)


@pytest.mark.slow
def test_self_managed_report_names_the_model_and_never_breaks_down_negative(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import graphserve.core.logs
    from graphserve.cli import app as graphserve_app

    # As a user runs it, with TF_CPP_MIN_LOG_LEVEL unset: the servers started must inherit the
    # quiet level, so that no "failed call to cuInit" reaches their logs.
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
    monkeypatch.setattr(graphserve.core.logs, "_chosen_by_us", False)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        graphserve_app,
        ["loadtest", "compare", "--model-base-path", str(tiny_model_dir),
         "--source", "examples:mlp", "--users", "1,4", *_SHORT, "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())

    # The model is named by its directory, not "mlp": the title, the settings, the servers.
    assert report["title"] == "tiny: graph vs eager, gRPC, closed loop"
    assert report["settings"]["model_name"] == "tiny"
    for arm in report["arms"].values():
        command = arm["server_command"]
        assert command[command.index("--model-name") + 1] == "tiny"

    # Every part of the server-side breakdown is a difference of means, and none is negative.
    for step in report["steps"]:
        for arm in step["arms"].values():
            server = arm["server"]
            assert server["statistic"] == "mean"
            assert server["client_mean_ms"] == arm["latency_ms"]["mean"]
            parts = server["breakdown_ms"]
            assert all(part >= 0 for part in parts.values()), parts
            if not server["clamped_ms"]:
                assert sum(parts.values()) == pytest.approx(arm["latency_ms"]["mean"])

    # One headline sentence per step opens report.md, report.html and the terminal summary.
    sentences = report["headline"]
    assert [_HEADLINE.fullmatch(s)["load"] for s in sentences] == ["1 user", "4 users"]  # type: ignore[index]
    markdown = (out / "report.md").read_text().split("\n\n")
    assert markdown[:3] == [
        "# tiny: graph vs eager, gRPC, closed loop",
        *(f"**{s}**" for s in sentences),
    ]
    assert "| mean: model / server / client+network |" in "\n\n".join(markdown)
    page = (out / "report.html").read_text()
    assert page.split("<main>\n", 1)[1].splitlines()[1:3] == [
        f'<p class="lead"><strong>{s}</strong></p>' for s in sentences
    ]
    terminal = " ".join(result.stdout.split())
    assert terminal.startswith("tiny: graph vs eager, gRPC, closed loop " + " ".join(sentences))

    for log in ("graph-server.log", "eager-server.log", "locust.log"):
        assert "cuInit" not in (out / log).read_text(errors="replace"), log
