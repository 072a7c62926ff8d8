"""Tracing is the tool's job: every pattern of the reference material exports as users write it.

Each model lives in a small module of its own under a temporary directory on sys.path, the way a
user's project does, and is exported through the public surface: `graphserve export mod:factory`
(CliRunner, or a child process) or `export_model(ExportSpec(...))`. Each export is reloaded and
compared with the eager model at batch sizes 1, 2 and 7; the exported signature traced once.
The hazards (a Python value the signature cannot carry, a baked dimension, trace-time side
effects) fail or warn, naming the argument or the dimension and the fix.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core.manifest import read_manifest
from graphserve.exporter import (
    ExportResult,
    ExportSpec,
    ParityError,
    RetraceError,
    SignatureError,
    export_model,
    parse_input_spec,
)
from tests.userproject import user_project

runner = CliRunner()

# One module per pattern, as a user would write it.
MODULES = {
    # The issue's failing case: an unsigned module-level tf.function and a factory returning it,
    # the export guide's own sample (docs_src/export/mymodel.py).
    "doubling": (Path(__file__).parent.parent / "docs_src" / "export" / "mymodel.py").read_text(),
    "doubling_module": """
        import tensorflow as tf

        class Doubler(tf.Module):
            @tf.function
            def __call__(self, x):
                return x * 2 + 1

        def build():
            return Doubler()
    """,
    "dense_module": """
        import tensorflow as tf

        INPUT_SIGNATURE = ["x:float32:-1,3"]

        class Dense(tf.Module):
            def __init__(self, in_features, out_features):
                super().__init__()
                shape = [in_features, out_features]
                self.w = tf.Variable(tf.random.stateless_normal(shape, seed=[1, 2]))
                self.b = tf.Variable(tf.zeros([out_features]), name="b")

            @tf.function
            def __call__(self, x):
                return tf.nn.relu(x @ self.w + self.b)

        def build():
            return Dense(3, 2)
    """,
    "control_flow": """
        import tensorflow as tf

        INPUT_SIGNATURE = ["x:float32:-1,4"]

        @tf.function
        def grow(x):
            # AutoGraph turns an `if` and a `while` on tensor values into graph control flow.
            if tf.reduce_sum(x) > 0:
                x = x * 2.0
            else:
                x = -x
            while tf.reduce_sum(tf.abs(x)) < 100.0:  # random inputs are never all zero
                x = x * 2.0
            return x

        def build():
            return grow
    """,
    "matrix_power": """
        import functools

        import tensorflow as tf

        INPUT_SIGNATURE = ["x:int32:-1,10,10"]

        @tf.function
        def power(x, y):
            result = tf.eye(10, dtype=tf.int32)
            for _ in range(y):  # a Python loop: the graph holds all y matmuls
                result = tf.matmul(x, result)
            return result

        def build_unbound():
            return power  # y has no tensor: the signature cannot carry it

        def build():
            return functools.partial(power, y=100)
    """,
    "keras_models": """
        import keras

        INPUT_SIGNATURE = ["features:float32:-1,6"]

        def functional():
            keras.utils.set_random_seed(1)
            inputs = keras.Input(shape=(6,), name="features")
            hidden = keras.layers.Dense(8, activation="relu")(inputs)
            return keras.Model(inputs, keras.layers.Dense(3, name="scores")(hidden))

        def sequential():
            keras.utils.set_random_seed(2)
            return keras.Sequential(
                [keras.Input(shape=(6,)), keras.layers.Dense(8, activation="tanh"),
                 keras.layers.Dense(2)]
            )

        class Residual(keras.Model):
            def __init__(self):
                super().__init__()
                self.inner = keras.layers.Dense(6, activation="relu")
                self.head = keras.layers.Dense(2)

            def call(self, x, training=False):
                return self.head(x + self.inner(x))

        def subclassed():
            keras.utils.set_random_seed(3)
            return Residual()
    """,
    "two_tensors": """
        import tensorflow as tf

        SIGNATURES = {
            "serving_default": {
                "inputs": {
                    "a": {"dtype": "float32", "shape": [-1, 3]},
                    "b": {"dtype": "float32", "shape": [-1, 3]},
                },
            },
        }

        @tf.function
        def weighted_sum(a, b):
            return {"sum": a + 2.0 * b, "dot": tf.reduce_sum(a * b, axis=-1)}

        def positional():
            return weighted_sum

        def keyword_only():
            def combine(*, b, a):
                return a - b
            return combine

        def one_dict():
            return lambda inputs: inputs["a"] * inputs["b"]
    """,
    "hazards": """
        import random

        import tensorflow as tf

        INPUT_SIGNATURE = ["x:float32:-1,4"]

        @tf.function
        def scale(x, factor):
            return x * factor

        def python_value():
            return scale

        def flatten_pairs(x):
            rows = x.shape[0] or 8  # None while tracing: 8 is baked into the graph
            return tf.reshape(x, [rows * 2, 2])

        def baked_reshape():
            return flatten_pairs

        def fixed_head(x):
            n = x.shape[0] or 4  # right at batch 4 only, where parity looks
            return tf.zeros([n, 2]) + tf.reduce_mean(x)

        def baked_shape():
            return fixed_head

        def regroup(x):
            return tf.reshape(x, [-1, x.shape[1] or 8])  # the free length, baked as 8

        def baked_length():
            return regroup

        @tf.function
        def noisy(x):
            print("tracing noisy with", x.shape)
            return x + 1.0

        def printing():
            return noisy

        CALLS = []

        def logged(x):
            CALLS.append(x.shape)
            return x * 2.0

        def appending():
            return logged

        def jitter(x):
            return x * random.uniform(0.5, 1.5)

        def python_random():
            return jitter

        @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32)])
        def signed(x):
            return x * 3.0

        def conflicting():
            return signed
    """,
}


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A user's project: one module per pattern, importable as `NAME:factory`."""
    with user_project(tmp_path_factory.mktemp("user_project"), MODULES) as root:
        yield root


