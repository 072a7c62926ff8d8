"""The load test: targets, metadata → specs, payloads, locust statistics, the report, the CLI, and
real short locust runs against the real graph and eager servers of `mlp_servers`."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import typer
from google.protobuf import json_format
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow_serving.apis import get_model_metadata_pb2, predict_pb2
from typer.testing import CliRunner

from exporter.signature import TensorSpec
from loadtest import ArmResult, ComparisonReport, RunSettings, compare
from loadtest.cli import app, parse_duration
from loadtest.compare import LOCUSTFILE
from loadtest.errors import PayloadError, RemoteTargetError
from loadtest.metadata import specs_from_grpc_metadata, specs_from_rest_metadata
from loadtest.payloads import (
    build_payload,
    grpc_request_bytes,
    load_payload,
    rest_body,
    save_payload,
)
from loadtest.report import render_markdown, write_report
from loadtest.stats import arm_result, percentile
from loadtest.targets import check_loopback, http_base_url
from serving.codec import array_from_proto, shape_proto

# ---------------------------------------------------------------------------------------------
# Durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("20s", 20), ("1m", 60), ("90", 90), ("1m30s", 90), ("2h", 7200), (" 5S ", 5)],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "0s", "-5", "1.5s", "5d", "s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(typer.BadParameter, match="duration"):
        parse_duration(text)


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
    with pytest.raises(PayloadError, match=r"input 'u' has an unknown rank"):
        specs_from_grpc_metadata(response, "unranked")
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
# Locust statistics: an entry of a real `--json-file` from a 5 s gRPC run on this machine. Locust's
# own _stats.csv of that run gave 50% = 3, 90% = 3, 99% = 4 and missed the last 2 requests.

LOCUST_ENTRY = {
    "name": "Predict",
    "method": "grpc",
    "last_request_timestamp": 1795211309.2596083,
    "start_time": 1795211304.1480703,
    "num_requests": 3398,
    "num_none_requests": 0,
    "num_failures": 0,
    "total_response_time": 10095.897320999105,
    "max_response_time": 121.1243039999772,
    "min_response_time": 2.587989000005564,
    "total_content_length": 254850,
    "response_times": {"4": 29, "10": 1, "8": 1, "3": 3358, "5": 7, "120": 2},
    "num_reqs_per_sec": {"1795211304": 569, "1795211305": 670},
    "num_fail_per_sec": {},
}


def test_arm_result_from_real_locust_statistics() -> None:
    result = arm_result("graph", "127.0.0.1:8500", [LOCUST_ENTRY])
    assert (result.requests, result.failures, result.successes) == (3398, 0, 3398)
    assert (result.p50_ms, result.p90_ms, result.p99_ms) == (3, 3, 4)
    assert result.mean_ms == pytest.approx(10095.897320999105 / 3398)
    assert result.rps == pytest.approx(3398 / (1795211309.2596083 - 1795211304.1480703))


def test_arm_result_sums_request_names_and_handles_no_requests() -> None:
    other = {**LOCUST_ENTRY, "num_requests": 2, "num_failures": 2, "total_response_time": 10.0,
             "response_times": {"5": 2}, "last_request_timestamp": 1795211310.0}  # fmt: skip
    both = arm_result("a", "x", [LOCUST_ENTRY, other])
    assert (both.requests, both.failures) == (3400, 2)
    assert both.mean_ms == pytest.approx((10095.897320999105 + 10.0) / 3400)
    # Locust leaves entries without requests out of its file: an empty list is an idle arm.
    idle = arm_result("eager", "x", [])
    assert (idle.requests, idle.rps, idle.p50_ms, idle.mean_ms) == (0, None, None, None)
    assert percentile({}, 0.5) is None


# ---------------------------------------------------------------------------------------------
# The report

TIMES = "\u00d7"  # the multiplication sign after each ratio


def _settings(**overrides: object) -> RunSettings:
    values: dict[str, object] = {
        "protocol": "grpc", "users": 1, "duration_s": 3, "model_name": "mlp",
        "signature_name": "serving_default", "batch_size": 1, "max_requests": None, "seed": 0,
        "payload_file": "out/payload.npz", "timestamp": "2026-01-01T00:00:00+00:00",
        "versions": {"locust": "2.47.0"},
    }  # fmt: skip
    values.update(overrides)
    return RunSettings(**values)  # type: ignore[arg-type]


def _arm(name: str, requests: int, failures: int = 0, **numbers: float | None) -> ArmResult:
    values = {"rps": 100.0, "p50_ms": 2, "p90_ms": 4, "p99_ms": 8, "mean_ms": 2.5, **numbers}
    return ArmResult(name=name, address="127.0.0.1:1", requests=requests, failures=failures,
                     **values)  # type: ignore[arg-type]  # fmt: skip


def test_report_ratios_and_markdown(tmp_path: Path) -> None:
    graph = _arm("graph", 1000, rps=400.0, p50_ms=2, p90_ms=3, p99_ms=5, mean_ms=2.0)
    eager = _arm("eager", 250, rps=100.0, p50_ms=5, p90_ms=6, p99_ms=0, mean_ms=8.0)
    report = ComparisonReport(arms=[graph, eager], settings=_settings())
    assert report.baseline == "eager"
    assert report.ratios == {
        "graph/eager": {"rps": 4.0, "p50_ms": 0.4, "p90_ms": 0.5, "p99_ms": None, "mean_ms": 0.25}
    }
    markdown = render_markdown(report)
    assert "| metric | graph | eager | graph/eager |" in markdown
    assert "| requests | 1000 | 250 |  |" in markdown
    assert f"| throughput (req/s) | 400.0 | 100.0 | 4.00{TIMES} |" in markdown
    assert f"| p50 latency (ms) | 2 | 5 | 0.40{TIMES} |" in markdown
    assert "| p99 latency (ms) | 5 | 0 | — |" in markdown  # a zero baseline has no ratio

    json_path, md_path = write_report(report, tmp_path)
    saved = json.loads(json_path.read_text())
    assert saved["arms"]["graph"]["requests"] == 1000
    assert saved["arms"]["eager"]["successes"] == 250
    assert saved["ratios"]["graph/eager"]["p99_ms"] is None
    assert saved["settings"]["protocol"] == "grpc"
    assert md_path.read_text() == markdown


def test_report_arm_without_successes_has_no_ratios() -> None:
    graph = _arm("graph", 10)
    eager = _arm("eager", 7, failures=7)  # refused every time: its latencies time the refusals
    idle = _arm("idle", 0, rps=None, p50_ms=None, p90_ms=None, p99_ms=None, mean_ms=None)
    report = ComparisonReport(arms=[graph, idle, eager], settings=_settings())
    assert report.arms_without_successes() == ["idle", "eager"]
    assert set(report.ratios) == {"graph/eager", "idle/eager"}
    assert all(v is None for r in report.ratios.values() for v in r.values())
    assert "| p50 latency (ms) | 2 | — | 2 | — | — |" in render_markdown(report)
    with pytest.raises(ValueError, match="unique"):
        ComparisonReport(arms=[graph, graph], settings=_settings())


# ---------------------------------------------------------------------------------------------
# The CLI without servers


def test_cli_refuses_remote_targets(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["compare", "--graph", "10.0.0.1:8500", "--eager", "127.0.0.1:9500",
              "--out", str(tmp_path)],
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
        "import sys, loadtest, loadtest.cli; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'tensorflow', 'locust', 'grpc'}))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# Real locust runs against the real graph and eager servers


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_compare_grpc_against_real_servers(mlp_servers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(
        app,
        ["compare", "--graph", mlp_servers.graph_grpc, "--eager", mlp_servers.eager_grpc,
         "--duration", "3s", "--users", "1", "--model-name", mlp_servers.model_name,
         "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert list(report["arms"]) == ["graph", "eager"]
    for arm in report["arms"].values():
        assert arm["requests"] > 0 and arm["failures"] == 0
        assert 0 <= arm["p50_ms"] <= arm["p90_ms"] <= arm["p99_ms"]
        assert arm["rps"] > 0
    assert report["arms"]["graph"]["address"] == mlp_servers.graph_grpc
    assert set(report["ratios"]["graph/eager"]) == {"rps", "p50_ms", "p90_ms", "p99_ms", "mean_ms"}
    assert report["ratios"]["graph/eager"]["mean_ms"] > 0
    markdown = (tmp_path / "report.md").read_text()
    assert "| metric | graph | eager | graph/eager |" in markdown
    payload = load_payload(tmp_path / "payload.npz")  # the one payload both arms sent
    assert payload["images"].shape == (1, 784) and payload["images"].dtype == np.float32
    assert (tmp_path / "graph_stats.csv").exists() and (tmp_path / "eager_stats.csv").exists()


@pytest.mark.slow
def test_compare_rest_stops_at_max_requests(mlp_servers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    report = compare(
        {"graph": mlp_servers.graph_rest, "eager": mlp_servers.eager_rest},
        tmp_path,
        protocol="rest",
        users=2,
        duration_s=60,
        max_requests=25,
        batch_size=4,
        model_name=mlp_servers.model_name,
    )
    # Both arms ended on the request bound, long before the 60 s run time.
    assert time.monotonic() - started < 60
    assert [(a.name, a.requests, a.failures) for a in report.arms] == [
        ("graph", 25, 0),
        ("eager", 25, 0),
    ]
    assert load_payload(tmp_path / "payload.npz")["images"].shape == (4, 784)


@pytest.mark.slow
def test_compare_reports_an_arm_without_successes(mlp_servers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    nobody = f"127.0.0.1:{_free_port()}"  # nothing listens: every call is refused
    result = CliRunner().invoke(
        app,
        ["compare", "--graph", mlp_servers.graph_grpc, "--eager", nobody, "--duration", "2s",
         "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "no successful request on eager" in result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["arms"]["graph"]["failures"] == 0 and report["arms"]["graph"]["requests"] > 0
    eager = report["arms"]["eager"]
    assert eager["successes"] == 0 and eager["failures"] == eager["requests"]
    assert report["ratios"]["graph/eager"]["p50_ms"] is None


@pytest.mark.slow
def test_locustfile_alone_refuses_a_remote_host() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "-u", "1",
         "-t", "2s", "--host", "10.0.0.1:8500", "GrpcPredictUser"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "'10.0.0.1:8500' is not on this machine" in done.stderr
