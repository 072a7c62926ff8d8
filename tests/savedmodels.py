"""Helpers that write real SavedModels for tests, each the way its kind of user writes one.

    write_tf1_multi_signature   TF1 graph mode + SavedModelBuilder + Saver: predict, classify,
                                regress and an unknown-rank predict signature
    write_clean                 tf.saved_model.save of a tf.Module with a variable
    write_with_write_file       ... whose function calls tf.io.write_file   (WriteFile)
    write_with_read_file        ... whose function calls tf.io.read_file    (ReadFile)
    write_with_py_function      ... whose function calls tf.py_function     (EagerPyFunc)
    write_lambda_keras          a .keras file with a Lambda layer (code: safe mode refuses it)
    write_tf_text               a tf.Module whose function runs TF Text ops, as TF Serving's
                                tf_text_regression does (imports tensorflow_text)

Each takes the version directory to create and returns it. Tracing a function does not run it, so
the file ops never touch the filesystem.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import tensorflow as tf

from graphserve.core.signature import TensorSpec

__all__ = [
    "CLASSIFY_METHOD",
    "CLEAN_INPUTS",
    "REGRESS_METHOD",
    "TF_TEXT_OPS",
    "write_clean",
    "write_lambda_keras",
    "write_tf1_multi_signature",
    "write_tf_text",
    "write_with_py_function",
    "write_with_read_file",
    "write_with_write_file",
]

CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"

# The serving_default inputs of the TF2 models, as the exporter's specs (for warm-up records).
CLEAN_INPUTS = [TensorSpec("x", "float32", (None, 2))]

_X = tf.TensorSpec([None, 2], tf.float32, name="x")


def write_tf1_multi_signature(path: Path) -> Path:
    """A TF1 SavedModel (tags ["serve"]) with a variable, a Saver and four signatures.

    serving_default  predict   x: float32 [-1, 3] → probabilities: float32 [-1, 2],
                               class_ids: int64 [-1]
    classify         classify  inputs: string [-1] (tf.Example) → classes: string [-1, 2],
                               scores: float32 [-1, 2]
    regress          regress   inputs: string [-1] (tf.Example) → outputs: float32 [-1, 1]
    any_rank         predict   t: float32 of unknown rank → doubled: float32 of unknown rank
    """
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 3], name="x")
        serialized = v1.placeholder(tf.string, [None], name="tf_example")
        features = v1.io.parse_example(serialized, {"x": v1.io.FixedLenFeature([3], tf.float32)})
        w = v1.get_variable("w", initializer=tf.constant([[1.0, -1.0], [0.5, 0.5], [0.0, 2.0]]))

        def head(inputs: tf.Tensor) -> tf.Tensor:
            return tf.nn.softmax(tf.matmul(inputs, w))

        probabilities = head(x)
        example_scores = head(features["x"])
        classes = tf.tile(tf.constant([["neg", "pos"]]), [tf.shape(example_scores)[0], 1])
        regression = tf.reduce_sum(features["x"], axis=1, keepdims=True)
        t = v1.placeholder(tf.float32, None, name="t")

        signatures = {
            "serving_default": v1.saved_model.predict_signature_def(
                {"x": x},
                {"probabilities": probabilities, "class_ids": tf.argmax(probabilities, axis=1)},
            ),
            "classify": v1.saved_model.classification_signature_def(
                serialized, classes, example_scores
            ),
            "regress": v1.saved_model.regression_signature_def(serialized, regression),
            "any_rank": v1.saved_model.predict_signature_def({"t": t}, {"doubled": t * 2.0}),
        }
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(str(path))
            builder.add_meta_graph_and_variables(
                session,
                [tf.saved_model.SERVING],
                signature_def_map=signatures,
                saver=v1.train.Saver(),
            )
            builder.save()
    return path


class _Module(tf.Module):
    """A tf.Module with a variable whose serving function is `body(x, scale)`."""

    def __init__(self, body: Callable[[tf.Tensor, tf.Variable], tf.Tensor]) -> None:
        super().__init__()
        self.scale = tf.Variable([1.5, -2.0], name="scale")
        self._body = body

    @tf.function(input_signature=[_X])
    def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": self._body(x, self.scale)}


def _save(path: Path, body: Callable[[tf.Tensor, tf.Variable], tf.Tensor]) -> Path:
    module = _Module(body)
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    return path


def write_clean(path: Path) -> Path:
    """x: float32 [-1, 2] → y = x * scale; nothing that should not be served."""
    return _save(path, lambda x, scale: x * scale)


def write_with_write_file(path: Path) -> Path:
    """Writes the sum of x to /tmp/graphserve-never-written on every call."""

    def body(x: tf.Tensor, scale: tf.Variable) -> tf.Tensor:
        tf.io.write_file("/tmp/graphserve-never-written", tf.strings.as_string(tf.reduce_sum(x)))
        return x * scale

    return _save(path, body)


def write_with_read_file(path: Path) -> Path:
    """Reads /etc/hostname and adds its length to x."""

    def body(x: tf.Tensor, scale: tf.Variable) -> tf.Tensor:
        length = tf.strings.length(tf.io.read_file("/etc/hostname"))
        return x * scale + tf.cast(length, tf.float32)

    return _save(path, body)


def write_with_py_function(path: Path) -> Path:
    """Calls back into Python (EagerPyFunc)."""

    def body(x: tf.Tensor, scale: tf.Variable) -> tf.Tensor:
        doubled = tf.py_function(lambda t: t * 2.0, [x], tf.float32)
        return tf.ensure_shape(doubled, [None, 2]) * scale

    return _save(path, body)


def write_half_plus_two(path: Path) -> Path:
    """TF Serving's own test model, rebuilt: y = 0.5 * x + 2 as a TF1 SavedModel.

    serving_default  predict   x: float32 [-1] → y: float32 [-1]
    classify_x_to_y  classify  inputs: serialized tf.Examples with feature x → scores [-1, 1]
    regress_x_to_y   regress   inputs: serialized tf.Examples with feature x → outputs [-1, 1]
    """
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        a = v1.get_variable("a", initializer=tf.constant(0.5))
        b = v1.get_variable("b", initializer=tf.constant(2.0))
        serialized = v1.placeholder(tf.string, [None], name="tf_example")
        parsed = v1.io.parse_example(
            serialized, {"x": v1.io.FixedLenFeature([1], tf.float32, default_value=[0.0])}
        )
        from_examples = tf.add(tf.multiply(a, parsed["x"]), b, name="y_from_examples")
        x = v1.placeholder(tf.float32, [None], name="x")
        y = tf.add(tf.multiply(a, x), b, name="y")
        signatures = {
            "serving_default": v1.saved_model.predict_signature_def({"x": x}, {"y": y}),
            "classify_x_to_y": v1.saved_model.classification_signature_def(
                serialized, None, from_examples
            ),
            "regress_x_to_y": v1.saved_model.regression_signature_def(serialized, from_examples),
        }
        with v1.Session(graph=graph) as session:
            session.run(v1.global_variables_initializer())
            builder = v1.saved_model.Builder(str(path))
            builder.add_meta_graph_and_variables(
                session, [tf.saved_model.SERVING], signature_def_map=signatures
            )
            builder.save()
    return path


def write_lambda_keras(path: Path) -> Path:
    """A Keras model x (3) -> double (x * 2) saved as `path` (.keras); its Lambda layer is
    Python code, which Keras's safe mode will not deserialize."""
    import keras

    inputs = keras.Input(shape=(3,), name="x")
    outputs = keras.layers.Lambda(lambda t: t * 2.0, name="double")(inputs)
    keras.Model(inputs, outputs).save(path)
    return path


