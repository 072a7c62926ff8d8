"""What an export saves: the serving signatures' functions and what they capture, nothing more.

The exporter calls the model eagerly at several batch sizes before tracing it, and a tf.function
without input_signature keeps a concrete function per shape it saw. Saving the model object would
save every one of them; `graphserve.model.trace.saveable` saves the variables, lookup tables and
vocabulary assets the serving functions capture instead. Each test reads the saved_model.pb it
wrote and counts the concrete functions the object graph saves and the ops of the function
library, against what the signatures need.

Factories are sources `tests.test_export_contents:NAME`; those over a vocabulary file read its
path from GRAPHSERVE_TEST_VOCAB, which each test sets to a file in its tmp_path.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from graphserve.exporter import ExportResult, ExportSpec, export_model, parse_input_spec

VOCAB_ENV = "GRAPHSERVE_TEST_VOCAB"
WORDS = ["the", "model", "graph", "serves"]  # a line each; unknown words map to -1
WORDS_IN = ["graph", "zebra", "the", "serves", ""]
IDS_OUT = [2, -1, 0, 3, -1]
SCORES_OUT = [2.5, -1.0, 0.5, 3.5, -1.0]  # VocabScorer's weights; unknown words the last one
PROBE_BATCH_SIZES = (1, 2, 3, 5)  # the exporter's eager probe, graphserve.exporter.retrace
# Functions every SavedModel with variables has: the checkpoint's save and restore.
SAVER = Counter({"_traced_save": 1, "_traced_restore": 1})
# A table saved as a resource brings the functions that recreate it when loaded.
TABLE = Counter({"_creator": 1, "_initializer": 1, "_destroyer": 1})
PLUMBING = {"Identity", "NoOp", "StatefulPartitionedCall"}  # a function's outputs, and calls


# -- factories ----------------------------------------------------------------------------------


class DenseNet(tf.Module):
    """Two dense layers behind a tf.function without input_signature: it traces per batch size."""

    def __init__(self) -> None:
        super().__init__()
        rng = np.random.default_rng(5)
        self.w1 = tf.Variable(rng.standard_normal((4, 8)).astype("float32"), name="w1")
        self.b1 = tf.Variable(rng.standard_normal(8).astype("float32"), name="b1")
        self.w2 = tf.Variable(rng.standard_normal((8, 3)).astype("float32"), name="w2")
        self.b2 = tf.Variable(rng.standard_normal(3).astype("float32"), name="b2")

    @tf.function
    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.nn.relu(x @ self.w1 + self.b1) @ self.w2 + self.b2


def build_dense() -> DenseNet:
    return DenseNet()


def _vocab_table() -> tf.lookup.StaticHashTable:
    initializer = tf.lookup.TextFileInitializer(
        os.environ[VOCAB_ENV],
        tf.string,
        tf.lookup.TextFileIndex.WHOLE_LINE,
        tf.int64,
        tf.lookup.TextFileIndex.LINE_NUMBER,
    )
    return tf.lookup.StaticHashTable(initializer, default_value=-1)


class VocabScorer(tf.Module):
    """Words → ids through a table over a vocabulary file, and a weight per id (the last row for
    unknown words), behind a tf.function without input_signature."""

    def __init__(self) -> None:
        super().__init__()
        self.table = _vocab_table()
        self.weights = tf.Variable([0.5, 1.5, 2.5, 3.5, -1.0], name="weights")

    @tf.function
    def __call__(self, words: tf.Tensor) -> dict[str, tf.Tensor]:
        return _score(self.table, self.weights, words)


def _score(table: Any, weights: tf.Variable, words: tf.Tensor) -> dict[str, tf.Tensor]:
    ids = table.lookup(words)
    row = tf.where(ids < 0, tf.cast(tf.shape(weights)[0] - 1, tf.int64), ids)
    return {"ids": ids, "score": tf.gather(weights, row)}


def build_vocab() -> VocabScorer:
    return VocabScorer()


def build_vocab_closure() -> Any:
    """A plain function closing over a table and a variable: no tf.Module tracks them."""
    table = _vocab_table()
    weights = tf.Variable([0.5, 1.5, 2.5, 3.5, -1.0], name="weights")

    def score(words: tf.Tensor) -> dict[str, tf.Tensor]:
        return _score(table, weights, words)

    return score


class HiddenTable(VocabScorer):
    """A table tracked only when a SavedModel is written, not in a checkpoint (as objects with
    save-only children do): the walk for the owners of captured resources cannot see it."""

    def __init__(self) -> None:
        tf.Module.__init__(self)
        self.weights = tf.Variable([0.5, 1.5, 2.5, 3.5, -1.0], name="weights")
        # Past tf.Module.__setattr__, which would track it.
        object.__setattr__(self, "table", _vocab_table())

    def _trackable_children(self, save_type: str = "checkpoint", **kwargs: Any) -> dict[str, Any]:
        children = dict(super()._trackable_children(save_type, **kwargs))
        if save_type == "savedmodel":
            children["table"] = self.table
        return children


def build_hidden_table() -> HiddenTable:
    return HiddenTable()


def build_keras_vectorizer() -> keras.Model:
    """Keras 3: text (string [-1, 1]) → TextVectorization → Embedding → mean → Dense(2)."""
    keras.utils.set_random_seed(7)
    text = keras.Input((1,), dtype="string", name="text")
    vectorize = keras.layers.TextVectorization(
        vocabulary=WORDS, output_sequence_length=5, name="vectorize"
    )
    vectors = keras.layers.Embedding(len(WORDS) + 2, 4, name="embedding")(vectorize(text))
    pooled = keras.layers.GlobalAveragePooling1D(name="mean")(vectors)
    scores = keras.layers.Dense(2, name="scores")(pooled)
    return keras.Model(text, scores, name="vectorizer")


def build_keras_file_lookup() -> keras.Model:
    """Keras 3: word (string [-1]) → StringLookup over the vocabulary file → Embedding(3)."""
    keras.utils.set_random_seed(7)
    word = keras.Input((), dtype="string", name="word")
    ids = keras.layers.StringLookup(vocabulary=os.environ[VOCAB_ENV], name="lookup")(word)
    vectors = keras.layers.Embedding(len(WORDS) + 1, 3, name="embedding")(ids)
    return keras.Model(word, vectors, name="file_lookup")


def build_keras_dense() -> keras.Model:
    """Keras 3: x (float32 [-1, 6]) → Dense(5, relu) → Dense(2)."""
    keras.utils.set_random_seed(7)
    x = keras.Input((6,), name="x")
    hidden = keras.layers.Dense(5, activation="relu", name="hidden")(x)
    return keras.Model(x, keras.layers.Dense(2, name="out")(hidden), name="dense")


def build_tf_keras_lookup() -> Any:
    """tf-keras (Keras 2): word (string [-1]) → StringLookup over the vocabulary file →
    Embedding(3) → Dense(2)."""
    import tf_keras

    tf_keras.utils.set_random_seed(7)
    word = tf_keras.Input((), dtype="string", name="word")
    ids = tf_keras.layers.StringLookup(vocabulary=os.environ[VOCAB_ENV], name="lookup")(word)
    vectors = tf_keras.layers.Embedding(len(WORDS) + 1, 3, name="embedding")(ids)
    return tf_keras.Model(word, tf_keras.layers.Dense(2, name="scores")(vectors))


# -- reading saved_model.pb ---------------------------------------------------------------------


@dataclass
class Saved:
    """The contents of a saved_model.pb, functions named without `__inference_` and the uid."""

    library: Counter[str]  # the graph's function library: every function body
    saved: Counter[str]  # the concrete functions the object graph saves (callable when loaded)
    ops: dict[str, Counter[str]]  # op types per library function, by its full name

    @property
    def op_count(self) -> int:
        return sum(sum(ops.values()) for ops in self.ops.values())

    def ops_of(self, name: str) -> Counter[str]:
        """The ops of every library function called `name`, less the plumbing."""
        total: Counter[str] = Counter()
        for full, ops in self.ops.items():
            if _short(full) == name:
                total.update({op: n for op, n in ops.items() if op not in PLUMBING})
        return total


def _short(name: str) -> str:
    return re.sub(r"_\d+$", "", name.removeprefix("__inference_"))


def _read(version: Path) -> Saved:
    model = saved_model_pb2.SavedModel()
    model.ParseFromString((version / "saved_model.pb").read_bytes())
    graph = model.meta_graphs[0]
    functions = graph.graph_def.library.function
    saved: set[str] = set()  # a function node lists its traces; each is a bare node too
    for node in graph.object_graph_def.nodes:
        if node.WhichOneof("kind") == "function":
            saved.update(node.function.concrete_functions)
        elif node.WhichOneof("kind") == "bare_concrete_function":
            saved.add(node.bare_concrete_function.concrete_function_name)
    return Saved(
        library=Counter(_short(f.signature.name) for f in functions),
        saved=Counter(_short(name) for name in saved),
        ops={f.signature.name: Counter(n.op for n in f.node_def) for f in functions},
    )


def _export(tmp_path: Path, source: str, *inputs: str, name: str = "m") -> ExportResult:
    return export_model(
        ExportSpec(
            source=source,
            name=name,
            base_path=tmp_path / "models",
            inputs=[parse_input_spec(text) for text in inputs],
            parity_batches=1,
            warmup_samples=1,
        )
    )


def _signature(path: Path) -> Any:
    return tf.saved_model.load(str(path)).signatures["serving_default"]


@pytest.fixture
def vocab_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "source" / "vocab.txt"
    path.parent.mkdir()
    path.write_text("".join(f"{w}\n" for w in WORDS))
    monkeypatch.setenv(VOCAB_ENV, str(path))
    return path


# -- (a) a tf.Module with an unsigned tf.function -----------------------------------------------


def test_module_export_saves_only_the_serving_function(tmp_path: Path) -> None:
    result = _export(tmp_path, "tests.test_export_contents:build_dense", "x:float32:-1,4")
    # The probe traced the model's own function once per batch size: saving the model would
    # have saved those concrete functions, and one more for the signature's [-1, 4].
    assert list(result.retrace.source_functions.values()) == [len(PROBE_BATCH_SIZES)]

    saved = _read(result.path)
    # The one signature is the one function a loader can call ...
    assert saved.saved == Counter({"signature_wrapper": 1})
    # ... and the library is its call chain, signature → serve → the model's __call__ traced
    # once at [-1, 4], with the checkpoint's save and restore.
    serving = Counter({"signature_wrapper": 1, "serve_serving_default": 1, "__call__": 1})
    assert saved.library == serving + SAVER
    # One copy of the network: two layers, each two variable reads, a matmul and an add.
    assert saved.ops_of("__call__") == Counter(
        {"ReadVariableOp": 4, "MatMul": 2, "AddV2": 2, "Relu": 1}
    )
    assert saved.ops_of("serve_serving_default") == saved.ops_of("signature_wrapper") == Counter()
    # All the ops but the saver's: those 9, an Identity (the output) and a NoOp in each of the
    # three functions, and the two calls between them.
    saver_ops = sum(sum(ops.values()) for f, ops in saved.ops.items() if _short(f) in SAVER)
    assert saved.op_count - saver_ops == 9 + 3 * 2 + 2

    x = np.random.default_rng(1).standard_normal((7, 4)).astype("float32")
    np.testing.assert_allclose(
        _signature(result.path)(x=tf.constant(x))["output_0"].numpy(),
        build_dense()(tf.constant(x)).numpy(),
        rtol=1e-6,
        atol=1e-6,
    )


# -- (b) a tf.Module with a table over a vocabulary file --------------------------------------


def _assert_vocab_asset(result: ExportResult, vocab_file: Path) -> None:
    assets = result.path / "assets"
    assert sorted(p.name for p in assets.iterdir()) == ["vocab.txt"]
    assert (assets / "vocab.txt").read_text() == vocab_file.read_text()


def _assert_scores(path: Path, vocab_file: Path) -> None:
    """The export maps words to ids and scores with the source vocabulary file gone: the table
    reads the copy in the SavedModel's assets."""
    vocab_file.unlink(missing_ok=True)
    out = _signature(path)(words=tf.constant(WORDS_IN))
    assert out["ids"].numpy().tolist() == IDS_OUT
    np.testing.assert_allclose(out["score"].numpy(), SCORES_OUT)


