"""The model zoo: small real models of the kinds people serve, built without downloading anything.

Factories (sources `tests.zoo_models:NAME` for the exporter and the eager server alike):

    mobilenet     Keras Applications MobileNetV2 (weights=None, 64×64 RGB, alpha 0.35, 10 logits)
    text_lookup   string tokens → StringLookup → Embedding → mean → softmax over 3 classes
    dict_io       a dict of two inputs (float32 features, int64 category) → IntegerLookup,
                  Embedding, Dense, BatchNormalization, Dropout → a dict of two outputs
    keras_cnn     a small CNN; `write_keras_export` writes it with Keras' own `model.export()`

and `write_estimator_export`, a TF1 Estimator-style SavedModel (SavedModelBuilder, tf.Examples
parsed from a string placeholder of unknown rank; classify, regress and predict signatures), with
`estimator_reference`, the same model in numpy.

Every factory seeds Keras' random state first, so each call (the exporter's, the eager server's,
the test's own reference) builds the same weights, and names its inputs and outputs, so Keras'
per-process layer counters never rename them between calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from keras.layers import BatchNormalization

__all__ = [
    "ESTIMATOR_FEATURES",
    "VOCABULARY",
    "dict_io",
    "estimator_example",
    "estimator_reference",
    "keras_cnn",
    "mobilenet",
    "text_lookup",
    "write_estimator_export",
    "write_keras_export",
]

SEED = 14
VOCABULARY = ["eager", "fast", "graph", "is", "model", "serving", "slow", "the"]
TOKENS = 6  # tokens per text row
CATEGORIES = list(range(1, 20))  # the int64 ids dict_io knows; any other id is out of vocabulary


def mobilenet() -> keras.Model:
    """MobileNetV2 at 64×64, alpha 0.35, 10 classes, random weights: images → logits.

    `classifier_activation=None` serves logits, which show numerical differences a softmax over
    10 near-equal classes would hide.
    """
    keras.utils.set_random_seed(SEED)
    images = keras.Input((64, 64, 3), name="images")
    model = keras.applications.MobileNetV2(
        input_tensor=images,
        alpha=0.35,
        weights=None,
        classes=10,
        classifier_activation=None,
        name="mobilenet",
    )
    return _calibrated(model, (8, 64, 64, 3))


def text_lookup() -> keras.Model:
    """tokens (string [-1, 6]) → StringLookup → Embedding(8) → mean → probabilities [-1, 3].

    Tokens outside the vocabulary (and empty padding) map to the one out-of-vocabulary index.
    """
    keras.utils.set_random_seed(SEED)
    tokens = keras.Input((TOKENS,), dtype="string", name="tokens")
    ids = keras.layers.StringLookup(vocabulary=VOCABULARY, name="lookup")(tokens)
    vectors = keras.layers.Embedding(len(VOCABULARY) + 1, 8, name="embedding")(ids)
    pooled = keras.layers.GlobalAveragePooling1D(name="mean")(vectors)
    probabilities = keras.layers.Dense(3, activation="softmax", name="probabilities")(pooled)
    return keras.Model(tokens, probabilities, name="text_lookup")


def dict_io() -> keras.Model:
    """{"features": float32 [-1, 6], "category": int64 [-1, 1]} → {"score", "logits"}.

    BatchNormalization gets moving statistics far from its initial (0, 1), so serving with
    training=False (frozen statistics) and training=True (batch statistics) would differ, and
    Dropout is 0.5: a server that ran either in training mode would fail the comparison.
    """
    keras.utils.set_random_seed(SEED)
    features = keras.Input((6,), dtype="float32", name="features")
    category = keras.Input((1,), dtype="int64", name="category")
    index = keras.layers.IntegerLookup(vocabulary=CATEGORIES, name="category_lookup")(category)
    embedded = keras.layers.Flatten(name="flatten")(
        keras.layers.Embedding(len(CATEGORIES) + 1, 4, name="category_embedding")(index)
    )
    joined = keras.layers.Concatenate(name="join")([features, embedded])
    hidden = keras.layers.Dense(16, activation="relu", name="hidden")(joined)
    normed = keras.layers.BatchNormalization(name="batch_norm")(hidden)
    dropped = keras.layers.Dropout(0.5, name="dropout")(normed)
    outputs = {
        "score": keras.layers.Dense(1, activation="sigmoid", name="score")(dropped),
        "logits": keras.layers.Dense(3, name="logits")(dropped),
    }
    model = keras.Model({"features": features, "category": category}, outputs, name="dict_io")
    norm = model.get_layer("batch_norm")
    rng = np.random.default_rng(SEED)
    gamma, beta, _, _ = norm.get_weights()
    norm.set_weights(
        [
            gamma * 1.5,
            beta + 0.1,
            rng.uniform(0.5, 2.0, 16).astype("float32"),  # moving mean
            rng.uniform(0.5, 3.0, 16).astype("float32"),  # moving variance
        ]
    )
    return model


def keras_cnn() -> keras.Model:
    """pixels (float32 [-1, 16, 16, 1]) → Conv2D, BatchNormalization, pooling → 5 logits."""
    keras.utils.set_random_seed(SEED)
    pixels = keras.Input((16, 16, 1), name="pixels")
    x = keras.layers.Conv2D(8, 3, activation="relu", name="conv")(pixels)
    x = keras.layers.BatchNormalization(name="conv_norm")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    logits = keras.layers.Dense(5, name="logits")(x)
    return _calibrated(keras.Model(pixels, logits, name="keras_cnn"), (8, 16, 16, 1))


def _calibrated(model: keras.Model, batch_shape: tuple[int, ...]) -> keras.Model:
    """The model with every BatchNormalization's moving statistics set to the batch statistics
    of one seeded random batch, as if trained on it.

    With random weights and the initial statistics (mean 0, variance 1), MobileNetV2's
    activations shrink layer by layer to logits of about 1e-10, where any two implementations
    agree within every tolerance; calibrated, they are of order 1 and the comparisons mean
    something.
    """
    norms = [layer for layer in model._flatten_layers() if isinstance(layer, BatchNormalization)]
    momenta = [layer.momentum for layer in norms]
    for layer in norms:
        layer.momentum = 0.0  # the moving statistics become this batch's
    batch = np.random.default_rng(SEED).standard_normal(batch_shape).astype("float32")
    model([batch] if isinstance(model.input, list) else batch, training=True)
    for layer, momentum in zip(norms, momenta, strict=True):
        layer.momentum = momentum
    return model


def write_keras_export(path: Path) -> Path:
    """`keras_cnn()` written by Keras' own `model.export(path)`: signatures `serve` and
    `serving_default`, input `pixels`, output `output_0`."""
    keras_cnn().export(str(path), verbose=False)
    return path


# ---------------------------------------------------------------------------------------------
# A TF1 Estimator-style export: what `estimator.export_saved_model` with a parsing serving input
# receiver wrote for a binary linear classifier.

ESTIMATOR_FEATURES = {"x": 3, "bucket": 1}  # feature name → values per example
_W = np.array([[0.5], [-1.25], [2.0]], dtype=np.float32)
_BUCKET_WEIGHTS = np.array([0.0, 0.75, -0.5, 1.5], dtype=np.float32)  # bucket id → logit
_BIAS = np.float32(-0.25)
_CLASSIFY = "tensorflow/serving/classify"
_REGRESS = "tensorflow/serving/regress"
_PREDICT = "tensorflow/serving/predict"


def write_estimator_export(path: Path) -> Path:
    """A binary classifier exported as a TF1 Estimator does, with `SavedModelBuilder`.

    The one placeholder, `tf_example`, is a string of unknown rank holding serialized
    tf.Examples with `x` (float, 3 values) and `bucket` (int64, one value in 0..3, default 0).
    logit = x·w + bucket_weight[bucket] + bias. Signatures, as a canned binary classifier's:

        serving_default, classification  classify  inputs → classes ["0", "1"], scores
        regression                       regress   inputs → outputs: P(class 1) [-1, 1]
        predict                          predict   examples → logits, logistic,
                                                   probabilities, class_ids, classes
    """
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), v1.Session(graph=graph) as session:
        serialized = v1.placeholder(tf.string, shape=None, name="tf_example")
        features = tf.io.parse_example(
            serialized,
            {
                "x": tf.io.FixedLenFeature([3], tf.float32),
                "bucket": tf.io.FixedLenFeature([1], tf.int64, default_value=[0]),
            },
        )
        w = v1.get_variable("linear/x/weights", initializer=tf.constant(_W))
        buckets = v1.get_variable("linear/bucket/weights", initializer=tf.constant(_BUCKET_WEIGHTS))
        bias = v1.get_variable("linear/bias", initializer=tf.constant(_BIAS))
        bucket_logit = tf.gather(buckets, tf.reshape(features["bucket"], [-1]))
        logits = tf.matmul(features["x"], w) + tf.reshape(bucket_logit, [-1, 1]) + bias
        logistic = tf.sigmoid(logits, name="logistic")
        probabilities = tf.concat([1.0 - logistic, logistic], axis=1, name="probabilities")
        class_ids = tf.cast(logits > 0, tf.int64, name="class_ids")
        class_names = tf.constant(["0", "1"])
        classes = tf.gather(class_names, class_ids, name="classes")
        all_classes = tf.tile(
            tf.expand_dims(class_names, 0), [tf.shape(logits)[0], 1], name="all_classes"
        )
        info = v1.saved_model.utils.build_tensor_info

        def signature(inputs: dict[str, Any], outputs: dict[str, Any], method: str) -> Any:
            return v1.saved_model.signature_def_utils.build_signature_def(
                {k: info(t) for k, t in inputs.items()},
                {k: info(t) for k, t in outputs.items()},
                method,
            )

        classify = signature(
            {"inputs": serialized}, {"classes": all_classes, "scores": probabilities}, _CLASSIFY
        )
        session.run(v1.global_variables_initializer())
        builder = v1.saved_model.Builder(str(path))
        builder.add_meta_graph_and_variables(
            session,
            [tf.saved_model.SERVING],
            signature_def_map={
                "serving_default": classify,
                "classification": classify,
                "regression": signature({"inputs": serialized}, {"outputs": logistic}, _REGRESS),
                "predict": signature(
                    {"examples": serialized},
                    {
                        "logits": logits,
                        "logistic": logistic,
                        "probabilities": probabilities,
                        "class_ids": class_ids,
                        "classes": classes,
                    },
                    _PREDICT,
                ),
            },
            main_op=v1.tables_initializer(),
        )
        builder.save()
    return path


def estimator_reference(x: np.ndarray, bucket: np.ndarray) -> dict[str, np.ndarray]:
    """What `write_estimator_export`'s model answers, computed in numpy (float32):
    x [n, 3] float32, bucket [n] int64 → logits and logistic [n, 1], probabilities [n, 2]."""
    logits = x @ _W + _BUCKET_WEIGHTS[bucket].reshape(-1, 1) + _BIAS
    logistic = (1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    return {
        "logits": logits.astype(np.float32),
        "logistic": logistic,
        "probabilities": np.concatenate([1.0 - logistic, logistic], axis=1),
    }


def estimator_example(x: np.ndarray, bucket: int | None) -> bytes:
    """One serialized tf.Example for `write_estimator_export`'s model (no `bucket`: default 0)."""
    feature = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in x]))}
    if bucket is not None:
        feature["bucket"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[bucket]))
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString()
