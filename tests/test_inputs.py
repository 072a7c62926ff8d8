"""Inputs that fit the model, from one place (graphserve.core.inputs, graphserve.model.domains):
generated values real models take, the ranges a model's graph tells, the user's samples and
ranges, and the error of a model that refuses generated inputs, through the exporter and the
eager server."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from typer.testing import CliRunner

from graphserve.cli import app
from graphserve.core.contract import SignatureContract, load_signature_file
from graphserve.core.errors import ModelLoadError, SignatureError
from graphserve.core.inputs import (
    VOCABULARY,
    InputSource,
    ValueRange,
    load_ranges,
    parse_input_range,
    sample_inputs,
)
from graphserve.core.manifest import read_manifest
from graphserve.core.signature import TensorSpec, Vocabulary, parse_input_spec
from graphserve.exporter import ExportSpec, export_model
from graphserve.model.domains import infer_ranges
from graphserve.serving.loaders import load_eager

# -- models the tests load as sources ------------------------------------------------------------


def build_token_classifier() -> keras.Model:
    """Token ids into an Embedding of 7 rows: any id past 6 or below 0 fails the lookup."""
    ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    segments = keras.Input(shape=(None,), dtype="int32", name="segment_ids")
    x = keras.layers.Embedding(7, 4)(ids) + keras.layers.Embedding(2, 4)(segments)
    return keras.Model(
        [ids, segments], keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(x))
    )


class Picky(tf.Module):
    """Takes only multiples of 7: no range tells that, so generated inputs fail, and only the
    user's samples (or a range of one value) get through."""

    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable(2.0)

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        tf.debugging.assert_equal(x % 7, tf.zeros_like(x), message="x must be a multiple of 7")
        return tf.cast(x, tf.float32) * self.w


def build_picky() -> Picky:
    return Picky()


class NestedLookup(tf.Module):
    """An embedding behind the module's own (unsigned) tf.function: followed into its graph."""

    def __init__(self) -> None:
        super().__init__()
        self.table = tf.Variable(tf.random.stateless_normal((37, 3), seed=(1, 2)))

    @tf.function
    def __call__(self, ids: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.nn.embedding_lookup(self.table, ids), axis=-1)


def build_nested_lookup() -> NestedLookup:
    return NestedLookup()


def build_pixels() -> keras.Model:
    images = keras.Input(shape=(4, 4, 3), name="images")
    x = keras.layers.Rescaling(1 / 127.5, offset=-1)(images)
    return keras.Model(images, keras.layers.Dense(2)(keras.layers.Flatten()(x)))


def build_one_hot() -> tf.types.experimental.PolymorphicFunction:
    return tf.function(lambda c: tf.reduce_sum(tf.one_hot(c, depth=5), axis=-1))


CITIES = ["paris", "tokyo", "lima", "oslo", "cairo"]
STORES = [12, 305, 9001, 4077]


def build_adapted() -> keras.Model:
    """Keras preprocessing layers adapted to data, as Keras' structured-data guide builds them:
    a StringLookup, a Discretization, a Normalization, TextVectorization on sentences, and an
    IntegerLookup of store ids."""
    city = keras.Input(shape=(1,), dtype="string", name="city")
    age = keras.Input(shape=(1,), dtype="float32", name="age")
    income = keras.Input(shape=(1,), dtype="float32", name="income")
    review = keras.Input(shape=(1,), dtype="string", name="review")
    store = keras.Input(shape=(1,), dtype="int64", name="store")
    stores = keras.layers.IntegerLookup(output_mode="one_hot")
    stores.adapt(np.array([[s] for s in STORES * 2 + [STORES[-1]]]))
    lookup = keras.layers.StringLookup(output_mode="one_hot")
    lookup.adapt(np.array([[c] for c in CITIES * 3 + ["paris"]]))
    bins = keras.layers.Discretization(bin_boundaries=[20.0, 40.0, 60.0], output_mode="one_hot")
    scale = keras.layers.Normalization(mean=50_000.0, variance=10_000.0**2)
    words = keras.layers.TextVectorization(output_mode="multi_hot")
    words.adapt(np.array([["a good film"], ["a bad plot"], ["good acting"]]))
    text = keras.layers.Flatten()(words(review))
    features = keras.layers.Concatenate()(
        [lookup(city), bins(age), scale(income), text, stores(store)]
    )
    return keras.Model([city, age, income, review, store], keras.layers.Dense(1)(features))


