"""A small image classifier: a Keras conv net on 28x28x1 images, with two serving functions.

Conv2D 8 → MaxPool → Conv2D 16 → GlobalAveragePooling → Dense 10, wrapped in a `tf.Module` with
`__call__` for uint8 images (scaled to [0, 1] inside the model) and `classify_float` for float
images already in [0, 1]. Convolutions do real work per call, unlike `power`, so this example
shows how much of graph execution's advantage remains when the kernels, not Python, dominate; and
it is the example of a model exported with more than one signature (`SIGNATURES`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from graphserve.core.signature import TensorSpec

IMAGE_SHAPE = (28, 28, 1)
CLASSES = 10

# Signature name → the function to call (default: the model itself) and its inputs; the schema
# of a YAML/JSON signature file.
SIGNATURES: dict[str, dict[str, Any]] = {
    "serving_default": {"inputs": {"images": {"dtype": "uint8", "shape": [-1, 28, 28, 1]}}},
    "float_images": {
        "function": "classify_float",
        "inputs": {"images": {"dtype": "float32", "shape": [-1, 28, 28, 1]}},
    },
}
INPUT_SIGNATURE = [TensorSpec("images", "uint8", (None, 28, 28, 1))]

_SEED = 20261121


class ImageClassifier(tf.Module):
    """Logits, probabilities and the predicted class of each image."""

    def __init__(self, net: Any) -> None:
        super().__init__(name="image_classifier")
        self.net = net  # an attribute, so its variables are tracked and saved with the module

    def __call__(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        """uint8 images [-1, 28, 28, 1], 0..255."""
        return self.classify_float(tf.cast(images, tf.float32) / 255.0)

    def classify_float(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        """float32 images [-1, 28, 28, 1] in [0, 1]."""
        logits = self.net(images, training=False)
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits),
            "classes": tf.argmax(logits, axis=-1, output_type=tf.int64),
        }


def _net() -> Any:  # -> keras.Model
    import keras

    inputs = keras.Input(shape=IMAGE_SHAPE, name="images", dtype="float32")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="conv1")(inputs)
    x = keras.layers.MaxPooling2D(2, name="pool")(x)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu", name="conv2")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    logits = keras.layers.Dense(CLASSES, name="logits")(x)
    net = keras.Model(inputs, logits, name="cnn")
    # Seeded weights (Glorot-scaled) rather than Keras' initialisers: identical on every build.
    rng = np.random.default_rng(_SEED)
    weights = []
    for w in net.get_weights():
        if w.ndim >= 2:  # a Dense or Conv2D kernel: (..., fan_in, fan_out)
            receptive = int(np.prod(w.shape[:-2]))
            limit = np.sqrt(6.0 / (receptive * (w.shape[-2] + w.shape[-1])))
            weights.append(rng.uniform(-limit, limit, size=w.shape).astype(np.float32))
        else:
            weights.append(rng.normal(0.0, 0.1, size=w.shape).astype(np.float32))
    net.set_weights(weights)
    return net


def build() -> ImageClassifier:
    return ImageClassifier(_net())