def _spec(tmp_path: Path, source: str, **kwargs: Any) -> ExportSpec:
    defaults: dict[str, Any] = {"name": "m", "base_path": tmp_path, "parity_batches": 1}
    return ExportSpec(source=source, **{**defaults, **kwargs})


def _eager(source: str) -> Callable[..., Any]:
    module, factory = source.split(":")
    return getattr(importlib.import_module(module), factory)()


def _assert_exported_is_eager(
    result: ExportResult,
    eager: Callable[..., Any],
    make: Callable[[int], dict[str, np.ndarray]],
    call: Callable[[Callable[..., Any], dict[str, tf.Tensor]], Any] | None = None,
) -> None:
    """Reload the SavedModel; at batch sizes 1, 2 and 7 it computes what the eager model does,
    and its signature traced once whatever the batch size."""
    assert result.retrace.exported == {name: 1 for name in result.signatures}
    serving = tf.saved_model.load(str(result.path)).signatures["serving_default"]
    for batch in (1, 2, 7):
        inputs = {k: tf.constant(v) for k, v in make(batch).items()}
        got = serving(**inputs)
        expected = call(eager, inputs) if call else eager(*inputs.values())
        if not isinstance(expected, dict):
            (only,) = got.values()
            got, expected = {"y": only}, {"y": expected}
        for key, value in expected.items():
            np.testing.assert_allclose(got[key].numpy(), np.asarray(value), rtol=1e-5, atol=1e-5)