class TableModule(tf.Module):
    """A table over an inline vocabulary behind the module's own tf.function: the lookup is in
    the nested function's graph, the table captured from outside it."""

    def __init__(self) -> None:
        super().__init__()
        keys = tf.constant(["red", "green", "blue"])
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(keys, tf.constant([0, 1, 2], tf.int64)), -1
        )

    @tf.function
    def __call__(self, colour: tf.Tensor) -> tf.Tensor:
        return tf.cast(self.table.lookup(colour), tf.float32)


def build_table_module() -> TableModule:
    return TableModule()


# -- generation ----------------------------------------------------------------------------------


def test_generated_integers_are_small_and_non_negative_and_masks_are_padding_masks() -> None:
    specs = [
        TensorSpec("ids", "int64", (None, 16)),
        TensorSpec("padding_mask", "int32", (None, 16)),
        TensorSpec("token_type_ids", "int32", (None, 16)),
        TensorSpec("levels", "uint8", (None,)),
    ]
    arrays = sample_inputs(specs, batch_size=64, seed=1)
    assert arrays["ids"].min() >= 0 and arrays["ids"].max() <= 100
    assert arrays["ids"].max() > 50  # the whole default range is used
    assert set(np.unique(arrays["token_type_ids"])) == {0, 1}
    mask = arrays["padding_mask"]
    assert mask[:, 0].all()  # every row keeps its first token
    # ones, then zeros: never a 1 after a 0
    assert (np.diff(mask, axis=1) <= 0).all() and (mask == 0).any()
    assert arrays["levels"].dtype == np.uint8 and arrays["levels"].max() <= 100


def test_ranges_bound_generated_values_and_strings_are_words() -> None:
    specs = [
        TensorSpec("token_ids", "int32", (None, 5)),
        TensorSpec("pixels", "float32", (None, 2, 2, 3)),
        TensorSpec("text", "string", (None,)),
    ]
    ranges = {"token_ids": ValueRange(10, 12), "pixels": ValueRange(0, 255)}
    arrays = sample_inputs(specs, batch_size=50, seed=0, ranges=ranges)
    assert set(np.unique(arrays["token_ids"])) == {10, 11, 12}
    assert arrays["pixels"].min() >= 0 and arrays["pixels"].max() <= 255
    assert arrays["pixels"].max() > 100  # uniform over the range, not a standard normal
    words = {w for phrase in arrays["text"] for w in phrase.decode().split()}
    assert words <= set(VOCABULARY) and len(words) > 5
    again = sample_inputs(specs, batch_size=50, seed=0, ranges=ranges)
    assert all(np.array_equal(arrays[k], again[k]) for k in arrays)


def test_input_range_parsing_names_what_is_wrong() -> None:
    assert parse_input_range("token_ids=0:30521") == ("token_ids", ValueRange(0, 30521))
    assert parse_input_range(" x = -1.5 : 2 ")[1] == ValueRange(-1.5, 2)
    for bad, words in [
        ("token_ids", "expected NAME=LOW:HIGH"),
        ("x=1", "expected NAME=LOW:HIGH"),
        ("x=a:b", "must be numbers"),
        ("x=5:1", "LOW <= HIGH"),
        ("x=0:inf", "finite"),
    ]:
        with pytest.raises(SignatureError, match=words):
            parse_input_range(bad)
    with pytest.raises(SignatureError, match="more than once"):
        load_ranges(["x=0:1", "x=0:2"])
    with pytest.raises(SignatureError, match="holds no int32 value"):
        sample_inputs([TensorSpec("x", "int32", (2,))], ranges={"x": ValueRange(0.2, 0.7)})


