"""TF Serving's half_plus_two (y = 0.5 * x + 2) as Python code, for the eager server.

The same signatures as the SavedModels of tests/tf1_models.py, so one table of TF Serving's
cases runs against the graph server and the eager server alike: Predict on `x`, Regress and
Classify on serialized tf.Examples. Unlike TF Serving's generator, the `x` feature has a default
(0): the eager server calls the model once on sample strings to learn its outputs, and a
required feature would refuse them.
"""

from __future__ import annotations

import tensorflow as tf

_EXAMPLES = {"inputs": {"dtype": "string", "shape": [-1]}}

SIGNATURES = {
    "serving_default": {"inputs": {"x": {"dtype": "float32", "shape": [-1, 1]}}, "outputs": ["y"]},
    "regress_x_to_y": {"function": "regress", "inputs": _EXAMPLES, "outputs": ["outputs"]},
    "classify_x_to_y": {"function": "classify", "inputs": _EXAMPLES, "outputs": ["scores"]},
}


class HalfPlusTwo(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = tf.Variable(0.5, name="a")
        self.b = tf.Variable(2.0, name="b")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return self.a * x + self.b

    def _x(self, serialized: tf.Tensor) -> tf.Tensor:
        features = {"x": tf.io.FixedLenFeature([1], tf.float32, default_value=[0.0])}
        return tf.io.parse_example(serialized, features)["x"]

    def regress(self, serialized: tf.Tensor) -> tf.Tensor:
        return self(self._x(serialized))

    def classify(self, serialized: tf.Tensor) -> tf.Tensor:
        return self(self._x(serialized))


def build() -> HalfPlusTwo:
    return HalfPlusTwo()