def _floats(*shape: int) -> Callable[[int], dict[str, np.ndarray]]:
    def make(batch: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(batch)
        return {"x": rng.standard_normal((batch, *shape)).astype(np.float32)}

    return make


def _children(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.exists() else []


# -- the issue's case: an unsigned tf.function and a tf.Module, exported as they are ------------


def test_unsigned_module_level_tf_function_exports_with_input_signature(
    user_dir: Path, tmp_path: Path
) -> None:
    out = runner.invoke(
        app, ["export", "doubling:build", "--name", "m", "--base-path", str(tmp_path)]
    )
    assert out.exit_code == 0, out.output
    assert "your own tf.function 'my_model' retraces per batch shape" in out.output
    assert "the exported one does not" in out.output
    assert "input_signature=[tf.TensorSpec([None, 3], tf.float32)]" in out.output
    version = tmp_path / "m" / "1"
    manifest = read_manifest(version)
    assert manifest is not None
    traces = manifest["traces"]
    assert traces["source_functions"] == {"my_model": 4}
    assert traces["exported"] == {"serving_default": 1}
    assert any("retraces per batch shape" in s for s in traces["diagnosis"])
    assert traces["dimensions"] == {"serving_default": ["batch sizes 1, 2, 7"]}
    serving = tf.saved_model.load(str(version)).signatures["serving_default"]
    for batch in (1, 2, 7):
        x = np.arange(batch * 3, dtype=np.float32).reshape(batch, 3)
        np.testing.assert_allclose(serving(x=tf.constant(x))["output_0"], x * 2 + 1)


def test_tf_module_with_unsigned_call_exports_with_input_flag(
    user_dir: Path, tmp_path: Path
) -> None:
    """The user's path exactly: `graphserve export` run from the project directory."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphserve",
            "export",
            "doubling_module:build",
            "--name",
            "doubler",
            "--base-path",
            str(tmp_path),
            "--input",
            "x:float32:-1,3",
            "--output",
            "json",
        ],
        cwd=user_dir,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)  # only JSON on stdout
    assert report["traces"]["source_functions"] == {"Doubler.__call__": 4}
    assert report["traces"]["exported"] == {"serving_default": 1}
    assert "retraces per batch shape" in report["traces"]["diagnosis"][0]
    serving = tf.saved_model.load(report["path"]).signatures["serving_default"]
    x = np.ones((7, 3), np.float32)
    np.testing.assert_allclose(serving(x=tf.constant(x))["output_0"], np.full((7, 3), 3.0))


# -- the reference material's patterns ----------------------------------------------------------


def test_dense_tf_module_with_variables(user_dir: Path, tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path, "dense_module:build"))
    _assert_exported_is_eager(result, _eager("dense_module:build"), _floats(3))
    saved = saved_model_pb2.SavedModel.FromString((result.path / "saved_model.pb").read_bytes())
    assert saved.meta_graphs[0].object_graph_def.nodes  # the variables travel with the model
    assert (result.path / "variables").is_dir()


def test_autograph_if_and_while_on_tensors_become_graph_control_flow(
    user_dir: Path, tmp_path: Path
) -> None:
    result = export_model(_spec(tmp_path, "control_flow:build"))
    saved = saved_model_pb2.SavedModel.FromString((result.path / "saved_model.pb").read_bytes())
    ops = {
        node.op
        for function in saved.meta_graphs[0].graph_def.library.function
        for node in function.node_def
    }
    assert ops & {"If", "StatelessIf"} and ops & {"While", "StatelessWhile"}
    grow = _eager("control_flow:build")
    _assert_exported_is_eager(result, grow, _floats(4))
    serving = tf.saved_model.load(str(result.path)).signatures["serving_default"]
    for x in ([[1.0, 1.0, 1.0, 1.0]], [[-1.0, -1.0, -1.0, -1.0]]):  # both branches
        np.testing.assert_allclose(serving(x=tf.constant(x))["output_0"], grow(tf.constant(x)))


def test_power_loop_needs_its_python_int_bound_and_then_exports(
    user_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(RetraceError, match=r"argument 'y' of 'power' is a Python value") as err:
        export_model(_spec(tmp_path, "matrix_power:build_unbound"))
    assert "functools.partial(fn, y=...)" in str(err.value)
    assert _children(tmp_path / "m") == []

    result = export_model(_spec(tmp_path, "matrix_power:build"))
    saved = saved_model_pb2.SavedModel.FromString((result.path / "saved_model.pb").read_bytes())
    matmuls = sum(
        node.op == "BatchMatMulV2"
        for function in saved.meta_graphs[0].graph_def.library.function
        for node in function.node_def
    )
    assert matmuls == 100

    def ints(batch: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(batch)
        return {"x": rng.integers(-1, 2, (batch, 10, 10)).astype(np.int32)}

    _assert_exported_is_eager(result, _eager("matrix_power:build"), ints)


@pytest.mark.parametrize("factory", ["functional", "sequential", "subclassed"])
def test_keras_3_models(user_dir: Path, tmp_path: Path, factory: str) -> None:
    source = f"keras_models:{factory}"
    result = export_model(_spec(tmp_path, source))
    assert result.signatures["serving_default"]["inputs"] == {
        "features": {"dtype": "float32", "shape": [-1, 6]}
    }

    def features(batch: int) -> dict[str, np.ndarray]:
        return {"features": _floats(6)(batch)["x"]}

    model = _eager(source)
    _assert_exported_is_eager(result, model, features, lambda m, t: m(t["features"]))


def test_two_tensors_go_by_keyword_and_a_dict_still_works(user_dir: Path, tmp_path: Path) -> None:
    def pair(batch: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(batch)
        return {k: rng.standard_normal((batch, 3)).astype(np.float32) for k in ("a", "b")}

    result = export_model(_spec(tmp_path, "two_tensors:positional"))
    assert set(result.signatures["serving_default"]["outputs"]) == {"sum", "dot"}
    _assert_exported_is_eager(
        result, _eager("two_tensors:positional"), pair, lambda f, t: f(t["a"], t["b"])
    )
    result = export_model(_spec(tmp_path, "two_tensors:keyword_only", name="kw"))
    _assert_exported_is_eager(result, _eager("two_tensors:keyword_only"), pair, lambda f, t: f(**t))
    result = export_model(_spec(tmp_path, "two_tensors:one_dict", name="dict"))
    _assert_exported_is_eager(result, _eager("two_tensors:one_dict"), pair, lambda f, t: f(t))


def test_a_signed_tf_function_that_agrees_exports(user_dir: Path, tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path, "hazards:conflicting", inputs=[_x("x:float32:-1,5")]))
    _assert_exported_is_eager(result, _eager("hazards:conflicting"), _floats(5))
    assert result.retrace.source_functions == {"signed": 1}


# -- the hazards: failures naming the argument or dimension, warnings naming the function ---------


def _x(text: str) -> Any:
    return parse_input_spec(text)


def test_a_conflicting_input_signature_names_both(user_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(SignatureError) as err:
        export_model(_spec(tmp_path, "hazards:conflicting"))
    message = str(err.value)
    assert "declares x: float32 of shape [-1, 4]" in message
    assert "own input_signature (#0: float32 of shape [-1, 5])" in message
    assert "--input x:float32:-1,5" in message


def test_a_python_parameter_without_a_tensor_is_named(user_dir: Path, tmp_path: Path) -> None:
    out = runner.invoke(
        app, ["export", "hazards:python_value", "--name", "m", "--base-path", str(tmp_path)]
    )
    assert out.exit_code == 1
    assert "argument 'factor' of 'scale' is a Python value" in out.output
    assert "--input factor:DTYPE:SHAPE" in out.output
    assert _children(tmp_path / "m") == []


def test_a_baked_batch_that_breaks_the_graph_fails_naming_the_dimension(
    user_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(RetraceError) as err:
        export_model(_spec(tmp_path, "hazards:baked_reshape"))
    message = str(err.value)
    assert "leaves the batch dimension (dimension 0 of 'x') free" in message
    assert "fails at batch size 1 where the eager model runs" in message
    assert "'output_0' has the fixed first dimension 16 in the graph" in message
    assert "tf.shape(x)[i]" in message and "--input x:float32:N,4" in message
    assert _children(tmp_path / "m") == []


def test_a_baked_batch_that_parity_at_one_size_misses_is_caught(
    user_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(RetraceError) as err:
        export_model(_spec(tmp_path, "hazards:baked_shape"))
    message = str(err.value)
    assert "at batch size 1 the exported function returns 'output_0' of shape (4, 2)" in message
    assert "the eager model (1, 2)" in message
    assert "dimension 0 of 'output_0' was fixed while tracing (graph shape [4, 2])" in message
    assert _children(tmp_path / "m") == []


def test_a_baked_free_length_is_caught(user_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(RetraceError, match=r"leaves dimension x\[1\] free.*fails at x\[1\] = 1"):
        export_model(_spec(tmp_path, "hazards:baked_length", inputs=[_x("x:float32:-1,-1")]))
    assert _children(tmp_path / "m") == []


def test_print_at_trace_time_is_a_warning_and_stays_off_json_stdout(
    user_dir: Path, tmp_path: Path
) -> None:
    out = runner.invoke(
        app,
        [
            "export",
            "hazards:printing",
            "--name",
            "m",
            "--base-path",
            str(tmp_path),
            "--output",
            "json",
        ],
    )
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    (warning,) = [w for w in report["warnings"] if "print" in w]
    assert warning.startswith("'noisy' prints from Python ('tracing noisy with")
    assert "use tf.print" in warning


def test_a_list_append_is_a_warning(user_dir: Path, tmp_path: Path) -> None:
    result = export_model(_spec(tmp_path, "hazards:appending"))
    (warning,) = [w for w in result.warnings if "Python state" in w]
    assert "global 'CALLS' went from 1 to" in warning and "tf.Variable" in warning


def test_python_random_is_a_warning_before_parity_fails(user_dir: Path, tmp_path: Path) -> None:
    logged: list[str] = []
    with pytest.raises(ParityError):
        export_model(_spec(tmp_path, "hazards:python_random"), log=logged.append)
    (warning,) = [m for m in logged if "random" in m and m.startswith("warning:")]
    assert "'jitter' draws from Python's random or numpy.random" in warning
    assert "tf.random" in warning
    assert _children(tmp_path / "m") == []


def test_drawing_from_python_random_while_building_is_no_warning(tmp_path: Path) -> None:
    """A model that draws its initial weights from Python's random on its first call (tf-keras
    models built from a config do) draws nothing per request: no warning, and it exports."""
    result = export_model(
        _spec(tmp_path, "tests.factories:lazy_built", inputs=[_x("x:float32:-1,4")])
    )
    assert [w for w in result.warnings if "random" in w or "Python state" in w] == []


def test_python_state_the_model_changes_is_a_warning(tmp_path: Path) -> None:
    """The classic trap (tests/factories.py:Drifting): a Python counter, frozen into the graph
    while tracing. The warning names it; parity then refuses the export."""
    logged: list[str] = []
    with pytest.raises(ParityError, match="at batch size 1: the reloaded SavedModel disagrees"):
        export_model(
            _spec(tmp_path, "tests.factories:drifting", inputs=[_x("x:float32:-1,4")]),
            log=logged.append,
        )
    (warning,) = [m for m in logged if "Python state" in m]
    # 1 after the trace that reads the inputs' ranges, + 4 eager probe calls + 1 export trace
    assert "attribute 'calls' went from 1 to 6" in warning
