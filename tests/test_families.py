"""The models users bring (issues 38, 51), end to end through the documented commands: each
family of bench.families (a module in docs_src/byom) exported as its docstring says, from that
directory (a copy of it, a .keras file saved there by its script), then `graphserve inspect`, one
graph server for all (a model config) and one eager server each, Predict over gRPC and REST on
both equal to the model called in this process, a short `graphserve loadtest compare`, and
`graphserve conformance` against both servers.

Inputs are what a user sends: token ids within the vocabulary with padding, pixels 0..255 (ViT's
normalised), real words, JPEG files, table rows with a city the vocabulary never saw. The
servers' own generated inputs (load check, warm-up, load test, conformance) must fit the models
with no help. Times (export, the load test's p50s) are printed as a table when the
module ends, never asserted on.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from graphserve.cli import app
from tools.bench.families import (
    FAMILIES,
    Exported,
    FamilyServers,
    copy_sources,
    export_family,
    family_servers,
    graphserve,
    run_compare,
)

pytestmark = pytest.mark.slow

NAMES = [f.name for f in FAMILIES]
BY_NAME = {f.name: f for f in FAMILIES}
ARMS = ("graph", "eager")
# Families whose eager server does not run eagerly: the module's __call__ is a tf.function, and
# the archive is a SavedModel, served by its restored functions.
EAGER_RUNS = {"vocab_module": "tf.function", "keras_archive": "restored"}


@dataclass
class Run:
    source_dir: Path  # the copy of docs_src/byom the commands run in
    base: Path
    exports: dict[str, Exported]
    export_errors: dict[str, str]
    servers: FamilyServers
    started_s: float
    table: dict[str, dict[str, float]] = field(default_factory=dict)  # family -> measurements

    def addresses(self, name: str, arm: str) -> tuple[str, str]:
        """gRPC and REST addresses of `arm` serving family `name`."""
        server = self.servers.graph if arm == "graph" else self.servers.eager[name]
        assert server.rest_address is not None
        return server.grpc_address, server.rest_address


def _command(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Run]:
    """Every family exported (two at a time: two cores), then all servers started at once."""
    started = time.perf_counter()
    work = tmp_path_factory.mktemp("families")
    source_dir = copy_sources(work / "byom")
    base = work / "models"

    def export(name: str) -> Exported | str:
        try:
            return export_family(BY_NAME[name], source_dir, base, work / "logs")
        except RuntimeError as exc:
            return str(exc)

    with ThreadPoolExecutor(2) as pool:
        done = dict(zip(NAMES, pool.map(export, NAMES), strict=True))
    exports = {n: e for n, e in done.items() if isinstance(e, Exported)}
    errors = {n: e for n, e in done.items() if isinstance(e, str)}
    if not exports:
        pytest.fail(f"no family exported: {errors}")
    with family_servers(exports, source_dir, work / "servers") as servers:
        result = Run(source_dir, base, exports, errors, servers, started)
        yield result
    _print_table(result, request.config)


def _exported(run: Run, name: str) -> Exported:
    if name in run.export_errors:
        pytest.fail(run.export_errors[name])
    return run.exports[name]


# ---------------------------------------------------------------------------------------------
# What a user sends, and the model called in this process


def _token_batch(ids: str, mask: str, segments: str) -> dict[str, np.ndarray]:
    """Three sequences of 12 positions: token ids within the 1000-word vocabulary, padded with
    0 where the mask is 0; the first a sentence pair (segments 0 then 1)."""
    rng = np.random.default_rng(7)
    lengths = [12, 7, 3]
    mask_rows = np.array([[i < n for i in range(12)] for n in lengths], dtype=np.int32)
    tokens = rng.integers(1, 1000, size=(3, 12)).astype(np.int32) * mask_rows
    segment_rows = np.zeros((3, 12), dtype=np.int32)
    segment_rows[0, 6:] = 1
    return {ids: tokens, mask: mask_rows, segments: segment_rows}


def _pixels(name: str) -> dict[str, np.ndarray]:
    images = np.random.default_rng(8).integers(0, 256, size=(2, 64, 64, 3))
    return {name: images.astype(np.float32)}


def _jpegs() -> np.ndarray:
    """Two JPEG files of other sizes than the model's 64x64, as a camera or an upload sends."""
    import io

    from PIL import Image

    rng = np.random.default_rng(9)
    files = []
    for height, width in ((80, 120), (48, 48)):
        buffer = io.BytesIO()
        pixels = rng.integers(0, 256, size=(height, width, 3)).astype(np.uint8)
        Image.fromarray(pixels).save(buffer, format="JPEG")
        files.append(buffer.getvalue())
    return np.array(files, dtype=object)