def test_vocabulary_table_and_its_asset_are_saved_without_probe_traces(
    tmp_path: Path, vocab_file: Path
) -> None:
    result = _export(tmp_path, "tests.test_export_contents:build_vocab", "words:string:-1")
    assert list(result.retrace.source_functions.values()) == [len(PROBE_BATCH_SIZES)]
    _assert_vocab_asset(result, vocab_file)

    saved = _read(result.path)
    assert saved.saved == Counter({"signature_wrapper": 1}) + TABLE
    assert saved.library["__call__"] == 1
    assert saved.ops_of("__call__")["LookupTableFindV2"] == 1
    _assert_scores(result.path, vocab_file)


def test_a_plain_function_closing_over_a_table_exports_it(tmp_path: Path, vocab_file: Path) -> None:
    result = _export(tmp_path, "tests.test_export_contents:build_vocab_closure", "words:string:-1")
    _assert_vocab_asset(result, vocab_file)
    assert _read(result.path).saved == Counter({"signature_wrapper": 1}) + TABLE
    _assert_scores(result.path, vocab_file)


def test_a_table_the_walk_cannot_see_falls_back_to_saving_the_whole_model(
    tmp_path: Path, vocab_file: Path
) -> None:
    result = _export(tmp_path, "tests.test_export_contents:build_hidden_table", "words:string:-1")
    _assert_vocab_asset(result, vocab_file)
    saved = _read(result.path)
    # The old way: the model's __call__ is saved with the probe's traces and the signature's.
    assert saved.saved["__call__"] == len(PROBE_BATCH_SIZES) + 1
    assert saved.saved["signature_wrapper"] == 1
    _assert_scores(result.path, vocab_file)


