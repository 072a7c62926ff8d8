"""Op libraries: which ops beyond TensorFlow's a served graph may hold.

TF Serving's model server links TF Text's ops and TF Decision Forests' inference ops besides
TensorFlow's (SUPPORTED_TENSORFLOW_OPS in tensorflow_serving/model_servers/BUILD), and its
`test_tf_text` serves `tf_text_regression`: Predict with x = [2.0] answers y = [3.0]. Our
equivalent of that model comes from TF Text's own generator (tests/savedmodels.write_tf_text).
An op from any other library the exporting process loaded is one TF Serving refuses ("Op type
not registered"): the custom op here (tests/custom_op/plus_one.cc) is compiled with g++ against
the installed TensorFlow's headers, as TensorFlow's "Create an op" guide builds one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core.processes import ServerProcess
from graphserve.model.opscan import scan_meta_graph, scan_saved_model
from tests.savedmodels import TF_TEXT_OPS, write_tf_text

CUSTOM_OP = Path(__file__).parent / "custom_op"
LIBRARY_REFUSAL = "GraphservePlusOne (library) in __inference___call___"


@pytest.fixture(scope="module")
def tf_text_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("tf_text") / "tf_text_regression"
    write_tf_text(base / "1")
    return base


@pytest.fixture(scope="module")
def plus_one_so(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("g++")
    assert compiler, "these tests compile a custom op: install g++ (Debian: apt-get install g++)"
    flags = subprocess.run(
        [sys.executable, "-c", "import tensorflow as tf; s = tf.sysconfig; "
         "print(' '.join(s.get_compile_flags())); print(' '.join(s.get_link_flags()))"],
        capture_output=True, text=True, check=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    ).stdout.splitlines()[-2:]  # fmt: skip
    library = tmp_path_factory.mktemp("custom_op") / "plus_one.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", str(CUSTOM_OP / "plus_one.cc"), "-o", str(library),
         *flags[0].split(), *flags[1].split()],
        check=True, capture_output=True,
    )  # fmt: skip
    return library


def _export(so: Path, base: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PLUS_ONE_SO": str(so),
        "PYTHONPATH": os.pathsep.join([str(CUSTOM_OP), os.environ.get("PYTHONPATH", "")]),
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    return subprocess.run(
        [sys.executable, "-m", "graphserve", "export", "plus_one_model:build", "--name", "plus",
         "--base-path", str(base), "--no-warmup", *extra],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


def test_the_scan_names_tf_text_ops_linked_and_flags_none(tf_text_model: Path) -> None:
    scan = scan_saved_model(tf_text_model / "1")
    assert scan.flagged == []
    assert scan.linked == {op: "TF Text" for op in TF_TEXT_OPS}
    assert scan.linked_by_library() == {"TF Text": sorted(TF_TEXT_OPS)}
    assert all(op in scan.totals() for op in TF_TEXT_OPS)
    shown = CliRunner().invoke(app, ["inspect", str(tf_text_model / "1")], terminal_width=400)
    assert shown.exit_code == 0, shown.output
    assert "flagged ops: none; TF Text ops, which TF Serving links in: CaseFoldUTF8, " in (
        shown.stdout
    )


def test_serve_graph_serves_tf_text_ops_as_tf_serving_test_tf_text_checks(
    tf_text_model: Path, tmp_path: Path
) -> None:
    log = tmp_path / "graph.log"
    args = ["graph", "--model-base-path", str(tf_text_model), "--model-name", "default"]
    # A fresh process: it has not imported tensorflow_text, the scan does it for the model.
    with ServerProcess.on_free_ports(args, "default", log) as server:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "default"
        request.model_spec.signature_name = "serving_default"
        request.inputs["x"].dtype = types_pb2.DT_FLOAT
        request.inputs["x"].float_val.append(2.0)
        request.inputs["x"].tensor_shape.dim.add().size = 1
        request.output_filter.append("y")
        with grpc.insecure_channel(server.grpc_address) as channel:
            reply = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, 60)
        assert reply.outputs["y"].dtype == types_pb2.DT_FLOAT
        assert list(reply.outputs["y"].float_val) == [3.0]
        assert reply.model_spec.version.value == 1
        url = f"http://{server.rest_address}/v1/models/default:predict"
        body = json.dumps({"instances": [2.0]}).encode()
        with urllib.request.urlopen(urllib.request.Request(url, body), timeout=60) as answer:
            assert json.load(answer) == {"predictions": [3.0]}
    logged = log.read_text()
    assert "serving TF Text ops, which TF Serving links in: CaseFoldUTF8, " in logged


def test_export_refuses_an_op_of_another_library_with_what_tf_serving_says(
    plus_one_so: Path, tmp_path: Path
) -> None:
    result = _export(plus_one_so, tmp_path / "models")
    assert result.returncode == 1, result.stderr
    assert LIBRARY_REFUSAL in result.stderr
    assert "registered by an op library loaded into this process (tf.load_op_library)" in (
        result.stderr
    )
    assert '"Op type not registered"' in result.stderr and "--allow-op OP" in result.stderr
    assert not (tmp_path / "models" / "plus" / "1").exists()  # nothing half-written


def test_allow_op_exports_it_and_serve_graph_then_refuses_the_op_it_lacks(
    plus_one_so: Path, tmp_path: Path
) -> None:
    result = _export(plus_one_so, tmp_path / "models", "--allow-op", "GraphservePlusOne")
    assert result.returncode == 0, result.stderr
    assert "GraphservePlusOne (library) in __inference___call___" in result.stderr
    assert "allowed by --allow-op" in result.stderr
    # This process never loaded the library: to it, as to TF Serving, the op is unknown.
    base = tmp_path / "models" / "plus"
    served = CliRunner().invoke(
        app, ["serve", "graph", "--model-base-path", str(base), "--grpc-port", "0"]
    )
    assert served.exit_code == 1
    assert "GraphservePlusOne (unknown) in __inference___call___" in served.stderr
    assert "not registered in this process" in served.stderr and "--allow-op" in served.stderr


def test_serve_eager_runs_the_custom_op_from_the_users_module(
    plus_one_so: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The child inherits both; the module loads the library when the eager server imports it.
    monkeypatch.setenv("PLUS_ONE_SO", str(plus_one_so))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(CUSTOM_OP), *sys.path]))
    args = ["eager", "plus_one_model:build", "--model-name", "plus"]
    with ServerProcess.on_free_ports(args, "plus", tmp_path / "eager.log") as server:
        url = f"http://{server.rest_address}/v1/models/plus:predict"
        body = json.dumps({"instances": [[1.0, 2.0, 3.0]]}).encode()
        with urllib.request.urlopen(urllib.request.Request(url, body), timeout=60) as answer:
            got = json.load(answer)["predictions"]
    np.testing.assert_allclose(got, [[4.0, 6.0, 8.0]])


def test_a_tf_df_op_without_its_package_is_named_as_tf_serving_links_it() -> None:
    graph = meta_graph_pb2.MetaGraphDef()
    graph.graph_def.node.add(name="forest", op="SimpleMLInferenceOpWithHandle")
    graph.graph_def.node.add(name="mine", op="MadeUpOpNobodyRegisters")
    by_op = {f.op: f for f in scan_meta_graph(graph).flagged}
    assert by_op["SimpleMLInferenceOpWithHandle"].category == "unknown"
    assert by_op["SimpleMLInferenceOpWithHandle"].reason == (
        "an op of TF Decision Forests, which TF Serving links in; graphserve serves it when "
        "tensorflow-decision-forests is installed next to its TensorFlow, and it is not"
    )
    assert by_op["MadeUpOpNobodyRegisters"].reason.startswith("not registered in this process")
