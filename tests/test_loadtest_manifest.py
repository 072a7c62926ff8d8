"""Self-managed `loadtest compare` from the export's manifest: the eager servers get the source
and the signature flags (--input, --output-names, --signature-file, --samples-file,
--input-range) the export was given, as the newest version's manifest records them.

`build` is a source these tests export (`tests.test_loadtest_manifest:build`): a plain function
traced without an input signature, so its export and its eager server both need --input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from graphserve.core.errors import LoadTestError
from graphserve.core.manifest import MANIFEST_FILE, read_manifest, write_manifest
from graphserve.core.processes import SERVER_KINDS, export_flags, serve_args
from graphserve.core.signature import parse_input_spec
from graphserve.loadtest.comparison.managed import export_record

SOURCE = "tests.test_loadtest_manifest:build"
INPUT = "x:float32:-1,4"
_SHORT = ["--warmup", "0.5s", "--window", "0.5s", "--min-windows", "2", "--max-windows", "2"]


def build() -> Any:
    """y = 2x + 1, a tf.function without input_signature: nothing declares its input."""
    import tensorflow as tf

    return tf.function(lambda x: x * 2.0 + 1.0)


@pytest.fixture(scope="module")
def needs_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BASE/double exported from `build` with --input x:float32:-1,4; returns BASE/double."""
    from graphserve.exporter import ExportSpec, export_model

    base = tmp_path_factory.mktemp("models")
    export_model(
        ExportSpec(source=SOURCE, name="double", base_path=base, inputs=[parse_input_spec(INPUT)])
    )
    return base / "double"


# ---------------------------------------------------------------------------------------------
# The flags: from the manifest's options to `graphserve serve eager` arguments


def test_export_flags_carry_what_the_export_was_given(tmp_path: Path) -> None:
    signatures = tmp_path / "signatures.yaml"
    signatures.write_text("signatures: {}\n")
    options = {
        "inputs": ["x:float32:-1,4", "k:int64:-1"],
        "output_names": ["y", "z"],
        "signature_file": str(signatures),
        "samples_file": str(tmp_path / "gone.npz"),
        "input_ranges": ["x=0:1"],
        "keep": 3,  # not a serving flag
    }
    flags, missing = export_flags(options)
    assert flags == [
        "--input", "x:float32:-1,4", "--input", "k:int64:-1",
        "--output-names", "y,z",
        "--signature-file", str(signatures),
        "--input-range", "x=0:1",
    ]  # fmt: skip
    assert missing == [str(tmp_path / "gone.npz")]
    # Nothing recorded, nothing passed: no --samples-file or --input-range for a server that
    # may not know them.
    empty = {"inputs": [], "output_names": [], "signature_file": None, "samples_file": None}
    assert export_flags(empty) == ([], [])
    assert export_flags({}) == ([], [])


def test_serve_args_give_the_flags_to_the_kinds_that_run_the_source() -> None:
    flags = ["--input", INPUT]
    for kind, template in SERVER_KINDS.items():
        args = serve_args(kind, "models/m", "pkg:build", flags)
        if "{source}" in template:
            assert args[-2:] == flags and args[1] == "pkg:build", kind
        else:
            assert "--input" not in args and args[-1] == "models/m", kind
    assert serve_args("eager", "models/m", "pkg:build") == ["eager", "pkg:build", "--mode", "call"]