# -- (c) Keras models ------------------------------------------------------------------------------


def test_keras_text_vectorization_exports_its_table(tmp_path: Path) -> None:
    result = _export(tmp_path, "tests.test_export_contents:build_keras_vectorizer")
    saved = _read(result.path)
    assert saved.saved == Counter({"signature_wrapper": 1}) + TABLE
    text = np.array([["the graph serves"], ["zebra model"], [""]], dtype=object)
    np.testing.assert_allclose(
        _signature(result.path)(text=tf.constant(text))["scores"].numpy(),
        build_keras_vectorizer()(tf.constant(text), training=False).numpy(),
        rtol=1e-6,
        atol=1e-6,
    )


def test_keras_lookup_over_a_vocabulary_file_copies_it(tmp_path: Path, vocab_file: Path) -> None:
    result = _export(tmp_path, "tests.test_export_contents:build_keras_file_lookup")
    _assert_vocab_asset(result, vocab_file)
    assert _read(result.path).saved == Counter({"signature_wrapper": 1}) + TABLE
    words = tf.constant(WORDS_IN)
    expected = build_keras_file_lookup()(words, training=False).numpy()
    vocab_file.unlink()
    np.testing.assert_allclose(
        _signature(result.path)(word=words)["embedding"].numpy(), expected, rtol=1e-6
    )


