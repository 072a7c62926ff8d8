"""Several named inputs and outputs of mixed dtypes: float32, int64 and string.

Inputs `features` (float32 [-1, 8]), `category` (int64 [-1]) and `text` (string [-1]) arrive as
one dict, the way `call_model` passes several inputs. Outputs: `score` (float32 [-1]), a linear
layer on the features plus a per-category bias looked up by `category mod CATEGORIES`; `bucket`
(int64 [-1]), the text hashed into `BUCKETS` buckets; and `label` (string [-1]), "pos-<category>"
or "neg-<category>" by the sign of the score. It is in the project to exercise the signature and
codec paths that a single float tensor never reaches (string tensors, int64, several tensors per
request) in the graph and the eager server alike.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from graphserve.core.signature import TensorSpec

INPUT_SIGNATURE = [
    TensorSpec("features", "float32", (None, 8)),
    TensorSpec("category", "int64", (None,)),
    TensorSpec("text", "string", (None,)),
]

FEATURES = 8
CATEGORIES = 16
BUCKETS = 32

_SEED = 20261122


class MultiIO(tf.Module):
    """A linear score with a category bias, a text hash bucket and a string label."""

    def __init__(self, seed: int = _SEED) -> None:
        super().__init__(name="multi_io")
        rng = np.random.default_rng(seed)
        limit = np.sqrt(6.0 / (FEATURES + 1))
        self.w = tf.Variable(rng.uniform(-limit, limit, FEATURES).astype(np.float32), name="w")
        self.b = tf.Variable(np.float32(rng.normal(0.0, 0.1)), name="b")
        self.category_bias = tf.Variable(
            rng.normal(0.0, 0.5, CATEGORIES).astype(np.float32), name="category_bias"
        )

    def __call__(self, inputs: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        features = tf.convert_to_tensor(inputs["features"])
        category = tf.convert_to_tensor(inputs["category"])
        text = tf.convert_to_tensor(inputs["text"])
        # floormod, so negative categories land in 0..CATEGORIES-1 too.
        index = tf.math.floormod(category, CATEGORIES)
        score = tf.linalg.matvec(features, self.w) + self.b + tf.gather(self.category_bias, index)
        sign = tf.where(score > 0.0, "pos", "neg")
        return {
            "score": score,
            "bucket": tf.strings.to_hash_bucket_fast(text, BUCKETS),
            "label": tf.strings.join([sign, tf.strings.as_string(category)], separator="-"),
        }


def build() -> MultiIO:
    return MultiIO()
