"""ragged_tokens.py as the refusal says: the token lists padded, with a mask of the real ones."""

import keras
import tensorflow as tf


class Pooler(tf.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = keras.layers.Embedding(1000, 8)
        self.dense = keras.layers.Dense(2)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None], tf.int64, name="tokens"),
            tf.TensorSpec([None, None], tf.int64, name="tokens_mask"),
        ]
    )
    def __call__(self, tokens: tf.Tensor, tokens_mask: tf.Tensor) -> tf.Tensor:
        lengths = tf.reduce_sum(tokens_mask, axis=1)
        ragged = tf.RaggedTensor.from_tensor(tokens, lengths=lengths)
        pooled = tf.reduce_mean(tf.ragged.map_flat_values(self.embed, ragged), axis=1)
        return self.dense(pooled)


def build() -> Pooler:
    return Pooler()
