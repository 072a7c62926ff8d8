"""`graphserve inspect` and the op scan on real SavedModels: TF1 SavedModelBuilder, TF2
tf.saved_model.save, Keras model.export(), and small hand-built MetaGraphs for the scan's rules."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core.errors import ExportError
from graphserve.core.manifest import MANIFEST_FILE
from graphserve.core.savedmodel import (
    SavedModelError,
    meta_graph,
    read_saved_model,
    signature_defs,
)
from graphserve.exporter.inspect import inspect_saved_model
from graphserve.model.opscan import GRAPH, OpScan, scan_meta_graph, scan_saved_model
from tests import savedmodels
from tests.savedmodels import CLASSIFY_METHOD, CLEAN_INPUTS, REGRESS_METHOD

PREDICT = "tensorflow/serving/predict"

runner = CliRunner()


@dataclass(frozen=True)
class Models:
    tf1: Path
    clean: Path
    write_file: Path
    read_file: Path
    py_function: Path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Models:
    base = tmp_path_factory.mktemp("savedmodels")
    return Models(
        tf1=savedmodels.write_tf1_multi_signature(base / "tf1"),
        clean=savedmodels.write_clean(base / "clean"),
        write_file=savedmodels.write_with_write_file(base / "write_file"),
        read_file=savedmodels.write_with_read_file(base / "read_file"),
        py_function=savedmodels.write_with_py_function(base / "py_function"),
    )


def _functions_with(scan: OpScan, op: str) -> list[str]:
    return [name for name, counts in scan.functions.items() if op in counts]


# --- signatures -------------------------------------------------------------------------------


def test_tf1_model_lists_every_signature_with_methods_dtypes_and_shapes(models: Models) -> None:
    info = inspect_saved_model(models.tf1)

    assert info.path == models.tf1
    assert info.versions is None
    assert [m.tags for m in info.meta_graphs] == [["serve"]]
    assert info.tensorflow_version.startswith("2.")
    assert info.tensorflow_git_version
    methods = {key: sig.method_name for key, sig in info.signatures.items()}
    assert methods == {
        "any_rank": PREDICT,
        "classify": CLASSIFY_METHOD,
        "regress": REGRESS_METHOD,
        "serving_default": PREDICT,
    }
    default = info.signatures["serving_default"].to_json()
    assert default["inputs"] == {"x": {"dtype": "float32", "shape": [-1, 3], "tensor": "x:0"}}
    assert default["outputs"]["probabilities"]["dtype"] == "float32"
    assert default["outputs"]["probabilities"]["shape"] == [-1, 2]
    assert default["outputs"]["class_ids"]["dtype"] == "int64"
    assert default["outputs"]["class_ids"]["shape"] == [-1]

    classify = info.signatures["classify"]
    assert classify.inputs["inputs"].dtype == "string"
    assert classify.inputs["inputs"].shape == [-1]
    assert classify.inputs["inputs"].tensor == "tf_example:0"
    assert {n: (t.dtype, t.shape) for n, t in classify.outputs.items()} == {
        "classes": ("string", [-1, 2]),
        "scores": ("float32", [-1, 2]),
    }
    regress = info.signatures["regress"]
    assert (regress.outputs["outputs"].dtype, regress.outputs["outputs"].shape) == (
        "float32",
        [-1, 1],
    )
    # Unknown rank is None, not an empty (scalar) shape.
    assert info.signatures["any_rank"].inputs["t"].shape is None
    assert info.signatures["any_rank"].outputs["doubled"].shape is None

    assert info.warmup_records is None and info.warmup_error is None
    assert info.manifest is None and info.manifest_error is None


def test_signature_defs_reads_the_serve_meta_graph(models: Models) -> None:
    sigs = signature_defs(models.clean)
    assert sigs["serving_default"].inputs["x"].name == "serving_default_x:0"


# --- op scan on real SavedModels --------------------------------------------------------------


def test_tf1_saver_ops_live_in_the_main_graph_and_are_not_flagged(models: Models) -> None:
    scan = inspect_saved_model(models.tf1).op_scan

    assert list(scan.functions) == [GRAPH]  # TF1: no library functions at all
    assert scan.functions[GRAPH]["SaveV2"] == 1
    assert scan.functions[GRAPH]["RestoreV2"] == 1
    assert scan.functions[GRAPH]["MatMul"] == 2
    assert scan.ok, scan.flagged
    assert scan.total_ops == sum(scan.functions[GRAPH].values())


def test_tf2_save_and_restore_live_in_traced_functions_and_are_not_flagged(
    models: Models,
) -> None:
    scan = scan_saved_model(models.clean)

    # The main graph only calls functions: the signature, the saver's save and its restore.
    assert scan.functions[GRAPH]["StatefulPartitionedCall"] == 3
    [save] = _functions_with(scan, "SaveV2")
    [restore] = _functions_with(scan, "RestoreV2")
    assert save.startswith("__inference__traced_save_")
    assert restore.startswith("__inference__traced_restore_")
    assert _functions_with(scan, "MergeV2Checkpoints") == [save]
    assert scan.totals()["SaveV2"] == 1
    assert scan.ok, scan.flagged
    assert scan.to_json()["flagged"] == []


@pytest.mark.parametrize(
    ("model", "op", "category"),
    [
        ("write_file", "WriteFile", "file"),
        ("read_file", "ReadFile", "file"),
        ("py_function", "EagerPyFunc", "process"),
    ],
)
def test_file_and_python_ops_are_flagged_naming_their_function(
    models: Models, model: str, op: str, category: str
) -> None:
    scan = scan_saved_model(getattr(models, model))

    assert not scan.ok
    [flagged] = scan.flagged
    assert (flagged.op, flagged.category) == (op, category)
    assert flagged.function.startswith("__inference___call___")
    assert scan.functions[flagged.function][op] == 1
    assert flagged.node == op
    assert flagged.reason
    assert scan.to_json()["flagged"][0]["function"] == flagged.function


def test_keras_export_is_inspected_and_clean(tmp_path: Path) -> None:
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
    model.export(str(tmp_path / "keras"), verbose=False)

    info = inspect_saved_model(tmp_path / "keras")

    assert {"serve", "serving_default"} <= set(info.signatures)
    [tensor] = info.signatures["serving_default"].inputs.values()
    assert (tensor.dtype, tensor.shape) == ("float32", [-1, 4])
    assert info.op_scan.ok, info.op_scan.flagged
    assert _functions_with(info.op_scan, "SaveV2")


# --- op scan rules, on hand-built MetaGraphs --------------------------------------------------


def _meta_graph() -> meta_graph_pb2.MetaGraphDef:
    graph = meta_graph_pb2.MetaGraphDef()
    graph.meta_info_def.tags.append("serve")
    return graph


def _function(graph: meta_graph_pb2.MetaGraphDef, name: str, *ops: str) -> None:
    function = graph.graph_def.library.function.add()
    function.signature.name = name
    for i, op in enumerate(ops):
        function.node_def.add(name=f"{op}_{i}", op=op)


def _call(graph: meta_graph_pb2.MetaGraphDef, name: str, function: str, *inputs: str) -> None:
    node = graph.graph_def.node.add(name=name, op="StatefulPartitionedCall", input=inputs)
    node.attr["f"].func.name = function


def test_unknown_ops_are_flagged_but_function_calls_are_not() -> None:
    graph = _meta_graph()
    _function(graph, "helper", "Mul")
    _function(graph, "outer", "helper", "GraphserveMadeUpOp")  # op "helper" calls a function
    _call(graph, "call", "outer")

    scan = scan_meta_graph(graph)

    assert [(f.op, f.category, f.function) for f in scan.flagged] == [
        ("GraphserveMadeUpOp", "unknown", "outer")
    ]
    assert scan.functions["outer"] == {"GraphserveMadeUpOp": 1, "helper": 1}
    assert scan.total_ops == 4


@pytest.mark.parametrize(
    ("op", "category"),
    [
        ("WriteScalarSummary", "file"),
        ("TFRecordDatasetV2", "file"),
        ("ReaderReadUpToV2", "file"),
        ("ImmutableConst", "file"),
        ("DebugNumericSummaryV2", "file"),
        ("PyFunc", "process"),
        ("CollectiveReduceV2", "network"),
        ("DataServiceDatasetV4", "network"),
        ("BigQueryReader", "network"),  # not in core TF: its category wins over "unknown"
        ("MatMul", None),
        ("StatelessRandomUniformV2", None),
    ],
)
def test_op_categories(op: str, category: str | None) -> None:
    graph = _meta_graph()
    _function(graph, "fn", op)

    scan = scan_meta_graph(graph)

    assert [f.category for f in scan.flagged] == ([category] if category else [])


def test_print_to_a_file_is_flagged_print_to_stderr_is_not() -> None:
    graph = _meta_graph()
    to_file = graph.graph_def.node.add(name="log_to_file", op="PrintV2")
    to_file.attr["output_stream"].s = b"file:///tmp/log.txt"
    to_stderr = graph.graph_def.node.add(name="log", op="PrintV2")
    to_stderr.attr["output_stream"].s = b"stderr"

    [flagged] = scan_meta_graph(graph).flagged

    assert (flagged.node, flagged.category, flagged.function) == ("log_to_file", "file", GRAPH)
    assert "file:///tmp/log.txt" in flagged.reason


def test_checkpoint_ops_are_allowed_only_inside_the_saver_machinery() -> None:
    graph = _meta_graph()
    graph.saver_def.filename_tensor_name = "saver_filename:0"
    graph.saver_def.save_tensor_name = "save_call:0"
    graph.saver_def.restore_op_name = "restore_call"
    graph.graph_def.node.add(name="saver_filename", op="Placeholder")
    _function(graph, "traced_save", "SaveV2", "MergeV2Checkpoints", "nested_save")
    _function(graph, "nested_save", "SaveV2")  # reached through a function-name op
    _function(graph, "traced_restore", "RestoreV2")
    _function(graph, "shared", "RestoreV2")  # called by the saver and by serving
    _function(graph, "serving", "SaveV2")
    _call(graph, "save_call", "traced_save", "saver_filename")
    _call(graph, "restore_call", "traced_restore", "saver_filename", "^also_restore")
    _call(graph, "also_restore", "shared")  # reached through a control input
    _call(graph, "serve", "serving")
    _call(graph, "serve_shared", "shared")
    graph.graph_def.node.add(name="stray_restore", op="RestoreV2")  # main graph, not the saver

    scan = scan_meta_graph(graph)

    flagged = sorted((f.function, f.node) for f in scan.flagged)
    assert flagged == [(GRAPH, "stray_restore"), ("serving", "SaveV2_0"), ("shared", "RestoreV2_0")]
    assert {f.category for f in scan.flagged} == {"file"}


def test_op_lists_name_real_ops() -> None:
    """A typo in an op list would silently never match: every exact name must be a TF op of this
    build, except TF1 contrib's Rpc and TryRpc (globs such as the cloud ops are not checked)."""
    from tensorflow.python.framework import op_def_registry

    from graphserve.model import opscan

    groups = [value for name, value in vars(opscan).items() if name.endswith("_OPS")]
    exact = {op for group in groups for op in group if "*" not in op}
    missing = sorted(op for op in exact if op_def_registry.get(op) is None)
    assert len(groups) == 12
    assert missing == ["Rpc", "TryRpc"]