def test_signature_file_ranges(tmp_path: Path) -> None:
    path = tmp_path / "signatures.yaml"
    path.write_text(
        "signatures:\n  serving_default:\n    inputs:\n"
        "      token_ids: {dtype: int32, shape: [-1, 8], range: [0, 6]}\n"
        "      segment_ids: {dtype: int32, shape: [-1, 8]}\n"
    )
    (contract,) = load_signature_file(path)
    assert contract.ranges == {"token_ids": ValueRange(0, 6)}
    path.write_text("inputs:\n  token_ids: {dtype: int32, shape: [-1, 8], range: [0, 1, 2]}\n")
    with pytest.raises(SignatureError, match=r"inputs\.token_ids\.range"):
        load_signature_file(path)


def test_input_source_takes_the_users_rows_cycled_to_the_batch() -> None:
    specs = [TensorSpec("x", "int32", (None, 2))]
    rows = np.array([[7, 14], [21, 28], [35, 42]], dtype=np.int32)
    source = InputSource({"serving_default": {"x": rows}}, "samples.npz")
    np.testing.assert_array_equal(
        source.batch("serving_default", specs, 4)["x"], rows[[0, 1, 2, 0]]
    )
    np.testing.assert_array_equal(
        source.batch("serving_default", specs, 2, seed=1)["x"], rows[[2, 0]]
    )
    other = source.batch("other", specs, 2)["x"]  # a signature the samples do not cover
    assert other.shape == (2, 2) and other.min() >= 0


# -- what the model's graph tells -----------------------------------------------------------------


def _contract(*inputs: str) -> SignatureContract:
    return SignatureContract("serving_default", tuple(parse_input_spec(i) for i in inputs))


def test_ranges_from_the_graph_embedding_one_hot_rescaling_and_nested_functions() -> None:
    found = infer_ranges(
        build_token_classifier(),
        _contract("segment_ids:int32:-1,-1", "token_ids:int32:-1,-1"),
    )
    assert found == {"token_ids": ValueRange(0, 6), "segment_ids": ValueRange(0, 1)}
    assert "table of 7 rows" in found["token_ids"].why

    nested = infer_ranges(build_nested_lookup(), _contract("ids:int64:-1,3"))
    assert nested == {"ids": ValueRange(0, 36)}

    assert infer_ranges(build_one_hot(), _contract("c:int32:-1")) == {"c": ValueRange(0, 4)}

    pixels = infer_ranges(build_pixels(), _contract("images:float32:-1,4,4,3"))
    assert pixels == {"images": ValueRange(0, 255)} and "pixels" in pixels["images"].why

    # A model that says nothing of its inputs, or does not trace, gives no range.
    assert infer_ranges(build_picky(), _contract("x:int32:-1")) == {}
    assert infer_ranges(lambda x: x.undefined, _contract("x:int32:-1")) is None


def test_adapted_preprocessing_layers_give_their_vocabulary_bins_and_statistics() -> None:
    found = infer_ranges(
        build_adapted(),
        _contract("age:float32:-1,1", "city:string:-1,1", "income:float32:-1,1",
                  "review:string:-1,1", "store:int64:-1,1"),
    )  # fmt: skip
    assert found is not None and set(found) == {"age", "city", "income", "review", "store"}
    city = found["city"].vocabulary
    assert city is not None and not city.phrases
    # The table's keys by id, the most frequent first; the OOV token is not a key.
    assert city.words[0] == "paris" and sorted(city.words) == sorted(CITIES) and city.size == 5
    assert found["city"].why.startswith("it is looked up in a table of 5 words ('")
    review = found["review"].vocabulary
    assert review is not None and review.phrases  # TextVectorization splits before the lookup
    assert set(review.words) == {"a", "good", "film", "bad", "plot", "acting"}
    # Discretization: the span of its bins, one bin beyond each end.
    assert (found["age"].low, found["age"].high) == (0.0, 80.0)
    assert found["age"].why.startswith("its bins: 3 boundaries from 20 to 60 (")
    # Normalization: mean ± 2 standard deviations.
    assert (found["income"].low, found["income"].high) == pytest.approx((30_000.0, 70_000.0))
    assert found["income"].why.startswith("its statistics: mean 5e+04, standard deviation 1e+04")

    # IntegerLookup: its integer keys, the most frequent first, and their span.
    store = found["store"]
    assert store.vocabulary is not None and store.vocabulary.integers
    assert store.vocabulary.size == 4 and store.vocabulary.words[0] == "4077"
    assert sorted(map(int, store.vocabulary.words)) == sorted(STORES)
    assert (store.low, store.high) == (12, 9001)
    assert store.why.startswith("it is looked up in a table of 4 integer keys ('")

    nested = infer_ranges(build_table_module(), _contract("colour:string:-1"))
    assert nested is not None and nested["colour"].vocabulary is not None
    assert nested["colour"].vocabulary.words == ("red", "green", "blue")