def test_export_record_reads_the_newest_version(needs_input: Path, tmp_path: Path) -> None:
    record = export_record(needs_input)
    assert record is not None
    assert record.manifest == needs_input / "1" / MANIFEST_FILE
    assert (record.source, record.source_kind, record.source_gone) == (SOURCE, "factory", None)
    (recorded,) = record.options["inputs"]  # as the exporter writes it: x:float32:[-1, 4]
    assert parse_input_spec(recorded) == parse_input_spec(INPUT)

    # Version 10 is newer than 9 (numbers, not names); a version without a manifest has none.
    base = tmp_path / "m"
    for version, text in ((9, "old:build"), (10, "new:build")):
        write_manifest(base / str(version), {"source": {"text": text, "kind": "factory"}})
    newest = export_record(base)
    assert newest is not None and newest.source == "new:build"
    (base / "11").mkdir()
    assert export_record(base) is None
    assert export_record(tmp_path / "absent") is None
    (base / "12" / MANIFEST_FILE).parent.mkdir(parents=True)
    (base / "12" / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(LoadTestError, match=r"cannot read .*graphserve\.json"):
        export_record(base)


# ---------------------------------------------------------------------------------------------
# End to end: no --source, a model whose eager server needs --input


@pytest.mark.slow
def test_compare_without_source_serves_the_export_as_it_was_given(
    needs_input: Path, tmp_path: Path
) -> None:
    from graphserve.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["loadtest", "compare", "--model-base-path", str(needs_input), "--users", "1", *_SHORT,
         "--cold-start", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert f"no --source: the eager servers run {SOURCE}, the export's source" in output
    assert "the eager servers get what the export was given: --input x:float32:" in output

    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["arm_order"] == ["graph", "eager"]
    for name, arm in report["steps"][0]["arms"].items():
        assert arm["failures"] == 0 and arm["errors"] == {}, name
        assert arm["measured_requests"] > 0 and arm["latency_ms"]["p50"] > 0, name
    eager = report["arms"]["eager"]["server_command"]
    assert eager[:4] == ["graphserve", "serve", "eager", SOURCE]
    assert parse_input_spec(eager[eager.index("--input") + 1]) == parse_input_spec(INPUT)
    assert "--input" not in report["arms"]["graph"]["server_command"]
    # The cold start's eager server was given the --input too, or it would not have started.
    started = {run["server"] for run in report["cold_start"]["runs"]}
    assert started == {"graph", "eager"}


def test_a_recorded_saved_model_source_that_is_gone_needs_source(
    needs_input: Path, tmp_path: Path
) -> None:
    import shutil

    from graphserve.cli import app

    # A copy whose manifest says it was exported from a SavedModel directory since deleted (the
    # content hash leaves the manifest out, so editing it changes nothing else).
    base = tmp_path / "double"
    shutil.copytree(needs_input, base)
    manifest = read_manifest(base / "1")
    assert manifest is not None
    gone = tmp_path / "exported-elsewhere"
    manifest["source"] = {"text": str(gone), "kind": "savedmodel"}
    write_manifest(base / "1", manifest)

    result = CliRunner().invoke(
        app, ["loadtest", "compare", "--model-base-path", str(base), *_SHORT, "--out",
              str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    message = " ".join(result.output.split())
    assert (
        f"the eager servers need --source (the model's Python source): the export's source, "
        f"the SavedModel directory {gone}, no longer exists; or pass --serve graph" in message
    )
    assert not (tmp_path / "out" / "graph-server.log").exists()  # refused before any server


@pytest.mark.slow
def test_an_eager_server_asking_for_a_flag_is_told_what_compare_can_do(
    needs_input: Path, tmp_path: Path
) -> None:
    import shutil

    from graphserve.cli import app

    # The export's manifest records no --input: the eager server asks for one.
    base = tmp_path / "double"
    shutil.copytree(needs_input, base)
    manifest = read_manifest(base / "1")
    assert manifest is not None
    manifest["options"]["inputs"] = []
    write_manifest(base / "1", manifest)

    result = CliRunner().invoke(
        app, ["loadtest", "compare", "--model-base-path", str(base), *_SHORT, "--out",
              str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    message = " ".join(result.output.split())
    assert "the eager server did not start" in message
    assert "pass --input NAME:DTYPE:SHAPE" in message  # the server's own words
    assert (
        "`loadtest compare` gives the eager server the --input, --output-names, --signature-file, "
        "--samples-file, --input-range and --import its export was given" in message
    )
    assert "pass --serve graph --eager HOST:PORT" in message


def test_without_serve_the_graph_server_runs_alone_when_no_source_is_known(
    needs_input: Path, tmp_path: Path
) -> None:
    from graphserve.loadtest.cli import _serve_kinds

    assert _serve_kinds(None, needs_input, None) == (["graph", "eager"], None)  # recorded
    kinds, why = _serve_kinds(None, tmp_path, None)  # nothing recorded
    assert kinds == ["graph"]
    assert why == (
        f"the graph server alone, no eager arm: {tmp_path} has no graphserve manifest naming "
        "the model's Python source (a SavedModel graphserve did not export); "
        "pass --source MODULE:FACTORY (or a .keras file) for the eager server, or --serve graph "
        "to ask for the graph server alone"
    )
    assert _serve_kinds(None, tmp_path, "pkg:build") == (["graph", "eager"], None)
    assert _serve_kinds("graph, eager-predict", tmp_path, None) == (
        ["graph", "eager-predict"],
        None,
    )
    # An unreadable manifest is not silently a graph-only run: run_managed reports it.
    (tmp_path / "1" / MANIFEST_FILE).parent.mkdir(parents=True)
    (tmp_path / "1" / MANIFEST_FILE).write_text("{not json")
    assert _serve_kinds(None, tmp_path, None) == (["graph", "eager"], None)


def test_serve_without_a_model_base_path_is_a_usage_error() -> None:
    from graphserve.loadtest.cli import app

    result = CliRunner().invoke(app, ["compare", "--serve", "graph", "--graph", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert "--source, --serve and --calibrate start servers on a SavedModel" in " ".join(
        result.output.replace("│", " ").split()
    )