# --- SavedModel reading and versions ----------------------------------------------------------


def test_model_dir_inspects_the_newest_version(models: Models, tmp_path: Path) -> None:
    model_dir = tmp_path / "m"
    shutil.copytree(models.clean, model_dir / "1")
    shutil.copytree(models.tf1, model_dir / "7")
    (model_dir / ".tmp-9-0123abcd").mkdir()  # an export in progress is not a version
    (model_dir / "notes").mkdir()

    info = inspect_saved_model(model_dir)

    assert info.path == model_dir / "7"
    assert info.versions == [1, 7]
    assert "classify" in info.signatures
    assert info.to_json()["versions"] == [1, 7]
    text = runner.invoke(app, ["inspect", str(model_dir)])
    assert text.exit_code == 0, text.output
    assert "versions 1, 7; showing the newest, 7" in text.stdout


def test_errors_name_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(SavedModelError, match=f"{missing} does not exist"):
        read_saved_model(missing)
    with pytest.raises(SavedModelError, match=r"holds no saved_model\.pb"):
        inspect_saved_model(tmp_path)
    (tmp_path / "saved_model.pb").write_bytes(b"\xff\xff not a protobuf")
    with pytest.raises(SavedModelError, match="is not a valid SavedModel protobuf"):
        read_saved_model(tmp_path)
    assert issubclass(SavedModelError, ExportError)


