"""The exporter against real SavedModels written to tmp_path."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from graphserve.exporter import (
    ExportSpec,
    ParityError,
    SignatureError,
    SourceError,
    VersionExistsError,
    export_model,
    parse_input_spec,
)
from graphserve.model.examples import mlp


def _children(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.exists() else []


def test_mlp_export_is_a_servable_savedmodel_equal_to_the_model(tmp_path: Path) -> None:
    result = export_model(ExportSpec(source="examples:mlp", name="mlp", base_path=tmp_path))
    assert result.version == 1 and result.path == tmp_path / "mlp" / "1"
    assert (result.path / "saved_model.pb").is_file()
    assert result.trace_count == 1
    assert result.parity.passed and result.parity.max_abs_error <= 1e-5
    sig = result.signatures["serving_default"]
    assert sig["inputs"] == {"images": {"dtype": "float32", "shape": [-1, 784]}}
    assert sig["outputs"] == {"logits": {"dtype": "float32", "shape": [-1, 10]}}

    loaded = tf.saved_model.load(str(result.path)).signatures["serving_default"]
    x = np.random.default_rng(3).standard_normal((7, 784)).astype(np.float32)
    np.testing.assert_allclose(
        loaded(images=tf.constant(x))["logits"].numpy(), mlp.build()(x).numpy(), atol=1e-5
    )
    assert _children(tmp_path / "mlp") == ["1"]


def test_versions_increase_and_existing_ones_are_not_overwritten(tmp_path: Path) -> None:
    spec = ExportSpec(source="examples:mlp", name="mlp", base_path=tmp_path, parity_batches=1)
    assert export_model(spec).version == 1
    assert export_model(spec).version == 2
    with pytest.raises(VersionExistsError, match="version 2 already exists"):
        export_model(ExportSpec(**{**spec.__dict__, "version": 2}))
    assert _children(tmp_path / "mlp") == ["1", "2"]


def test_parity_failure_leaves_no_version_directory(tmp_path: Path) -> None:
    spec = ExportSpec(
        source="tests.factories:drifting",
        name="drift",
        base_path=tmp_path,
        inputs=[parse_input_spec("x:float32:-1,4")],
    )
    with pytest.raises(ParityError, match=r"disagrees with the eager model.*output 'output_0'"):
        export_model(spec)
    assert _children(tmp_path / "drift") == []  # no version, no temporary left behind


def test_module_with_variables_and_named_outputs(tmp_path: Path) -> None:
    result = export_model(
        ExportSpec(
            source="tests.factories:affine",
            name="affine",
            base_path=tmp_path,
            inputs=[parse_input_spec("x:float32:-1,3")],
        )
    )
    outputs = result.signatures["serving_default"]["outputs"]
    assert outputs == {
        "scores": {"dtype": "float32", "shape": [-1, 2]},
        "best": {"dtype": "int64", "shape": [-1]},
    }
    sig = tf.saved_model.load(str(result.path)).signatures["serving_default"]
    out = sig(x=tf.constant([[1.0, 1.0, 1.0]]))
    np.testing.assert_allclose(out["scores"].numpy(), [[3.75, 0.0]])
    assert out["best"].numpy().tolist() == [0]


def test_plain_function_closing_over_a_variable(tmp_path: Path) -> None:
    result = export_model(
        ExportSpec(
            source="tests.factories:closure",
            name="closure",
            base_path=tmp_path,
            inputs=[parse_input_spec("v:float32:-1")],
        )
    )
    sig = tf.saved_model.load(str(result.path)).signatures["serving_default"]
    assert sig(v=tf.constant([1.0, 2.0]))["output_0"].numpy().tolist() == [3.0, 6.0]


def test_keras_file_source_takes_its_signature_from_the_model(tmp_path: Path) -> None:
    path = tmp_path / "mlp.keras"
    mlp.build().save(path)
    result = export_model(ExportSpec(source=str(path), name="fromfile", base_path=tmp_path))
    assert result.signatures["serving_default"]["inputs"] == {
        "images": {"dtype": "float32", "shape": [-1, 784]}
    }


def test_explicit_inputs_override_and_must_fit_the_model(tmp_path: Path) -> None:
    spec = ExportSpec(
        source="examples:mlp",
        name="mlp",
        base_path=tmp_path,
        inputs=[parse_input_spec("pixels:float32:-1,5")],
    )
    with pytest.raises(SignatureError, match=r"cannot be called with inputs \(pixels: float32"):
        export_model(spec)
    assert _children(tmp_path / "mlp") == []


@pytest.mark.parametrize(
    ("source", "error", "message"),
    [
        ("examples:nope", SourceError, "unknown example .nope.: available examples are branchy"),
        ("no_such_module_x:build", SourceError, "cannot import module 'no_such_module_x'"),
        ("tests.factories:missing", SourceError, "has no callable 'missing'"),
        ("tests.factories:not_callable", SourceError, "returned int, which is not callable"),
        ("missing.keras", SourceError, "Keras file 'missing.keras' does not exist"),
        ("justtext", SourceError, "expected package.module:factory"),
        ("tests.factories:affine", SignatureError, "cannot tell the input signature"),
    ],
)
def test_bad_sources_are_named(tmp_path: Path, source: str, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        export_model(ExportSpec(source=source, name="m", base_path=tmp_path))