# The TF Text ops write_tf_text's function runs (names as the graph has them).
TF_TEXT_OPS = (
    "CaseFoldUTF8",
    "MaxSpanningTree",
    "NormalizeUTF8",
    "RegexSplitWithOffsets",
    "TFText>WhitespaceTokenizeWithOffsetsV2",
    "UnicodeScriptTokenizeWithOffsets",
    "WordpieceTokenizeWithOffsets",
)


def write_tf_text(path: Path) -> Path:
    """TF Serving's tf_text_regression as TF Text's generator writes it (read in tensorflow/text:
    oss_scripts/model_server/save_models.py; nothing copied): a tf.Module whose serving function
    runs TF Text ops (`TF_TEXT_OPS`: normalizing, tokenizing, splitting, a spanning tree) as
    control dependencies of y = x + 1, for x of shape [1]. Without its SentencePiece ops, which
    need a model file TF Text's repository has and its wheel does not."""
    import tensorflow_text as text  # registers TF Text's ops in this process

    class TextOps(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            keys = tf.lookup.KeyValueTensorInitializer(["i", "am"], tf.constant([1, 2], tf.int64))
            self.vocab = tf.lookup.StaticHashTable(keys, default_value=-1)

        @tf.function(input_signature=[tf.TensorSpec([1], tf.float32, name="x")])
        def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            normalized = text.normalize_utf8(text.case_fold_utf8(["A String"]))
            words = text.WhitespaceTokenizer().tokenize(normalized)
            pieces = text.WordpieceTokenizer(self.vocab).tokenize(["i am"])
            split = text.regex_split(["Yo dawg!"], r"\s")
            scripts = text.UnicodeScriptTokenizer().tokenize(["a string"])
            tree, _ = text.max_spanning_tree(tf.constant([2]), tf.constant([[[0, 0], [1, 0]]]))
            ran = [normalized, words.flat_values, pieces.flat_values, split.flat_values,
                   scripts.flat_values, tree]  # fmt: skip
            with tf.control_dependencies(ran):
                return {"y": tf.add(x, [1.0])}

    module = TextOps()
    tf.saved_model.save(module, str(path), signatures=module.__call__.get_concrete_function())
    return path