def test_missing_serve_tags_lists_the_tag_sets_present(tmp_path: Path) -> None:
    saved = saved_model_pb2.SavedModel()
    saved.meta_graphs.add().meta_info_def.tags.extend(["train", "gpu"])
    (tmp_path / "saved_model.pb").write_bytes(saved.SerializeToString())

    with pytest.raises(
        SavedModelError, match=r"no MetaGraph tagged \['serve'\].*\['gpu', 'train'\]"
    ):
        meta_graph(read_saved_model(tmp_path))
    with pytest.raises(SavedModelError, match=str(tmp_path)):
        inspect_saved_model(tmp_path)


# --- warm-up records and manifest -------------------------------------------------------------


def test_warmup_records_are_counted(models: Models, tmp_path: Path) -> None:
    from graphserve.model.warmup import warmup_requests, write_warmup_records

    version = shutil.copytree(models.clean, tmp_path / "1")
    write_warmup_records(version, warmup_requests("m", {"serving_default": CLEAN_INPUTS}, 3))

    info = inspect_saved_model(version)

    assert (info.warmup_records, info.warmup_error) == (3, None)


def test_a_corrupt_warmup_file_is_reported_not_raised(models: Models, tmp_path: Path) -> None:
    from graphserve.model.warmup import WARMUP_FILE

    version = shutil.copytree(models.clean, tmp_path / "1")
    (version / WARMUP_FILE).parent.mkdir(parents=True)
    (version / WARMUP_FILE).write_bytes(b"this is not a TFRecord file at all, just bytes")

    info = inspect_saved_model(version)

    assert info.warmup_records is None
    assert info.warmup_error is not None
    assert "tf_serving_warmup_requests cannot be read" in info.warmup_error