def test_generated_words_cover_the_vocabulary_batch_after_batch() -> None:
    vocabulary = Vocabulary(("red", "green", "blue", "cyan", "teal"), 5)
    span = {"colour": ValueRange(0, 0, "a table", vocabulary=vocabulary)}
    spec = [TensorSpec("colour", "string", (None,))]
    seen: list[str] = []
    for seed in range(3):
        seen += [v.decode() for v in sample_inputs(spec, 4, seed, span)["colour"]]
    assert set(vocabulary.words) <= set(seen)  # 3 batches of 4 cover 5 words
    outside = [w for w in seen if w not in vocabulary.words]
    assert len(outside) == 1 and outside[0] in VOCABULARY  # one value in 8: the OOV path
    phrases = Vocabulary(("a", "good", "film"), 3, phrases=True)
    text = sample_inputs(spec, 16, 0, {"colour": ValueRange(0, 0, vocabulary=phrases)})["colour"]
    words = [w for v in text for w in v.decode().split()]
    assert len(words) > 16 and set(phrases.words) <= set(words)
    described = InputSource(ranges=span).describe(spec)
    assert described == (
        "colour: string words of its vocabulary (5 words) (a table), one value in 8 a word "
        "outside it"
    )


def test_generated_integer_keys_cover_the_vocabulary_and_step_outside_it() -> None:
    vocabulary = Vocabulary(("4077", "12", "305", "9001"), 4, integers=True)
    span = {"store": ValueRange(12, 9001, "a table", vocabulary=vocabulary)}
    spec = [TensorSpec("store", "int64", (None, 1))]
    batches = [sample_inputs(spec, 4, seed, span)["store"] for seed in range(2)]
    assert all(b.dtype == np.int64 and b.shape == (4, 1) for b in batches)
    seen = [int(v) for b in batches for v in b.reshape(-1)]
    assert seen == [4077, 12, 305, 9001, 4077, 12, 305, 9002]  # in turn; the 8th past the largest
    int32 = sample_inputs([TensorSpec("store", "int32", (8,))], 8, 0, span)["store"]
    assert int32.dtype == np.int32 and int32[-1] == 9002
    top = Vocabulary(("3", str(2**31 - 1)), 2, integers=True)  # no int32 past the largest
    wrapped = sample_inputs(
        [TensorSpec("k", "int32", (8,))], 8, 0, {"k": ValueRange(3, 2**31 - 1, vocabulary=top)}
    )["k"]
    assert wrapped[-1] == 2 and set(wrapped[:-1]) == {3, 2**31 - 1}
    assert InputSource(ranges=span).describe(spec) == (
        "store: int64 keys of its vocabulary (4 keys) (a table), one value in 8 a key outside it"
    )


