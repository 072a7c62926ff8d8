"""A callable's own input signature is the signature: a `tf.function` with `input_signature`, a
`tf.Module` whose `__call__` is one, positional or as one dict; the export says where it read it.
What no TF Serving client can send (a ragged or a sparse input) and what a graphserve signature
cannot fix (an input of unknown rank) is refused at export with the pattern that works, and a
refused export leaves nothing on disk.

Each model is a small module of the user's project, exported through `graphserve export` (the
CLI, as a user runs it) or `export_model`, and the export reloaded and run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.exporter import ExportSpec, export_model, parse_input_spec
from graphserve.model.trace import plain_text
from tests.userproject import user_project

MODULES = {
    # transformers' TF classes declare their serving signature as a property: a dict of specs.
    "hub_models": """
        def distilbert():
            from transformers import DistilBertConfig, TFDistilBertModel

            config = DistilBertConfig(vocab_size=100, dim=16, n_layers=1, n_heads=2,
                                      hidden_dim=32, max_position_embeddings=64)
            return TFDistilBertModel(config)
    """,
    "signed": """
        import tensorflow as tf

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="features")])
        def scale(features):
            return {"scaled": features * 3.0}

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32),
                                      tf.TensorSpec([None, 2], tf.float32)])
        def add(a, b):
            return a + b

        @tf.function(input_signature=[{"left": tf.TensorSpec([None, 2], tf.float32),
                                       "right": tf.TensorSpec([None, 2], tf.int32)}])
        def pair(inputs):
            return inputs["left"] * tf.cast(inputs["right"], tf.float32)

        class Doubler(tf.Module):
            @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
            def __call__(self, x):
                return x * 2.0

        def scaler():
            return scale

        def adder():
            return add

        def pairer():
            return pair

        def doubler():
            return Doubler()
    """,
    "refused": """
        import tensorflow as tf

        @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.float32)])
        def ragged_sum(tokens):
            return tf.reduce_sum(tokens, axis=1)

        @tf.function(input_signature=[tf.SparseTensorSpec([None, 8], tf.float32)])
        def sparse_sum(ids):
            return tf.sparse.reduce_sum(ids, axis=1)

        @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
        def any_rank(x):
            return x + 1.0

        @tf.function(input_signature=[(tf.TensorSpec([None], tf.float32),
                                       tf.TensorSpec([None], tf.float32))])
        def nested(pair):
            return pair[0] + pair[1]

        def ragged():
            return ragged_sum

        def sparse():
            return sparse_sum

        def unknown_rank():
            return any_rank

        def nesting():
            return nested

        # The patterns the refusals give, around the refused functions themselves.
        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32, name="tokens"),
                                      tf.TensorSpec([None, None], tf.int64, name="tokens_mask")])
        def padded_sum(tokens, tokens_mask):
            lengths = tf.reduce_sum(tokens_mask, axis=1)
            return ragged_sum(tf.RaggedTensor.from_tensor(tokens, lengths=lengths))

        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="ids")])
        def dense_sum(ids):
            return sparse_sum(tf.sparse.from_dense(ids))

        def padded():
            return padded_sum

        def dense():
            return dense_sum

        def keras_sparse():
            import keras

            ids = keras.Input(shape=(8,), sparse=True, name="ids")
            return keras.Model(ids, keras.layers.Dense(2)(ids))
    """,
}


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with user_project(tmp_path_factory.mktemp("user_project"), MODULES) as root:
        yield root


def _export(tmp_path: Path, source: str) -> Path:
    result = export_model(
        ExportSpec(source=source, name="m", base_path=tmp_path / "models", parity_batches=1)
    )
    return result.path


def _serving(version: Path) -> tf.types.experimental.ConcreteFunction:
    return tf.saved_model.load(str(version)).signatures["serving_default"]


def test_a_signed_tf_function_exports_with_no_flag_and_says_so(
    user_dir: Path, tmp_path: Path
) -> None:
    out = CliRunner().invoke(
        app, ["export", "signed:scaler", "--name", "m", "--base-path", str(tmp_path)]
    )
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "input signature from the input_signature of tf.function 'scale'" in text
    serving = _serving(tmp_path / "m" / "1")
    assert list(serving.structured_input_signature[1]) == ["features"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(serving(features=tf.constant(x))["scaled"], x * 3.0)


def test_unnamed_specs_take_their_parameters_names(user_dir: Path, tmp_path: Path) -> None:
    serving = _serving(_export(tmp_path, "signed:adder"))
    assert sorted(serving.structured_input_signature[1]) == ["a", "b"]
    a, b = np.ones((3, 2), np.float32), np.full((3, 2), 2.0, np.float32)
    np.testing.assert_allclose(serving(a=tf.constant(a), b=tf.constant(b))["output_0"], a + b)


def test_one_dict_of_specs_is_named_by_its_keys(user_dir: Path, tmp_path: Path) -> None:
    serving = _serving(_export(tmp_path, "signed:pairer"))
    specs = serving.structured_input_signature[1]
    assert {k: (s.dtype.name, s.shape.as_list()) for k, s in specs.items()} == {
        "left": ("float32", [None, 2]),
        "right": ("int32", [None, 2]),
    }
    left, right = np.full((2, 2), 1.5, np.float32), np.array([[1, 2], [3, 4]], np.int32)
    got = serving(left=tf.constant(left), right=tf.constant(right))["output_0"]
    np.testing.assert_allclose(got, left * right)


def test_a_module_whose_call_is_signed_exports_as_is(user_dir: Path, tmp_path: Path) -> None:
    result = export_model(
        ExportSpec(source="signed:doubler", name="m", base_path=tmp_path, parity_batches=1)
    )
    serving = _serving(result.path)
    spec = serving.structured_input_signature[1]["x"]
    assert (spec.dtype.name, spec.shape.as_list()) == ("float32", [None, 4])
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(serving(x=tf.constant(x))["output_0"], x * 2.0)


def test_a_transformers_model_exports_on_its_declared_signature(
    user_dir: Path, tmp_path: Path
) -> None:
    lines: list[str] = []
    spec = ExportSpec(
        source="hub_models:distilbert", name="m", base_path=tmp_path, parity_batches=1
    )
    result = export_model(spec, log=lines.append)
    assert "input signature from the input_signature of TFDistilBertModel" in lines
    serving = _serving(result.path)
    specs = serving.structured_input_signature[1]
    assert {k: (s.dtype.name, s.shape.as_list()) for k, s in specs.items()} == {
        "input_ids": ("int32", [None, None]),
        "attention_mask": ("int32", [None, None]),
    }
    ids = tf.constant([[1, 5, 7, 0]], tf.int32)
    out = serving(input_ids=ids, attention_mask=tf.constant([[1, 1, 1, 0]], tf.int32))
    assert out["last_hidden_state"].shape == (1, 4, 16)


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        (
            "ragged",
            "input 'tokens' is a ragged tensor, and TF Serving's Predict API (REST and gRPC) "
            "carries dense tensors only, so no client could send it. Take it padded, as a dense "
            "tokens:float32:-1,-1 with a mask of its real values tokens_mask:int64:-1,-1 (1 for a "
            "value, 0 for padding), and build it inside: tf.RaggedTensor.from_tensor(tokens, "
            "lengths=tf.reduce_sum(tokens_mask, axis=1)). Every input then starts with the batch",
        ),
        (
            "sparse",
            "input 'ids' is a sparse tensor, and TF Serving's Predict API (REST and gRPC) carries "
            "dense tensors only, so no client could send it. Take it dense, as ids:float32:-1,8 "
            "(zeros where it has no value), and build it inside: tf.sparse.from_dense(ids)",
        ),
        (
            "unknown_rank",
            "input 'x' has an unknown rank, and a graphserve signature fixes each input's rank: "
            "pass --input x:float32:SHAPE",
        ),
        ("nesting", "nests its tensors ('pair' is tuple): a graphserve signature is flat"),
        (
            "keras_sparse",
            "input 'ids' is a sparse tensor, and TF Serving's Predict API (REST and gRPC) carries "
            "dense tensors only",
        ),
    ],
)
def test_what_no_signature_can_carry_is_refused_and_leaves_nothing(
    user_dir: Path, tmp_path: Path, factory: str, said: str
) -> None:
    out = CliRunner().invoke(
        app,
        ["export", f"refused:{factory}", "--name", "m", "--base-path", str(tmp_path / "models")],
    )
    assert out.exit_code == 1, out.output
    text = " ".join(out.output.split())
    assert said in text, text
    assert "Traceback" not in out.output
    assert not (tmp_path / "models").exists()


def test_the_patterns_the_refusals_give_export_on_generated_inputs(
    user_dir: Path, tmp_path: Path
) -> None:
    """The dense forms the ragged and sparse refusals name export with no flag (the mask is
    generated as padding masks), and answer as the refused functions do on the same values."""
    for factory in ("padded", "dense"):
        out = CliRunner().invoke(
            app,
            ["export", f"refused:{factory}", "--name", factory,
             "--base-path", str(tmp_path / "models")],
        )  # fmt: skip
        assert out.exit_code == 0, out.output
    padded = _serving(tmp_path / "models" / "padded" / "1")
    got = padded(
        tokens=tf.constant([[1.0, 2.0, 9.0], [3.0, 9.0, 9.0]]),
        tokens_mask=tf.constant([[1, 1, 0], [1, 0, 0]], tf.int64),
    )
    np.testing.assert_allclose(next(iter(got.values())).numpy(), [3.0, 3.0])
    dense = _serving(tmp_path / "models" / "dense" / "1")
    ids = np.zeros((2, 8), np.float32)
    ids[0, 1], ids[0, 5], ids[1, 7] = 2.0, 4.0, 1.5
    np.testing.assert_allclose(next(iter(dense(ids=tf.constant(ids)).values())).numpy(), [6.0, 1.5])


def test_an_unknown_rank_takes_the_rank_from_the_command_line(
    user_dir: Path, tmp_path: Path
) -> None:
    result = export_model(
        ExportSpec(
            source="refused:unknown_rank",
            name="m",
            base_path=tmp_path,
            inputs=[parse_input_spec("x:float32:-1,3")],
            parity_batches=1,
        )
    )
    spec = _serving(result.path).structured_input_signature[1]["x"]
    assert (spec.dtype.name, spec.shape.as_list()) == ("float32", [None, 3])


def test_a_refused_export_inside_the_write_leaves_no_model_directory(
    user_dir: Path, tmp_path: Path
) -> None:
    """The op scan refuses after the SavedModel is written: the version's temporary directory
    goes, and so do the model and base directories the export made."""
    ops = """
        import tensorflow as tf

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="path")])
        def read(path):  # lists the server's files: flagged, and refused without --allow-op
            found = tf.size(tf.io.matching_files(path[0]))
            return tf.fill(tf.shape(path), found)

        def build():
            return read
    """
    base = tmp_path / "new" / "models"
    with user_project(tmp_path, {"ops": ops}), pytest.raises(Exception, match="touch files"):
        export_model(ExportSpec(source="ops:build", name="m", base_path=base))
    assert not (tmp_path / "new").exists()


def test_a_call_into_python_is_refused_even_with_allow_op(user_dir: Path, tmp_path: Path) -> None:
    """A tf.py_function passes parity in the exporting process, which still holds the function,
    and no server can run it after: the export refuses it whatever --allow-op says."""
    python = """
        import numpy as np
        import tensorflow as tf

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def rounded(x):
            return tf.py_function(lambda t: np.round(t.numpy()), [x], tf.float32)

        def build():
            return rounded
    """
    with user_project(tmp_path, {"python_ops": python}):
        out = CliRunner().invoke(
            app,
            ["export", "python_ops:build", "--name", "m", "--base-path", str(tmp_path / "models"),
             "--allow-op", "EagerPyFunc"],
        )  # fmt: skip
    assert out.exit_code == 1, out.output
    text = " ".join(out.output.split())
    assert "the graph calls Python (EagerPyFunc in " in text
    assert "so no server can run it" in text
    assert "graphserve serve eager python_ops:build" in text
    assert not (tmp_path / "models").exists()


def test_an_existing_model_directory_stays_when_an_export_is_refused(tmp_path: Path) -> None:
    from graphserve.core.versions import atomic_version_dir

    model_dir = tmp_path / "m"
    (model_dir / "1").mkdir(parents=True)
    with pytest.raises(RuntimeError), atomic_version_dir(model_dir, 2) as tmp:
        tmp.mkdir()
        raise RuntimeError("refused")
    assert sorted(p.name for p in model_dir.iterdir()) == ["1"]


def test_a_graph_ops_error_keeps_the_users_line_not_tensorflows_stack() -> None:
    @tf.function
    def decode(data: tf.Tensor) -> tf.Tensor:
        return tf.io.decode_jpeg(data)

    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        decode(tf.constant(b"not a jpeg"))
    raw = str(err.value)
    assert "most recent call last" in raw and raw.count('File "') > 3  # TF's own stack is there
    text = plain_text(raw)
    assert text.count('File "') == 1, text
    assert f'(File "{__file__}"' in text and "in decode)" in text
    assert "DecodeJpeg" in text and "most recent call last" not in text


def test_verbose_adds_the_models_full_traceback_to_the_one_paragraph(tmp_path: Path) -> None:
    args = ["export", "tests.test_inputs:build_picky", "--name", "picky", "--input",
            "x:int32:-1", "--base-path", str(tmp_path)]  # fmt: skip
    quiet = CliRunner().invoke(app, args)
    assert quiet.exit_code == 1, quiet.output
    assert "x must be a multiple of 7" in quiet.output
    assert "Traceback (most recent call last)" not in quiet.output
    assert "the full traceback of the model's error: add --verbose" in quiet.output
    loud = CliRunner().invoke(app, [*args, "--verbose"])
    assert loud.exit_code == 1, loud.output
    paragraph, _, trace = loud.output.partition("Traceback (most recent call last)")
    assert "x must be a multiple of 7" in paragraph
    assert "InvalidArgumentError" in trace and 'File "' in trace
    assert "add --verbose" not in loud.output