TEXTS = np.array(
    [[b"the movie was great"], [b"Awful plot and very boring acting"], [b"I loved the story"]],
    dtype=object,
)
WORDS = np.array([b"the", b"graph", b"serves", b"unknown", b"python", b"latency"], dtype=object)


def _tabular_rows() -> dict[str, np.ndarray]:
    """Three rows: two cities and stores of the adapted vocabularies and one of each they never
    saw, ages across the bins, incomes around the adapted mean, any user ids."""
    column = lambda values, dtype: np.array(values, dtype=dtype).reshape(-1, 1)  # noqa: E731
    return {
        "city": column([b"tokyo", b"lima", b"atlantis"], object),
        "store_id": column([104, 561, 999], np.int64),
        "age": column([19.0, 47.5, 88.0], np.float32),
        "income": column([21_000.0, 36_000.0, 90_000.0], np.float32),
        "user_id": column([7, 123_456, 2**40], np.int64),
    }


def _user_inputs(name: str, input_names: list[str]) -> dict[str, np.ndarray]:
    if name == "bert_keras_hub":
        return _token_batch("token_ids", "padding_mask", "segment_ids")
    if name == "bert_transformers":
        return _token_batch("input_ids", "attention_mask", "token_type_ids")
    if name == "distilbert_transformers":
        batch = _token_batch("input_ids", "attention_mask", "token_type_ids")
        del batch["token_type_ids"]  # DistilBERT has no segments
        return batch
    if name == "vit_transformers":  # channels first, normalised as its image processor does
        pixels = np.random.default_rng(10).uniform(-1, 1, size=(2, 3, 32, 32))
        return {"pixel_values": pixels.astype(np.float32)}
    if name == "tabular":
        return _tabular_rows()
    if name == "custom_layers":
        return {"features": np.random.default_rng(11).normal(size=(3, 8)).astype(np.float32)}
    if name == "keras_archive":
        (features,) = input_names  # as Keras' export names the input
        return {features: np.random.default_rng(12).normal(size=(3, 6)).astype(np.float32)}
    if name == "efficientnet":
        (image,) = input_names  # Keras names the input of keras.applications models
        return _pixels(image)
    if name == "text_classifier":
        return {"text": TEXTS}
    if name == "image_bytes":
        return {"image_bytes": _jpegs()}
    return {"words": WORDS}


