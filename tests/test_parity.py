"""Parity that is right both ways: a right graph passes whatever its outputs' scale, a wrong one
fails, and an output too constant for the check to tell the two apart is reported.

The exports write real SavedModels into tmp_path from the factories below (sources
`tests.test_parity:NAME`); `_compare` and `_Spread` are also checked on synthetic arrays.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from graphserve.core.manifest import read_manifest
from graphserve.exporter import ExportSpec, ParityError, export_model, parse_input_spec
from graphserve.exporter.verify import DEFAULT_TOLERANCES, OutputParity, _compare, _Spread

CANNOT_TELL = "the parity check cannot tell a wrong graph from this one"

# -- model factories ----------------------------------------------------------------------------


class WrongInGraph(tf.Module):
    """Right eagerly, wrong when traced: the graph multiplies by a weight 1 % off."""

    def __init__(self) -> None:
        super().__init__()
        rng = np.random.default_rng(7)
        self.w = tf.Variable(rng.standard_normal((4, 3)).astype(np.float32), name="w")

    def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        w = self.w if tf.executing_eagerly() else self.w * 1.01
        return {"scores": tf.matmul(x, w)}


def build_wrong() -> WrongInGraph:
    return WrongInGraph()


class Dense(tf.Module):
    """`softmax?(x @ w + b)`, weights drawn from a seeded normal times `scale`."""

    def __init__(self, features: int, units: int, scale: float, softmax: bool) -> None:
        super().__init__()
        rng = np.random.default_rng(11)
        self.w = tf.Variable((rng.standard_normal((features, units)) * scale).astype(np.float32))
        self.b = tf.Variable(np.zeros(units, np.float32))
        self.softmax = softmax

    def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        y = tf.matmul(x, self.w) + self.b
        return {"predictions": tf.nn.softmax(y) if self.softmax else y}


def build_large() -> Dense:
    """Logits of order 1e3 (standard normal inputs, 256 features, weights of 60)."""
    return Dense(256, 10, scale=60.0, softmax=False)


def build_untrained_softmax() -> Dense:
    """Softmax over 1000 classes of near-zero logits: 0.001 +- 1e-8 whatever the input."""
    return Dense(8, 1000, scale=1e-6, softmax=True)


def _spec(tmp_path: Path, source: str, name: str, inputs: str, **kwargs: object) -> ExportSpec:
    return ExportSpec(
        source=source,
        name=name,
        base_path=tmp_path,
        inputs=[parse_input_spec(inputs)],
        warmup_samples=1,
        **kwargs,  # type: ignore[arg-type]
    )


def _children(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.exists() else []


# -- a wrong graph fails ------------------------------------------------------------------------


def test_a_changed_weight_in_the_graph_fails_the_export(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "tests.test_parity:build_wrong", "wrong", "x:float32:-1,4")
    with pytest.raises(ParityError, match=r"disagrees with the eager model.*output 'scores'"):
        export_model(spec)
    assert _children(tmp_path / "wrong") == []  # no version, no temporary left behind


# -- a right graph passes at any scale ----------------------------------------------------------


def test_large_outputs_pass_with_a_tolerance_of_their_scale(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "tests.test_parity:build_large", "large", "x:float32:-1,256")
    result = export_model(spec)
    assert result.parity.passed
    (output,) = result.parity.outputs
    atol, _ = DEFAULT_TOLERANCES["float32"]
    assert output.scale is not None and output.scale > 500  # logits of order 1e3
    assert output.allowed_abs_error == pytest.approx(atol * output.scale)
    assert output.discriminates and not any(CANNOT_TELL in w for w in result.warnings)


def _check(got: np.ndarray, expected: np.ndarray) -> OutputParity:
    result = _compare("serving_default", "y", got, expected, DEFAULT_TOLERANCES)
    assert result is not None
    return result


def test_compare_logits_of_600_allow_rounding_not_one_percent() -> None:
    rng = np.random.default_rng(0)
    logits = rng.uniform(-600, 600, (8, 1000)).astype(np.float32)
    logits[0, 0] = 600.0
    rounding = (logits + rng.choice([-0.02, 0.02], logits.shape)).astype(np.float32)
    right = _check(rounding, logits)
    assert right.passed and right.scale == pytest.approx(600.0)
    assert right.allowed_abs_error == pytest.approx(0.06)
    # The old rule, atol 1e-5 + rtol 1e-4 * |eager|, refused this graph near zero.
    assert not np.allclose(rounding, logits, atol=1e-5, rtol=1e-4)
    assert not _check(logits * np.float32(1.01), logits).passed


def test_compare_probabilities_allow_4e_5_not_1e_3() -> None:
    rng = np.random.default_rng(1)
    probabilities = tf.nn.softmax(rng.standard_normal((8, 10)).astype(np.float32)).numpy()
    signs = rng.choice([-1.0, 1.0], probabilities.shape)
    right = _check((probabilities + 4e-5 * signs).astype(np.float32), probabilities)
    assert right.passed and right.scale is not None and right.scale < 1
    assert right.allowed_abs_error == pytest.approx(1e-4)  # the scale counts as at least 1
    assert not _check((probabilities + 1e-3 * signs).astype(np.float32), probabilities).passed


def test_compare_nans_and_infinities() -> None:
    expected = np.array([[np.nan, np.inf, 2.0], [1.0, -np.inf, 3.0]], np.float32)
    same = _check(expected.copy(), expected)
    assert same.passed and same.scale == 3.0  # infinities do not widen the tolerance
    finite = expected.copy()
    finite[0, 1] = 1e30
    assert not _check(finite, expected).passed
    number = expected.copy()
    number[0, 0] = 0.0
    assert not _check(number, expected).passed


# -- an output the check cannot judge is reported -----------------------------------------------


def test_a_near_constant_output_is_reported(tmp_path: Path) -> None:
    source = "tests.test_parity:build_untrained_softmax"
    result = export_model(_spec(tmp_path, source, "flat", "x:float32:-1,8"))
    assert result.parity.passed
    (output,) = result.parity.outputs
    assert not output.discriminates and output.rows == 12  # 3 batches of 4
    assert output.variation is not None and output.variation < 1e-6
    (sentence,) = result.parity.warnings
    assert sentence.startswith(
        "output 'predictions' of signature 'serving_default' varies by at most "
    )
    assert "across the 12 inputs compared, within 10x its tolerance 0.0001: " in sentence
    assert CANNOT_TELL in sentence and "--samples-file" in sentence
    assert sentence in result.warnings

    manifest = read_manifest(result.path)
    assert manifest is not None and sentence in manifest["warnings"]
    (written,) = manifest["parity"]["outputs"]
    assert written["discriminates"] is False and written["rows"] == 12
    assert written["scale"] == pytest.approx(1e-3, rel=1e-3)
    assert written["allowed_abs_error"] == pytest.approx(1e-4)
    assert written["variation"] == output.variation


def test_a_model_that_depends_on_its_input_discriminates(tmp_path: Path) -> None:
    result = export_model(ExportSpec(source="examples:mlp", name="mlp", base_path=tmp_path))
    (output,) = result.parity.outputs
    assert output.discriminates and output.variation is not None
    assert output.allowed_abs_error is not None
    assert output.variation > 10 * output.allowed_abs_error
    assert result.parity.warnings == [] and not any(CANNOT_TELL in w for w in result.warnings)
    manifest = read_manifest(result.path)
    assert manifest is not None
    assert manifest["parity"]["outputs"][0]["discriminates"] is True


def test_spread_of_exact_outputs_single_rows_and_changing_shapes() -> None:
    compared = OutputParity("s", "y", "int64", 0.0, 0.0, None, None, True)
    floats = replace(compared, dtype="float32", atol=1e-4, rtol=0.0, allowed_abs_error=1e-4)
    same = _Spread()
    for _ in range(3):
        same.add(np.array([[1, 2], [1, 2]]))
    assert same.judge(compared).discriminates is False and same.rows == 6

    differs = _Spread()
    differs.add(np.array([b"a", b"a"], dtype=object))
    differs.add(np.array([b"a", b"b"], dtype=object))
    assert differs.judge(compared).discriminates is True

    single = _Spread()
    single.add(np.array([[0.0, 5.0]], np.float32))
    assert single.judge(floats).discriminates is False

    # Rows of another shape do not line up element by element: that batch is left out.
    ragged = _Spread()
    ragged.add(np.array([[0.5, 0.5], [0.5, 0.5]], np.float32))
    ragged.add(np.array([[9.0, 9.0, 9.0]], np.float32))
    judged = ragged.judge(floats)
    assert judged.rows == 2 and judged.variation == 0.0 and not judged.discriminates