def test_export_says_how_much_of_each_vocabulary_parity_covered(tmp_path: Path) -> None:
    lines: list[str] = []
    result = export_model(
        ExportSpec(source="tests.test_inputs:build_adapted", name="adapted", base_path=tmp_path),
        log=lines.append,
    )
    assert (
        "the parity check covered 5 of the 5 words (100 %) of the vocabulary of input 'city' "
        "(serving_default)" in lines
    )
    manifest = read_manifest(result.path)
    assert manifest is not None
    recorded = manifest["inputs"]["ranges"]["city"]["vocabulary"]
    assert recorded["size"] == 5 and recorded["phrases"] is False
    coverage = {v["input"]: v for v in manifest["parity"]["vocabularies"]}
    assert coverage["city"]["covered"] == 5 and coverage["review"]["size"] == 6
    assert coverage["store"] == {
        "signature": "serving_default",
        "input": "store",
        "covered": 4,
        "size": 4,
        "unit": "keys",
    }
    assert (
        "the parity check covered 4 of the 4 keys (100 %) of the vocabulary of input 'store' "
        "(serving_default)" in lines
    )
    stores = InputSource.recorded(manifest, []).ranges["store"]
    assert stores.vocabulary is not None and stores.vocabulary.integers
    assert (stores.low, stores.high) == (12, 9001)
    # The load test reads the same words back from the manifest.
    again = InputSource.recorded(manifest, [])
    assert again.ranges["city"].vocabulary == Vocabulary(tuple(recorded["words"]), 5, phrases=False)
    shown = CliRunner().invoke(app, ["inspect", str(result.path)])
    flat = " ".join(shown.output.split())
    assert "- city from a vocabulary of 5 words: it is looked up in a table" in flat
    assert "- store from a vocabulary of 4 keys: it is looked up in a table" in flat


# -- through the exporter and the eager server -----------------------------------------------------


def test_export_generates_within_the_ranges_the_model_tells(tmp_path: Path) -> None:
    lines: list[str] = []
    result = export_model(
        ExportSpec(
            source="tests.test_inputs:build_token_classifier", name="tok", base_path=tmp_path
        ),
        log=lines.append,
    )
    manifest = read_manifest(result.path)
    assert manifest is not None
    ranges = manifest["inputs"]["ranges"]
    assert ranges["token_ids"]["low"] == 0 and ranges["token_ids"]["high"] == 6
    assert ranges["segment_ids"]["high"] == 1 and "2 rows" in ranges["segment_ids"]["why"]
    assert manifest["inputs"]["samples"] is None
    assert any("token_ids: int32 in [0, 6]" in line for line in lines)
    shown = CliRunner().invoke(app, ["inspect", str(result.path)])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "inputs: generated - " in text
    assert "- segment_ids in [0, 1]: it indexes a table of 2 rows" in text
    assert "- token_ids in [0, 6]: it indexes a table of 7 rows" in text
    assert "- others: graphserve's defaults" in text


def test_a_model_that_refuses_generated_inputs_is_told_how_to_give_others(tmp_path: Path) -> None:
    spec = ExportSpec(
        source="tests.test_inputs:build_picky",
        name="picky",
        base_path=tmp_path,
        inputs=[parse_input_spec("x:int32:-1")],
    )
    with pytest.raises(SignatureError) as caught:
        export_model(spec)
    message = str(caught.value)
    assert "x must be a multiple of 7" in message
    assert "graphserve generated these inputs (x: int32 in [0, 100]" in message
    assert "--samples-file" in message and "--input-range NAME=LOW:HIGH" in message
    assert "\x1b" not in message and "\n" not in message
    assert not (tmp_path / "picky").exists() or not any((tmp_path / "picky").iterdir())

    # A range of the one value the model takes gets through: the range reaches every step.
    ranged = export_model(
        ExportSpec(**{**spec.__dict__, "input_ranges": {"x": ValueRange(14, 14)}})
    )
    manifest = read_manifest(ranged.path)
    assert manifest is not None and manifest["options"]["input_ranges"] == ["x=14:14"]

    # The user's samples are what the probe, parity and warm-up call the model on.
    samples = tmp_path / "samples.npz"
    np.savez(samples, x=np.array([7, 14, 21, 70], dtype=np.int32))
    given = export_model(ExportSpec(**{**spec.__dict__, "samples_file": samples}))
    manifest = read_manifest(given.path)
    assert manifest is not None and manifest["inputs"]["samples"] == str(samples)
    assert given.parity.samples == str(samples)