def test_manifest_is_carried_through(models: Models, tmp_path: Path) -> None:
    version = shutil.copytree(models.clean, tmp_path / "1")
    manifest = {"format_version": 1, "source": "examples:mlp", "parity": {"passed": True}}
    (version / MANIFEST_FILE).parent.mkdir(parents=True)
    (version / MANIFEST_FILE).write_text(json.dumps(manifest))

    assert inspect_saved_model(version).manifest == manifest
    text = runner.invoke(app, ["inspect", str(version)])
    assert text.exit_code == 0, text.output
    assert "source: examples:mlp" in text.stdout
    assert "parity: passed=True" in text.stdout

    (version / MANIFEST_FILE).write_text("{not json")
    info = inspect_saved_model(version)
    assert info.manifest is None
    assert (
        info.manifest_error is not None and "graphserve.json cannot be read" in info.manifest_error
    )


# --- the command ------------------------------------------------------------------------------


def test_inspect_text_shows_signatures_ops_and_flags(models: Models) -> None:
    result = runner.invoke(app, ["inspect", str(models.tf1)])

    assert result.exit_code == 0, result.output
    for text in ("serving_default", "classify", "regress", "any_rank", CLASSIFY_METHOD):
        assert text in result.stdout
    assert "<graph>" in result.stdout
    assert "MatMul 2" in result.stdout
    assert "flagged ops: none" in result.stdout
    assert "warm-up records: none" in result.stdout


