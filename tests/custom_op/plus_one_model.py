"""A model whose serving function calls a custom op (tests/custom_op/plus_one.cc): the library
is loaded from $PLUS_ONE_SO when this module is imported, as a user's project loads its own."""

from __future__ import annotations

import os

import tensorflow as tf

ops = tf.load_op_library(os.environ["PLUS_ONE_SO"])


class PlusOne(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": ops.graphserve_plus_one(x) * 2.0}


def build() -> PlusOne:
    return PlusOne()