def _call(name: str, model: Any, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The model called as its package calls it, on `inputs`: its one output."""
    import tensorflow as tf

    tensors = {k: tf.constant(v) for k, v in inputs.items()}
    if name.endswith("_transformers"):
        return np.asarray(model(tensors)["logits"])
    if name == "keras_archive":  # the archive as TensorFlow restores it: its signature
        (only,) = model.signatures["serving_default"](**tensors).values()
        return np.asarray(only)
    if name == "vocab_module":
        return np.asarray(model(tensors["words"]))
    if name == "image_bytes":
        return np.asarray(model(tensors["image_bytes"])["probabilities"])
    if name in ("custom_layers", "efficientnet", "text_classifier"):
        (only,) = tensors.values()
        return np.asarray(model(only, training=False))
    return np.asarray(model(tensors, training=False))


def _build_in_process(run: Run, name: str) -> Any:
    """The family's build() imported from the copy of docs_src/byom, as the servers import it;
    a `.keras` source loaded from there once its `--import` modules are imported, a SavedModel
    restored."""
    family = BY_NAME[name]
    module_name, _, factory = family.source.partition(":")
    sys.path.insert(0, str(run.source_dir))
    try:
        for imported in family.imports:
            importlib.import_module(imported)
        if not factory and family.source.endswith(".keras"):
            import keras

            return keras.saving.load_model(run.source_dir / family.source)
        if not factory:  # a SavedModel directory
            import tensorflow as tf

            return tf.saved_model.load(str(run.source_dir / family.source))
        module = importlib.import_module(module_name)
    finally:
        sys.path.remove(str(run.source_dir))
    return getattr(module, factory)()


# ---------------------------------------------------------------------------------------------
# Calling the servers


def _grpc_predict(address: str, name: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    from graphserve.core import client

    with client.GrpcClient.connect(address, timeout=60) as grpc_client:
        response = grpc_client.predict(client.predict_request(name, inputs))
    outputs = client.predict_outputs(response)
    (only,) = outputs.values()
    return only


def _rest_predict(address: str, name: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    from graphserve.core.client import RestClient
    from graphserve.loadtest.generator.payloads import rest_body

    with RestClient(address, timeout=60) as rest:
        reply = rest.predict(name, rest_body(inputs, columnar=False))
    assert reply.status == 200, reply.text
    return np.asarray(reply.json()["predictions"])  # one output: TF Serving leaves its name out


def _assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    from graphserve.exporter.verify import DEFAULT_TOLERANCES

    atol, rtol = DEFAULT_TOLERANCES["float32"]  # the exporter's: atol relative to the scale
    scale = max(float(np.max(np.abs(want))), 1.0)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, atol=atol * scale, rtol=rtol, err_msg=what)


# ---------------------------------------------------------------------------------------------
# The tests, one family each


@pytest.mark.parametrize("name", NAMES)
def test_export_writes_a_verified_version(run: Run, name: str) -> None:
    """`graphserve export SOURCE --name N [--input ...]` from the sources' directory."""
    from graphserve.core.signature import parse_input_spec

    exported = _exported(run, name)
    assert exported.version_dir == run.base / name / "1"
    assert (exported.version_dir / "saved_model.pb").is_file()
    assert exported.manifest["parity"]["passed"] is True
    assert exported.manifest["source"]["text"] == BY_NAME[name].source
    recorded = exported.manifest["options"]["inputs"]  # what `serve eager` is given again
    assert [parse_input_spec(s) for s in recorded] == [
        parse_input_spec(s) for s in BY_NAME[name].inputs
    ]
    assert exported.manifest["options"]["imports"] == list(BY_NAME[name].imports)


@pytest.mark.parametrize("name", NAMES)
def test_the_bench_table_describes_each_generated_input(run: Run, name: str) -> None:
    """What `make bench-families` publishes of the inputs, read from the manifest as the load
    test reads it (an image input's format too)."""
    exported = _exported(run, name)
    rows = {row["name"]: row for row in exported.generated_inputs()}
    assert sorted(rows) == sorted(exported.input_specs)
    for input_name, row in rows.items():
        assert row["described"].startswith(f"{input_name}: {row['dtype']} ")
    if name == "image_bytes":
        assert rows["image_bytes"]["described"].startswith(
            "image_bytes: string JPEG images of 64x64 (it is decoded by DecodeJpeg"
        )


@pytest.mark.parametrize("name", NAMES)
def test_inspect_names_each_input(run: Run, name: str) -> None:
    exported = _exported(run, name)
    done = CliRunner().invoke(app, ["inspect", str(run.base / name)])  # in this process: fast
    assert done.exit_code == 0, done.output
    for input_name in exported.input_specs:
        assert input_name in done.output


@pytest.mark.parametrize("name", NAMES)
def test_served_answers_equal_the_model_in_process(run: Run, name: str) -> None:
    """gRPC and REST Predict on the graph and the eager server, on what a user sends, equal the
    model built and called in this process (float32, the exporter's tolerances)."""
    exported = _exported(run, name)
    inputs = _user_inputs(name, list(exported.input_specs))
    assert sorted(inputs) == sorted(exported.input_specs)
    want = _call(name, _build_in_process(run, name), inputs)
    for arm in ARMS:
        grpc_address, rest_address = run.addresses(name, arm)
        _assert_close(_grpc_predict(grpc_address, name, inputs), want, f"{arm} gRPC")
        _assert_close(_rest_predict(rest_address, name, inputs), want, f"{arm} REST")


@pytest.mark.parametrize("name", NAMES)
def test_loadtest_compare_loads_both_arms(run: Run, name: str, tmp_path: Path) -> None:
    """A short `graphserve loadtest compare` (its default payload, generated to fit the model):
    exit 0, both arms answered every request."""
    _exported(run, name)
    report = run_compare(name, run.servers, tmp_path)
    (step,) = report.steps
    assert set(step.arms) == set(ARMS)
    for arm, measured in step.arms.items():
        assert measured.requests > 0, arm
        assert (measured.failures, measured.errors) == (0, {}), arm
        run.table.setdefault(name, {})[arm] = measured.latency_ms.p50 or float("nan")
    # What each server said runs it: the vocabulary module's __call__ is a tf.function, so its
    # eager server runs a graph, and the report warns.
    said = {arm: (info.model_extra or {}).get("execution") for arm, info in report.arms.items()}
    assert said["graph"] in ("session", "function")  # the Session, else the signature functions
    assert said["eager"] == EAGER_RUNS.get(name, "eager")
    warned = "graph against graph" in (tmp_path / "report.md").read_text()
    assert warned == (name in EAGER_RUNS)


@pytest.mark.parametrize("name", ["custom_layers", "vocab_module"])
def test_a_self_managed_compare_repeats_what_the_export_was_given(
    run: Run, name: str, tmp_path: Path
) -> None:
    """`graphserve loadtest compare --model-base-path BASE/NAME` alone, from the sources'
    directory: it starts both servers itself, the eager one with the source and the flags the
    export's manifest records (`--import` for the custom layer, `--input` for the module)."""
    _exported(run, name)
    from tools.bench.families import SHORT_COMPARE

    args = ["loadtest", "compare", "--model-base-path", str(run.base / name), "--users", "1",
            *SHORT_COMPARE, "--out", str(tmp_path)]  # fmt: skip
    done = _command(graphserve(*args), cwd=run.source_dir)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads((tmp_path / "report.json").read_text())
    family, command = BY_NAME[name], report["arms"]["eager"]["server_command"]
    assert command[:3] == ["graphserve", "serve", "eager"] and family.source in command
    assert ("--import" in command) == bool(family.imports)
    assert ("--input" in command) == bool(family.inputs)
    assert [command[i + 1] for i, a in enumerate(command) if a == "--import"] == [*family.imports]
    for arm in ARMS:
        (step,) = report["steps"]
        assert step["arms"][arm]["failures"] == 0 and step["arms"][arm]["requests"] > 0


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("name", NAMES)
def test_conformance_passes(run: Run, name: str, arm: str) -> None:
    """`graphserve conformance ADDRESS` with its generated inputs: exit 0, no case failed."""
    _exported(run, name)
    grpc_address, rest_address = run.addresses(name, arm)
    args = ["conformance", grpc_address, "--rest", rest_address, "--model", name]
    done = CliRunner().invoke(app, [*args, "--output", "json"])  # in this process: fast
    assert done.exit_code == 0, done.output[-3000:]
    report = json.loads(done.stdout)
    assert report["counts"]["fail"] == 0
    assert report["counts"]["pass"] > 0


# ---------------------------------------------------------------------------------------------
# The table


def _print_table(run: Run, config: pytest.Config) -> None:
    """Export seconds, sizes and the load test's p50s, on the terminal even when output is
    captured (as tests/test_zoo.py prints its table)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        _write_table(run, reporter.write_line)


def _write_table(run: Run, write_line: Callable[[str], None]) -> None:
    write_line("")
    write_line(
        "| family | export s (command s) | saved_model.pb KB | variables KB | ops "
        "| graph p50 ms | eager p50 ms | graph/eager |"
    )
    write_line("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in NAMES:
        if name not in run.exports:
            write_line(f"| {name} | export failed | | | | | | |")
            continue
        e, p50 = run.exports[name], run.table.get(name, {})
        graph, eager = p50.get("graph"), p50.get("eager")
        ratio = f"{graph / eager:.2f}×" if graph and eager else "—"
        write_line(
            f"| {name} | {e.export_s:.1f} ({e.command_s:.1f}) | {e.saved_model_bytes / 1024:,.0f} "
            f"| {e.variables_bytes / 1024:,.0f} | {e.ops:,} | {_ms(graph)} | {_ms(eager)} "
            f"| {ratio} |"
        )
    write_line(f"module wall time: {time.perf_counter() - run.started_s:.0f} s")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"
