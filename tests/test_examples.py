"""The built-in examples: eager values worth knowing, and each one exported, reloaded and compared.

Eager calls go through `model.trace.call_signature`, the path the eager server runs; exports go
through `export_model` into tmp_path, as the CLI does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

from graphserve.core.contract import SignatureContract
from graphserve.core.inputs import sample_inputs
from graphserve.exporter import ExportResult, ExportSpec, TensorSpec, export_model
from graphserve.model.examples import branchy, cnn, multi_io, power
from graphserve.model.sources import available_examples
from graphserve.model.trace import call_signature

EXAMPLES = ["power", "branchy", "cnn", "multi_io"]
SPECS: dict[str, list[TensorSpec]] = {
    "power": power.INPUT_SIGNATURE,
    "branchy": branchy.INPUT_SIGNATURE,
    "cnn": cnn.INPUT_SIGNATURE,
    "multi_io": multi_io.INPUT_SIGNATURE,
}
# name -> (dtype, shape with the batch as None) of every output
OUTPUTS: dict[str, dict[str, tuple[str, tuple[int | None, ...]]]] = {
    "power": {"power": ("int32", (None, 10, 10))},
    "branchy": {"y": ("float32", (None, 4)), "steps": ("int32", (None,))},
    "cnn": {
        "logits": ("float32", (None, 10)),
        "probabilities": ("float32", (None, 10)),
        "classes": ("int64", (None,)),
    },
    "multi_io": {
        "score": ("float32", (None,)),
        "bucket": ("int64", (None,)),
        "label": ("string", (None,)),
    },
}
BUILD: dict[str, Callable[[], Any]] = {
    "power": power.build,
    "branchy": branchy.build,
    "cnn": cnn.build,
    "multi_io": multi_io.build,
}


def _eager(model: Any, name: str, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
    tensors = {k: tf.constant(v) for k, v in inputs.items()}
    contract = SignatureContract("serving_default", tuple(SPECS[name]))
    outputs = call_signature(model, contract, tensors)
    return {k: np.asarray(v) for k, v in outputs.items()}


def _dtype_name(array: np.ndarray) -> str:
    return "string" if array.dtype == object else array.dtype.name


def _op_types(function: Any) -> Counter[str]:
    """Op types in a concrete function's graph and the functions it calls (loop and branch
    bodies live in the graph's function library)."""
    graph_def = function.graph.as_graph_def()
    ops = Counter(node.op for node in graph_def.node)
    for library_function in graph_def.library.function:
        ops.update(node.op for node in library_function.node_def)
    return ops


def test_the_examples_are_listed() -> None:
    assert set(EXAMPLES) <= set(available_examples())


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("batch_size", [1, 3])
def test_eager_outputs_have_the_declared_names_dtypes_and_shapes(
    name: str, batch_size: int
) -> None:
    outputs = _eager(BUILD[name](), name, sample_inputs(SPECS[name], batch_size=batch_size))
    assert set(outputs) == set(OUTPUTS[name])
    for output, (dtype, shape) in OUTPUTS[name].items():
        assert _dtype_name(outputs[output]) == dtype, output
        assert outputs[output].shape == (batch_size, *shape[1:]), output


@pytest.mark.parametrize("name", ["cnn", "multi_io"])
def test_every_build_has_the_same_weights(name: str) -> None:
    # The eager server rebuilds the model through the factory: it must compute the same thing.
    inputs = sample_inputs(SPECS[name], batch_size=2, seed=5)
    first, second = _eager(BUILD[name](), name, inputs), _eager(BUILD[name](), name, inputs)
    for output, expected in first.items():
        np.testing.assert_array_equal(second[output], expected)


# -- power -----------------------------------------------------------------------------------


def _wrapped_int32(value: int) -> int:
    """`value` as int32 arithmetic leaves it: modulo 2**32, two's complement."""
    return (value + 2**31) % 2**32 - 2**31


