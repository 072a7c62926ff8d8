"""The exporter at production grade: contracts, signatures, guards, warm-up, manifest, versions.

Every test writes real SavedModels into tmp_path and reads them back with TensorFlow, protobuf
or the servers' own stubs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core.codec import array_from_proto
from graphserve.core.compat import DEFAULT_TFSERVING_IMAGE, check_tfserving
from graphserve.core.errors import RetraceError, UnsafeOpsError
from graphserve.core.manifest import MANIFEST_FILE, content_hash, read_manifest
from graphserve.core.versions import clean_stale_temporaries
from graphserve.exporter import (
    ExportSpec,
    ParityError,
    SignatureError,
    SourceError,
    VersionExistsError,
    export_model,
    parse_input_spec,
)
from graphserve.model.warmup import MAX_WARMUP_RECORDS, WARMUP_FILE, read_warmup_records
from tests.savedmodels import write_lambda_keras

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def _children(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.exists() else []


def _spec(tmp_path: Path, source: str = "examples:mlp", **kwargs: object) -> ExportSpec:
    defaults: dict[str, object] = {"name": "m", "base_path": tmp_path, "parity_batches": 1}
    return ExportSpec(source=source, **{**defaults, **kwargs})  # type: ignore[arg-type]


def _x(*inputs: str) -> list:
    return [parse_input_spec(i) for i in inputs]


# -- signature contracts -------------------------------------------------------------------

SIGNATURE_YAML = """\
signatures:
  serving_default:
    inputs:
      x: {dtype: float32, shape: [-1, 2]}
    outputs: [total]
  embed:
    function: embed
    inputs:
      x: {dtype: float32, shape: "-1,2"}
    outputs: [embedding, norm]
