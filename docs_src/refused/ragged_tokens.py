"""A model over variable-length token lists, declared as a ragged input."""

import keras
import tensorflow as tf


class Pooler(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = keras.layers.Embedding(1000, 8)
        self.dense = keras.layers.Dense(2)

    @tf.function(input_signature=[tf.RaggedTensorSpec([None, None], tf.int64)])
    def __call__(self, tokens: tf.RaggedTensor) -> tf.Tensor:
        pooled = tf.reduce_mean(tf.ragged.map_flat_values(self.embed, tokens), axis=1)
        return self.dense(pooled)


def build() -> Pooler:
    return Pooler()