def test_power_of_identity_diagonal_and_cyclic_shift() -> None:
    diagonal = np.array([0, 1, -1, 2, 3, -3, 5, 7, -2, 1], dtype=np.int32)
    cyclic_shift = np.roll(np.eye(10, dtype=np.int32), 1, axis=1)  # its 10th power is I
    x = np.stack([np.eye(10, dtype=np.int32), np.diag(diagonal), cyclic_shift])
    result = _eager(power.build(), "power", {"x": x})["power"]
    np.testing.assert_array_equal(result[0], np.eye(10, dtype=np.int32))
    expected = [_wrapped_int32(int(d) ** 100) for d in diagonal]  # 2**100 wraps to 0
    np.testing.assert_array_equal(result[1], np.diag(np.array(expected, dtype=np.int32)))
    np.testing.assert_array_equal(result[2], np.eye(10, dtype=np.int32))


def test_power_wraps_like_numpy_int32() -> None:
    x = sample_inputs(SPECS["power"], batch_size=2, seed=11)["x"]  # entries up to ±100: overflows
    expected = np.broadcast_to(np.eye(10, dtype=np.int32), x.shape)
    with np.errstate(over="ignore"):
        for _ in range(100):
            expected = np.matmul(x, expected)
    np.testing.assert_array_equal(_eager(power.build(), "power", {"x": x})["power"], expected)


def test_power_on_an_empty_batch() -> None:
    result = _eager(power.build(), "power", {"x": np.zeros((0, 10, 10), np.int32)})
    assert result["power"].shape == (0, 10, 10)


# -- branchy ---------------------------------------------------------------------------------


def test_branchy_halves_each_row_until_its_norm_is_at_most_one() -> None:
    x = np.array(
        [
            [0.0, 0.0, 0.0, 0.0],  # steps 0
            [1.0, 0.0, 0.0, 0.0],  # norm exactly 1: 0
            [2.0, 0.0, 0.0, 0.0],  # 1
            [3.0, 0.0, 0.0, 0.0],  # 3 → 1.5 → 0.75: 2
            [8.0, 0.0, 0.0, 0.0],  # 3
            [1.0, 1.0, 1.0, 1.0],  # norm 2: 1
        ],
        dtype=np.float32,
    )
    out = _eager(branchy.build(), "branchy", {"x": x})
    np.testing.assert_array_equal(out["steps"], [0, 0, 1, 2, 3, 1])
    # The batch mean is positive: the rows come back as halved, not negated.
    np.testing.assert_array_equal(out["y"], x / 2.0 ** out["steps"][:, None])
    # Negated, the mean is negative and the other branch negates back: the same rows.
    negated = _eager(branchy.build(), "branchy", {"x": -x})
    np.testing.assert_array_equal(negated["steps"], out["steps"])
    np.testing.assert_array_equal(negated["y"], out["y"])