def test_export_cli_input_range_and_its_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["export", "tests.test_inputs:build_picky", "--name", "picky", "--input", "x:int32:-1"]
    bad = runner.invoke(app, [*base, "--base-path", str(tmp_path), "--input-range", "x=7"])
    assert bad.exit_code == 2 and "expected NAME=LOW:HIGH" in bad.output
    unknown = runner.invoke(app, [*base, "--base-path", str(tmp_path), "--input-range", "y=0:1"])
    assert unknown.exit_code == 1 and "names 'y', which no signature has" in unknown.output
    good = runner.invoke(app, [*base, "--base-path", str(tmp_path), "--input-range", "x=7:7"])
    assert good.exit_code == 0, good.output


def test_eager_server_load_check_takes_samples_and_ranges(tmp_path: Path) -> None:
    specs = [parse_input_spec("x:int32:-1")]
    with pytest.raises(ModelLoadError) as caught:
        load_eager("tests.test_inputs:build_picky", specs)
    assert "graphserve generated these inputs" in str(caught.value)
    assert "--samples-file" in str(caught.value)

    ranged = load_eager(
        "tests.test_inputs:build_picky", specs, input_ranges={"x": ValueRange(21, 21)}
    )
    assert ranged.run("serving_default", {"x": np.array([7], np.int32)})["output_0"] == [14.0]

    samples = tmp_path / "samples.json"
    samples.write_text('{"instances": [7, 49]}')
    given = load_eager("tests.test_inputs:build_picky", specs, samples_file=samples)
    assert given.signatures["serving_default"].outputs["output_0"].dtype == "float32"

    # A model whose ranges only its graph tells loads: the second try is within them.
    load_eager("tests.test_inputs:build_token_classifier")


def test_the_load_tests_default_payload_is_what_the_export_recorded(tmp_path: Path) -> None:
    from graphserve.loadtest.comparison.run import CompareSpec, payload_specs
    from graphserve.loadtest.generator.payloads import build_payload

    export_model(
        ExportSpec(
            source="tests.test_inputs:build_token_classifier", name="tok", base_path=tmp_path
        )
    )
    spec = CompareSpec(arms=(), model_base_path=tmp_path / "tok", batch_size=64)
    specs, origin, recorded = payload_specs(spec)
    assert origin == f"SavedModel {tmp_path / 'tok' / '1'}"
    payload = build_payload(specs, 64, 0, recorded)
    assert payload["token_ids"].min() >= 0 and payload["token_ids"].max() <= 6
    assert set(np.unique(payload["segment_ids"])) == {0, 1}

    # An export given samples sends the user's rows.
    samples = tmp_path / "samples.npz"
    rows = {"token_ids": np.array([[1, 2, 3]], np.int32), "segment_ids": np.zeros((1, 3), np.int32)}
    np.savez(samples, **rows)
    export_model(
        ExportSpec(
            source="tests.test_inputs:build_token_classifier",
            name="tok",
            base_path=tmp_path,
            samples_file=samples,
        )
    )
    specs, _, recorded = payload_specs(spec)
    sent = build_payload(specs, 2, 0, recorded)
    np.testing.assert_array_equal(sent["token_ids"], [[1, 2, 3], [1, 2, 3]])


def test_the_eager_servers_error_on_a_keras_layer_is_tensorflows_own() -> None:
    """Keras wraps an op's error in the layer's name, terminal bold and the layer's arguments;
    the eager server answers the op's error alone, as TF Serving does for the graph."""
    from graphserve.core.errors import InvalidInput

    runner = load_eager("tests.test_inputs:build_token_classifier")
    inputs = {"token_ids": np.array([[50, 1]], np.int32), "segment_ids": np.zeros((1, 2), np.int32)}
    with pytest.raises(InvalidInput) as caught:
        runner.run("serving_default", inputs)
    assert str(caught.value) == "indices[0,0] = 50 is not in [0, 7)"