def test_inspect_reports_flagged_ops_and_still_exits_0(models: Models) -> None:
    result = runner.invoke(app, ["inspect", str(models.write_file)])

    assert result.exit_code == 0, result.output
    assert "flagged ops: 1" in result.stdout
    assert "WriteFile" in result.stdout


def test_inspect_json_is_only_json_on_stdout(models: Models) -> None:
    result = runner.invoke(app, ["inspect", str(models.py_function), "--output", "json"])

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["path"] == str(models.py_function)
    assert report["signatures"]["serving_default"]["inputs"]["x"] == {
        "dtype": "float32",
        "shape": [-1, 2],
        "tensor": "serving_default_x:0",
    }
    assert report["op_scan"]["ok"] is False
    assert report["op_scan"]["flagged"][0]["op"] == "EagerPyFunc"
    assert report["op_scan"]["flagged"][0]["category"] == "process"
    assert report["warmup_records"] is None
    assert report["manifest"] is None


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_inspect_not_a_saved_model_exits_1_with_one_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nothing" if kind == "missing" else tmp_path

    result = runner.invoke(app, ["inspect", str(path), "--output", "json"])

    assert result.exit_code == 1
    assert result.stdout == ""
    message = result.stderr.strip()
    assert message.startswith("inspect failed:")
    assert str(path) in message
    assert "does not exist" in message if kind == "missing" else "no saved_model.pb" in message
    assert "Traceback" not in result.output


def test_inspect_bad_output_is_a_usage_error(models: Models) -> None:
    result = runner.invoke(app, ["inspect", str(models.clean), "--output", "yaml"])

    assert result.exit_code == 2
    assert "--output must be 'text' or 'json'" in result.stderr


def test_help_lists_inspect_without_importing_tensorflow() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from graphserve.cli import app\n"
        "result = CliRunner().invoke(app, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "assert 'inspect' in result.output, result.output\n"
        "print('TF_IMPORTED' if 'tensorflow' in sys.modules else 'TF_NOT_IMPORTED')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "TF_NOT_IMPORTED" in out.stdout


def test_an_input_with_no_shape_is_unknown_not_a_scalar(tmp_path: Path) -> None:
    """TF 1.0 wrote SignatureDef tensors without `tensor_shape`: inspect says unknown rank (and
    JSON null), as serving and the load test's payloads read it, never `[]` (a scalar)."""
    from tests.tf1_models import write_tf1_half_plus_three

    version = write_tf1_half_plus_three(tmp_path / "three" / "00000123")
    info = inspect_saved_model(tmp_path / "three")
    assert info.to_json()["signatures"]["serving_default"]["inputs"]["x"]["shape"] is None
    result = CliRunner().invoke(app, ["inspect", str(version)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "unknown rank" in result.output


def test_the_predicted_resident_memory_counts_variables_graph_and_a_session(
    mlp_export: Any,
) -> None:
    """`inspect` predicts what a version holds once loaded, from its files: its variables, its
    graph (20 bytes per byte of saved_model.pb) and a Session's 1 MiB. The MLP's: 0.41 MB of
    variables, 18.6 kB of graph, measured at 1.5-1.9 MB when loaded on demand."""
    info = inspect_saved_model(mlp_export.version_dir)
    version = Path(mlp_export.version_dir)
    variables = sum(f.stat().st_size for f in (version / "variables").glob("variables.data-*"))
    graph = (version / "saved_model.pb").stat().st_size
    assert info.predicted_resident_bytes == variables + 20 * graph + (1 << 20)
    assert info.to_json()["predicted_resident_bytes"] == info.predicted_resident_bytes
    runner = CliRunner()
    result = runner.invoke(app, ["inspect", str(version)])
    assert result.exit_code == 0, result.output
    assert "predicted resident memory once loaded: 1." in result.output