def test_branchy_on_an_empty_batch_and_an_infinite_row() -> None:
    empty = _eager(branchy.build(), "branchy", {"x": np.zeros((0, 4), np.float32)})
    assert empty["y"].shape == (0, 4) and empty["steps"].shape == (0,)
    x = np.array([[np.inf, 0.0, 0.0, 0.0], [4.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    out = _eager(branchy.build(), "branchy", {"x": x})  # stops at MAX_STEPS, not never
    np.testing.assert_array_equal(out["steps"], [branchy.MAX_STEPS, 2])


# -- cnn -------------------------------------------------------------------------------------


def test_cnn_probabilities_and_classes_follow_the_logits() -> None:
    images = sample_inputs(SPECS["cnn"], batch_size=4, seed=3)["images"]
    out = _eager(cnn.build(), "cnn", {"images": images})
    np.testing.assert_allclose(out["probabilities"].sum(axis=1), 1.0, atol=1e-6)
    assert (out["probabilities"] > 0).all()
    np.testing.assert_array_equal(out["classes"], out["logits"].argmax(axis=1))


def test_cnn_uint8_and_float_paths_agree_on_the_same_images() -> None:
    model = cnn.build()
    images = sample_inputs(SPECS["cnn"], batch_size=3, seed=4)["images"]
    from_uint8 = model(tf.constant(images))
    from_float = model.classify_float(tf.constant(images.astype(np.float32) / 255.0))
    for output in OUTPUTS["cnn"]:
        np.testing.assert_allclose(from_float[output].numpy(), from_uint8[output].numpy())


def test_cnn_declares_a_uint8_default_and_a_float_signature() -> None:
    assert cnn.SIGNATURES["serving_default"]["inputs"]["images"]["dtype"] == "uint8"
    float_images = cnn.SIGNATURES["float_images"]
    assert callable(getattr(cnn.build(), str(float_images["function"])))
    assert float_images["inputs"]["images"] == {"dtype": "float32", "shape": [-1, 28, 28, 1]}


# -- multi_io --------------------------------------------------------------------------------


def test_multi_io_values() -> None:
    model = multi_io.build()
    inputs = {
        "features": sample_inputs(SPECS["multi_io"][:1], batch_size=4, seed=6)["features"],
        "category": np.array([3, -1, 19, 100], dtype=np.int64),
        "text": np.array([b"s1", b"hello", b"s1", b""], dtype=object),
    }
    out = _eager(model, "multi_io", inputs)
    w, b, bias = (v.numpy() for v in (model.w, model.b, model.category_bias))
    # -1 mod 16 is 15 (floor modulo), 19 mod 16 is 3.
    score = inputs["features"] @ w + b + bias[[3, 15, 3, 4]]
    np.testing.assert_allclose(out["score"], score, rtol=1e-5, atol=1e-6)
    signs = np.where(out["score"] > 0, "pos", "neg")
    expected = [f"{s}-{c}".encode() for s, c in zip(signs, inputs["category"], strict=True)]
    assert out["label"].tolist() == expected
    # FarmHash fingerprints: the same bucket in every process (the graph and eager servers).
    assert out["bucket"].tolist() == [10, 8, 10, 15]


# -- exported ----------------------------------------------------------------------------------

Export = Callable[[str], ExportResult]

# Until SIGNATURES is wired into the exporter, cnn's default signature is given explicitly.
EXPORT_INPUTS = {"cnn": [TensorSpec("images", "uint8", (None, 28, 28, 1))]}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Export:
    """Exports an example once per module, on first use."""
    base = tmp_path_factory.mktemp("examples")
    results: dict[str, ExportResult] = {}

    def export(name: str) -> ExportResult:
        if name not in results:
            spec = ExportSpec(
                source=f"examples:{name}",
                name=name,
                base_path=base,
                inputs=EXPORT_INPUTS.get(name, []),
                parity_batches=1,
            )
            results[name] = export_model(spec)
        return results[name]

    return export


@pytest.mark.parametrize("name", EXAMPLES)
def test_exported_savedmodel_computes_what_the_eager_model_does(
    name: str, exported: Export
) -> None:
    result = exported(name)
    assert result.parity.passed and result.trace_count == len(result.signatures)  # one each
    outputs = result.signatures["serving_default"]["outputs"]
    assert outputs == {
        output: {"dtype": dtype, "shape": [-1 if d is None else d for d in shape]}
        for output, (dtype, shape) in OUTPUTS[name].items()
    }
    signature = tf.saved_model.load(str(result.path)).signatures["serving_default"]
    inputs = sample_inputs(SPECS[name], batch_size=5, seed=42)  # not the parity check's batches
    tensors = {k: tf.constant(v) for k, v in inputs.items()}
    graph = {k: v.numpy() for k, v in signature(**tensors).items()}
    eager = _eager(BUILD[name](), name, inputs)
    assert set(graph) == set(eager)
    for output, expected in eager.items():
        assert graph[output].dtype == expected.dtype, output
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(graph[output], expected, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(graph[output], expected)


def test_exported_power_holds_the_hundred_matmuls(exported: Export) -> None:
    signature = tf.saved_model.load(str(exported("power").path)).signatures["serving_default"]
    ops = _op_types(signature)
    assert ops["BatchMatMulV2"] + ops["MatMul"] == 100


def test_exported_branchy_keeps_its_control_flow_as_ops(exported: Export) -> None:
    signature = tf.saved_model.load(str(exported("branchy").path)).signatures["serving_default"]
    ops = _op_types(signature)
    assert ops["While"] + ops["StatelessWhile"] == 1
    assert ops["If"] + ops["StatelessIf"] == 1
    # Data-dependent: the same graph runs a different number of iterations per batch.
    for x, steps in (([[0.5, 0, 0, 0]], [0]), ([[16.0, 0, 0, 0]], [4])):
        out = signature(x=tf.constant(x, dtype=tf.float32))
        np.testing.assert_array_equal(out["steps"].numpy(), steps)