def test_tf_keras_lookup_over_a_vocabulary_file_copies_it(tmp_path: Path, vocab_file: Path) -> None:
    result = _export(tmp_path, "tests.test_export_contents:build_tf_keras_lookup", "word:string:-1")
    _assert_vocab_asset(result, vocab_file)
    assert _read(result.path).saved == Counter({"signature_wrapper": 1}) + TABLE
    words = tf.constant(WORDS_IN)
    expected = build_tf_keras_lookup()(words).numpy()
    vocab_file.unlink()
    np.testing.assert_allclose(
        _signature(result.path)(word=words)["output_0"].numpy(), expected, rtol=1e-6
    )


def test_keras_dense_model_saves_its_variables_once(tmp_path: Path) -> None:
    result = _export(tmp_path, "tests.test_export_contents:build_keras_dense")
    saved = _read(result.path)
    assert saved.saved == Counter({"signature_wrapper": 1})
    assert saved.ops_of("serve_serving_default")["MatMul"] == 2
    reader = tf.train.load_checkpoint(str(result.path / "variables" / "variables"))
    weights = [n for n in reader.get_variable_to_shape_map() if n.endswith("VARIABLE_VALUE")]
    assert len(weights) == 4  # two kernels and two biases, each once
    x = np.random.default_rng(2).standard_normal((5, 6)).astype("float32")
    np.testing.assert_allclose(
        _signature(result.path)(x=tf.constant(x))["out"].numpy(),
        build_keras_dense()(x, training=False).numpy(),
        rtol=1e-6,
        atol=1e-6,
    )


# -- (d) re-exporting an exported SavedModel ----------------------------------------------------


def test_reexported_savedmodel_keeps_its_variables(tmp_path: Path) -> None:
    first = _export(tmp_path, "tests.test_export_contents:build_dense", "x:float32:-1,4")
    again = _export(tmp_path, str(first.path), name="again")
    assert again.path == tmp_path / "models" / "again" / "1"
    saved = _read(again.path)
    assert saved.saved == Counter({"signature_wrapper": 1})
    assert sum(saved.ops_of(f)["MatMul"] for f in saved.library) == 2
    x = np.random.default_rng(3).standard_normal((3, 4)).astype("float32")
    expected = build_dense()(tf.constant(x)).numpy()
    shutil.rmtree(first.path)
    np.testing.assert_allclose(
        _signature(again.path)(x=tf.constant(x))["output_0"].numpy(), expected, rtol=1e-6
    )


def test_reexported_savedmodel_with_a_vocabulary_table(tmp_path: Path, vocab_file: Path) -> None:
    first = _export(tmp_path, "tests.test_export_contents:build_vocab", "words:string:-1")
    again = _export(tmp_path, str(first.path), name="again")
    _assert_vocab_asset(again, vocab_file)
    assert _read(again.path).saved == Counter({"signature_wrapper": 1}) + TABLE
    shutil.rmtree(first.path)
    _assert_scores(again.path, vocab_file)