"""


def test_signature_file_gives_several_named_signatures(tmp_path: Path) -> None:
    file = tmp_path / "signatures.yaml"
    file.write_text(SIGNATURE_YAML)
    result = export_model(_spec(tmp_path, "tests.factories:two_heads", signature_file=file))
    assert list(result.signatures) == ["serving_default", "embed"]
    assert result.signatures["serving_default"]["outputs"] == {
        "total": {"dtype": "float32", "shape": [-1]}
    }
    assert result.signatures["embed"]["outputs"] == {
        "embedding": {"dtype": "float32", "shape": [-1, 2]},
        "norm": {"dtype": "float32", "shape": [-1]},
    }
    loaded = tf.saved_model.load(str(result.path))
    x = tf.constant([[1.0, 0.0], [0.0, 1.0]])
    np.testing.assert_allclose(loaded.signatures["serving_default"](x=x)["total"], [3.0, 7.0])
    embed = loaded.signatures["embed"](x=x)
    np.testing.assert_allclose(embed["embedding"], [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(embed["norm"], [np.sqrt(5.0), 5.0], rtol=1e-6)
    assert result.parity.passed and {o.signature for o in result.parity.outputs} == {
        "serving_default",
        "embed",
    }


def test_signature_flag_adds_a_method_with_the_default_inputs(tmp_path: Path) -> None:
    result = export_model(
        _spec(
            tmp_path,
            "tests.factories:two_heads",
            inputs=_x("x:float32:-1,2"),
            output_names=["total"],
            signatures={"embed": "embed"},
        )
    )
    assert set(result.signatures["serving_default"]["outputs"]) == {"total"}
    # A tuple with no declared names gets Keras export's names, visibly, not silently renamed.
    assert set(result.signatures["embed"]["outputs"]) == {"output_0", "output_1"}
    assert result.signatures["embed"]["function"] == "embed"


def test_json_signature_file_and_its_errors_name_the_field(tmp_path: Path) -> None:
    good = tmp_path / "sig.json"
    good.write_text(json.dumps({"inputs": {"x": {"dtype": "float32", "shape": [-1, 3]}}}))
    result = export_model(_spec(tmp_path, "tests.factories:affine", signature_file=good))
    assert set(result.signatures["serving_default"]["outputs"]) == {"scores", "best"}

    bad = tmp_path / "bad.yaml"
    bad.write_text("signatures:\n  serving_default:\n    inputs:\n      x: {dtype: float32}\n")
    out = runner.invoke(
        app,
        [
            "export",
            "tests.factories:affine",
            "--name",
            "a",
            "--base-path",
            str(tmp_path),
            "--signature-file",
            str(bad),
        ],
    )
    assert out.exit_code == 2
    assert "signatures.serving_default.inputs.x.shape" in out.output
    assert "Field required" in out.output


def test_declared_output_names_must_match_a_dict_result(tmp_path: Path) -> None:
    with pytest.raises(SignatureError, match=r"returns outputs \['best', 'scores'\].*declares"):
        export_model(
            _spec(
                tmp_path,
                "tests.factories:affine",
                inputs=_x("x:float32:-1,3"),
                output_names=["scores", "argmax"],
            )
        )
    assert _children(tmp_path / "m") == []


def test_keras_output_layer_names_are_kept(tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path))
    assert list(result.signatures["serving_default"]["outputs"]) == ["logits"]


def test_module_signatures_export_uint8_and_float_cnn(tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path, "examples:cnn"))
    assert set(result.signatures) == {"serving_default", "float_images"}
    assert result.signatures["serving_default"]["inputs"]["images"]["dtype"] == "uint8"
    assert result.signatures["float_images"]["inputs"]["images"]["dtype"] == "float32"


def test_batch_size_variants_fix_the_batch_dimension(tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path, batch_sizes=[1, 8]))
    assert set(result.signatures) == {
        "serving_default",
        "serving_default_batch1",
        "serving_default_batch8",
    }
    assert result.signatures["serving_default_batch8"]["inputs"]["images"]["shape"] == [8, 784]
    assert result.signatures["serving_default_batch8"]["outputs"]["logits"]["shape"] == [8, 10]
    fn = tf.saved_model.load(str(result.path)).signatures["serving_default_batch1"]
    assert fn(images=tf.zeros([1, 784]))["logits"].shape == (1, 10)
    with pytest.raises(SignatureError, match="needs -1 as its first dimension"):
        export_model(_spec(tmp_path, "examples:power", batch_sizes=[2], inputs=_x("x:int32:10,10")))


def test_jit_compile_is_marked_in_the_graph_warned_and_recorded(tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path, jit_compile=True))
    assert any("XLA" in w for w in result.warnings)
    saved = saved_model_pb2.SavedModel.FromString((result.path / "saved_model.pb").read_bytes())
    functions = saved.meta_graphs[0].graph_def.library.function
    assert any(f.attr["_XlaMustCompile"].b for f in functions)
    manifest = read_manifest(result.path)
    assert manifest is not None and manifest["options"]["jit_compile"] is True


# -- retracing: a diagnosis, and a gate for Python values ------------------------------------


def test_a_function_retracing_per_shape_exports_with_a_diagnosis(tmp_path: Path) -> None:
    """Tracing is the tool's job: an unsigned tf.function __call__ traces per batch shape when
    called eagerly; the export traces it once with the declared signature and says so."""
    result = export_model(
        _spec(tmp_path, "tests.factories:shape_retracing", inputs=_x("x:float32:-1,4"))
    )
    assert result.retrace.source_functions == {"ShapeRetracing.__call__": 4}
    assert result.retrace.exported == {"serving_default": 1}
    first, exported, checked = result.retrace.diagnosis
    assert first.startswith("your own tf.function 'ShapeRetracing.__call__' retraces per batch")
    assert "argument 'x' of shape (1, 4), (2, 4), (3, 4), (5, 4)" in first
    assert "the exported one does not" in first
    assert "input_signature=[tf.TensorSpec([None, 4], tf.float32)] or reduce_retracing" in first
    assert exported.endswith("did not trace again at batch sizes 1, 2, 7")
    assert checked == (
        "exported signature 'serving_default' matches the eager model at batch sizes 1, 2, 7"
    )
    manifest = read_manifest(result.path)
    assert manifest is not None and manifest["traces"]["diagnosis"] == result.retrace.diagnosis
    fn = tf.saved_model.load(str(result.path)).signatures["serving_default"]
    np.testing.assert_allclose(fn(x=tf.ones([7, 4]))["output_0"], np.full((7, 4), 2.0))


def test_a_python_value_that_changes_between_calls_is_named(tmp_path: Path) -> None:
    with pytest.raises(
        RetraceError,
        match=r"argument 'n' of the model's tf.function '_scaled' is a Python value \(1, then 2\)",
    ) as err:
        export_model(
            _spec(tmp_path, "tests.factories:value_retracing", inputs=_x("x:float32:-1,4"))
        )
    assert "functools.partial(fn, n=...)" in str(err.value)
    assert _children(tmp_path / "m") == []


def test_a_shape_relaxing_function_passes_and_traces_are_recorded(tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path, "tests.factories:relaxed", inputs=_x("x:float32:-1,4")))
    assert result.retrace.exported == {"serving_default": 1}
    (traces,) = result.retrace.source_functions.values()
    assert 1 <= traces <= 2
    assert "'Relaxed.__call__' traced" in result.retrace.diagnosis[0]
    manifest = read_manifest(result.path)
    assert manifest is not None and manifest["traces"]["exported"] == {"serving_default": 1}
    assert manifest["traces"]["checked_batch_sizes"] == [1, 2, 7]


def test_the_cli_prints_the_diagnosis_after_the_export(tmp_path: Path) -> None:
    out = runner.invoke(
        app,
        [
            "export",
            "tests.factories:shape_retracing",
            "--name",
            "s",
            "--base-path",
            str(tmp_path),
            "--input",
            "x:float32:-1,4",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "tracing\n" in out.output
    assert "retraces per batch shape when you call it eagerly" in out.output
    assert out.stdout.strip() == str(tmp_path / "s" / "1")


# -- op scan ------------------------------------------------------------------------------


def test_a_model_that_writes_files_is_refused_unless_allowed(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "tests.factories:file_writer", inputs=_x("x:float32:-1,2"))
    with pytest.raises(UnsafeOpsError, match=r"WriteFile \(file\) in .*--allow-op"):
        export_model(spec)
    assert _children(tmp_path / "m") == []

    spec.allow_ops = ["WriteFile"]
    spec.warmup_samples = 0
    result = export_model(spec)
    assert {f.op for f in result.op_scan.flagged} == {"WriteFile"}
    assert any("WriteFile" in w and "--allow-op" in w for w in result.warnings)


# -- parity -------------------------------------------------------------------------------


def test_parity_failure_exits_1_and_leaves_no_version(tmp_path: Path) -> None:
    out = runner.invoke(
        app,
        [
            "export",
            "tests.factories:drifting",
            "--name",
            "d",
            "--base-path",
            str(tmp_path),
            "--input",
            "x:float32:-1,4",
        ],
    )
    assert out.exit_code == 1
    assert "disagrees with the eager model" in out.output and "output_0" in out.output
    assert _children(tmp_path / "d") == []


def test_tolerances_are_per_dtype_and_configurable(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        "tests.factories:drifting",
        inputs=_x("x:float32:-1,4"),
        tolerances={"float32": (1e6, 1.0)},
    )
    result = export_model(spec)
    (output,) = result.parity.outputs
    assert output.dtype == "float32" and output.atol == 1e6 and output.max_abs_error > 0
    with pytest.raises(ParityError):
        export_model(
            _spec(
                tmp_path,
                "tests.factories:drifting",
                inputs=_x("x:float32:-1,4"),
                tolerances={"float64": (1e6, 1.0)},
            )
        )


def test_exact_dtypes_compare_exactly(tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path, "examples:multi_io"))
    by_name = {o.output: o for o in result.parity.outputs}
    assert by_name["bucket"].atol is None and by_name["label"].dtype == "string"
    assert by_name["score"].atol == 1e-4  # the float32 default, relative to the scale


def test_samples_file_npz_and_tf_serving_json(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    npz = tmp_path / "samples.npz"
    np.savez(npz, images=rng.standard_normal((6, 784)).astype(np.float32))
    result = export_model(_spec(tmp_path, samples_file=npz, warmup_samples=2))
    assert result.parity.samples == str(npz)
    first = next(read_warmup_records(result.path)).predict_log.request
    np.testing.assert_array_equal(
        array_from_proto(first.inputs["images"]), np.load(npz)["images"][:1]
    )

    body = tmp_path / "request.json"
    body.write_text(
        json.dumps({"instances": [{"features": [0.5] * 8, "category": 3, "text": "hello"}]})
    )
    result = export_model(_spec(tmp_path, "examples:multi_io", name="mio", samples_file=body))
    assert result.parity.passed and result.parity.samples == str(body)

    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, images=np.zeros((2, 5), np.float32))
    declared = r"input 'images' is declared float32 of shape \[-1, 784\], got shape \[2, 5\]"
    with pytest.raises(SignatureError, match=declared):
        export_model(_spec(tmp_path, samples_file=wrong))


# -- warm-up ------------------------------------------------------------------------------


def test_warmup_records_parse_as_prediction_logs(tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path, "examples:cnn", warmup_samples=3))
    logs = list(read_warmup_records(result.path))
    assert len(logs) == result.warmup_records == 6  # 3 per signature
    requests = [log.predict_log.request for log in logs]
    assert {r.model_spec.signature_name for r in requests} == {"serving_default", "float_images"}
    assert all(r.model_spec.name == "m" for r in requests)
    shapes = [tuple(d.size for d in r.inputs["images"].tensor_shape.dim) for r in requests]
    assert shapes[:3] == [(1, 28, 28, 1), (2, 28, 28, 1), (4, 28, 28, 1)]


def test_warmup_records_replay_against_the_graph_server(mlp_export, mlp_servers) -> None:
    logs = list(read_warmup_records(mlp_export.version_dir))
    assert len(logs) == 4
    with grpc.insecure_channel(mlp_servers.graph_grpc) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        for log in logs:
            request = log.predict_log.request
            response = stub.Predict(request, timeout=30)
            batch = request.inputs["images"].tensor_shape.dim[0].size
            assert array_from_proto(response.outputs["logits"]).shape == (batch, 10)
            assert response.model_spec.name == "mlp"


def test_no_warmup_and_the_record_limit(tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path, warmup_samples=0))
    assert result.warmup_records == 0 and not (result.path / WARMUP_FILE).exists()
    with pytest.raises(ValueError, match="at most 1000"):
        export_model(_spec(tmp_path, warmup_samples=MAX_WARMUP_RECORDS + 1))


# -- manifest -----------------------------------------------------------------------------


def test_manifest_records_what_the_export_did(tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path, batch_sizes=[4]))
    manifest = read_manifest(result.path)
    assert manifest is not None
    assert (result.path / MANIFEST_FILE).is_file()
    assert manifest["tensorflow_version"] == tf.__version__
    assert manifest["source"] == {"text": "examples:mlp", "kind": "example"}
    assert manifest["content_hash"] == content_hash(result.path) == result.content_hash
    assert set(manifest["signatures"]) == {"serving_default", "serving_default_batch4"}
    assert manifest["parity"]["passed"] is True
    assert manifest["warmup"]["records"] == 8
    assert manifest["op_scan"]["flagged"] == []
    assert manifest["options"]["batch_sizes"] == [4]
    # The hash covers every file but the manifest: touching the model changes it.
    (result.path / "assets.extra" / "extra.txt").write_text("x")
    assert content_hash(result.path) != manifest["content_hash"]


# -- versions ------------------------------------------------------------------------------


def test_overwrite_replaces_a_version_in_place(tmp_path: Path) -> None:
    export_model(_spec(tmp_path, version=3))
    with pytest.raises(VersionExistsError, match="--overwrite"):
        export_model(_spec(tmp_path, version=3))
    result = export_model(_spec(tmp_path, version=3, overwrite=True, warmup_samples=1))
    assert result.warmup_records == 1
    assert _children(tmp_path / "m") == ["3"]


def test_keep_prunes_old_versions(tmp_path: Path) -> None:
    for _ in range(3):
        export_model(_spec(tmp_path, warmup_samples=0))
    result = export_model(_spec(tmp_path, warmup_samples=0, keep=2))
    assert result.pruned_versions == [1, 2]
    assert _children(tmp_path / "m") == ["3", "4"]


def test_stale_temporaries_of_dead_exports_are_cleaned(tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = model_dir / f".tmp-1-{dead.stdout.strip()}-deadbeef"
    live = model_dir / f".tmp-1-{os.getppid()}-cafebabe"  # our parent is alive
    for path in (stale, live):
        (path / "variables").mkdir(parents=True)
    assert clean_stale_temporaries(model_dir) == [stale]
    assert live.exists() and not stale.exists()
    live.rename(model_dir / ".tmp-old-format")  # a name without a pid: stale by definition
    result = export_model(_spec(tmp_path, warmup_samples=0))
    assert result.removed_temporaries == [".tmp-old-format"]
    assert _children(model_dir) == ["1"]


# -- sources ------------------------------------------------------------------------------


def test_unsafe_keras_file_needs_allow_unsafe(tmp_path: Path) -> None:
    file = write_lambda_keras(tmp_path / "lambda.keras")
    with pytest.raises(SourceError, match="--allow-unsafe"):
        export_model(_spec(tmp_path, str(file)))
    result = export_model(_spec(tmp_path, str(file), allow_unsafe=True))
    assert any("safe mode off" in w for w in result.warnings)
    assert list(result.signatures["serving_default"]["outputs"]) == ["double"]


def test_savedmodel_directory_re_exports_with_extra_signatures(tmp_path: Path) -> None:
    first = export_model(_spec(tmp_path / "a", warmup_samples=0))
    result = export_model(_spec(tmp_path / "b", str(first.path), batch_sizes=[2]))
    assert set(result.signatures) == {"serving_default", "serving_default_batch2"}
    assert result.parity.passed
    x = np.random.default_rng(0).standard_normal((2, 784)).astype(np.float32)
    before = tf.saved_model.load(str(first.path)).signatures["serving_default"]
    after = tf.saved_model.load(str(result.path)).signatures["serving_default_batch2"]
    np.testing.assert_allclose(after(images=x)["logits"], before(images=x)["logits"], atol=1e-6)


# -- TF Serving compatibility -------------------------------------------------------------


def test_tfserving_version_check() -> None:
    newer = check_tfserving("2.21.0", "tensorflow/serving:2.19.1-gpu")
    assert newer.compatible is False and "newer than" in newer.message
    assert check_tfserving("2.19.0", "tensorflow/serving:2.19.1-gpu").compatible is True
    unpinned = check_tfserving("2.19.0", "tensorflow/serving:latest-gpu")
    assert unpinned.compatible is None and "pin" in unpinned.message
    assert check_tfserving("2.19.0", "registry:5000/tensorflow/serving").compatible is None


def test_compose_file_uses_the_pinned_image() -> None:
    compose = (ROOT / "docker" / "compose.yaml").read_text()
    assert f"${{TFSERVING_IMAGE:-{DEFAULT_TFSERVING_IMAGE}}}" in compose


# -- CLI ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "x:float32"], "expected NAME:DTYPE:SHAPE"),
        (["--batch-sizes", "1,x"], "expected comma-separated integers"),
        (["--signature", "nofn"], "expected NAME=fn"),
        (["--tolerance", "float32"], "expected DTYPE=ATOL[,RTOL]"),
        (["--samples-file", "missing.npz"], "does not exist"),
        (["--output", "yaml"], "--output must be 'text' or 'json'"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    out = runner.invoke(
        app, ["export", "examples:mlp", "--name", "m", "--base-path", str(tmp_path), *args]
    )
    assert out.exit_code == 2, out.output
    assert message in out.output
    assert _children(tmp_path) == []


def test_cli_json_carries_signatures_traces_and_warmup(tmp_path: Path) -> None:
    out = runner.invoke(
        app,
        [
            "export",
            "examples:power",
            "--name",
            "power",
            "--base-path",
            str(tmp_path),
            "--warmup-samples",
            "2",
            "--output",
            "json",
        ],
    )
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["signatures"]["serving_default"]["outputs"]["power"]["dtype"] == "int32"
    assert report["traces"]["exported"] == {"serving_default": 1}
    assert report["warmup_records"] == 2
    assert report["tfserving"]["tensorflow_version"] == tf.__version__


# -- the servers serve what the exporter wrote ------------------------------------------------


def test_both_servers_serve_every_signature_of_a_multi_signature_model(tmp_path: Path) -> None:
    from tensorflow_serving.apis import predict_pb2

    from graphserve.core.codec import array_to_proto as to_proto
    from graphserve.serving import ModelRegistry, ModelServer, ServerOptions

    export_model(_spec(tmp_path, "examples:cnn", name="cnn"))
    graph, eager = ModelRegistry(), ModelRegistry()
    graph.load_graph("cnn", tmp_path / "cnn")
    eager.load_eager("cnn", "examples:cnn")
    images = np.random.default_rng(5).integers(0, 256, (2, 28, 28, 1)).astype(np.uint8)
    answers = {}
    ephemeral = ServerOptions(host="127.0.0.1", grpc_port=0, rest_port=0)
    with ModelServer(graph, ephemeral) as g, ModelServer(eager, ephemeral) as e:
        for arm, server in (("graph", g), ("eager", e)):
            with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
                stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
                for signature, x in (
                    ("serving_default", images),
                    ("float_images", images.astype(np.float32) / 255.0),
                ):
                    request = predict_pb2.PredictRequest()
                    request.model_spec.name = "cnn"
                    request.model_spec.signature_name = signature
                    request.inputs["images"].CopyFrom(to_proto(x))
                    response = stub.Predict(request, timeout=30)
                    assert set(response.outputs) == {"logits", "probabilities", "classes"}
                    answers[arm, signature] = array_from_proto(response.outputs["probabilities"])
    np.testing.assert_allclose(
        answers["graph", "serving_default"], answers["eager", "serving_default"], atol=1e-5
    )
    np.testing.assert_allclose(
        answers["graph", "float_images"], answers["graph", "serving_default"], atol=1e-5
    )


def test_graph_server_refuses_a_version_whose_warmup_records_fail(tmp_path: Path) -> None:
    from graphserve.model.warmup import warmup_requests, write_warmup_records
    from graphserve.serving import ModelRegistry
    from graphserve.serving.registry import ModelLoadError

    result = export_model(_spec(tmp_path, warmup_samples=0))
    wrong = warmup_requests("m", {"serving_default": _x("pixels:float32:-1,784")}, 1)
    write_warmup_records(result.path, wrong)
    with pytest.raises(ModelLoadError, match=r"warm-up record .* failed.*pixels"):
        ModelRegistry().load_graph("m", tmp_path / "m")


def test_tf1_savedmodel_re_exports_its_predict_signatures(tmp_path: Path) -> None:
    from tests.savedmodels import write_tf1_multi_signature

    source = write_tf1_multi_signature(tmp_path / "tf1")
    result = export_model(_spec(tmp_path, str(source), batch_sizes=[2]))
    assert set(result.signatures) == {"serving_default", "serving_default_batch2"}
    assert set(result.signatures["serving_default"]["outputs"]) == {"probabilities", "class_ids"}
    skipped = " ".join(result.warnings)
    assert "'classify'" in skipped and "'regress'" in skipped and "'any_rank'" in skipped
    fn = tf.saved_model.load(str(result.path)).signatures["serving_default"]
    probabilities = fn(x=tf.constant([[1.0, 0.0, 0.0]]))["probabilities"].numpy()
    np.testing.assert_allclose(probabilities, [[0.880797, 0.119203]], atol=1e-5)


def test_a_savedmodel_with_nothing_to_run_from_python_says_why(tmp_path: Path) -> None:
    """An existing SavedModel whose signatures cannot be re-run from Python (here, an input of
    unknown rank) names each one and why, where `--input` could not help."""
    from graphserve.core.errors import SignatureError
    from graphserve.model.sources import load_source, resolve_contracts

    module = tf.Module()
    module.f = tf.function(lambda t: {"y": t * 2.0}, input_signature=[tf.TensorSpec(None)])
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.f})
    with pytest.raises(
        SignatureError,
        match=r"no signature graphserve can run from Python: "
        r"signature 'serving_default' .* has an input of unknown rank",
    ):
        resolve_contracts(load_source(str(tmp_path / "sm")))
