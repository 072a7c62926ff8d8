"""Data-dependent control flow: an explicit `tf.while_loop` and `tf.cond` on tensor values.

Eagerly both run as Python, one op dispatch per iteration; traced, they become `While` and `If`
ops (or their stateless variants) inside the graph, so the loop runs without Python. This example
shows that the exported graph keeps control flow that depends on the data, not on trace time.

For each row of `x` (float32, [-1, 4]): while some row has a squared norm above 1, the rows still
above 1 are halved, and `steps` counts the halvings per row. Halving is exact in float, so the
counts are the same in graph and eager. Then, if the batch mean is positive the rows are returned
as they are, otherwise negated (`tf.cond` picks the branch for the whole batch).
"""

from __future__ import annotations

import tensorflow as tf

from graphserve.core.signature import TensorSpec

INPUT_SIGNATURE = [TensorSpec("x", "float32", (None, 4))]

# Any finite float32 row is down to norm 1 within 130 halvings; an infinite one never is, and
# would otherwise loop forever in the server.
MAX_STEPS = 200


class Branchy(tf.Module):
    """Halve rows until their norm is at most 1, then pick a branch on the batch mean."""

    def __init__(self) -> None:
        super().__init__(name="branchy")

    def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        x = tf.convert_to_tensor(x)
        steps = tf.zeros(tf.shape(x)[:1], dtype=tf.int32)
        y, steps = tf.while_loop(
            _any_row_too_long, _halve_long_rows, (x, steps), maximum_iterations=MAX_STEPS
        )
        # The mean of an empty batch is NaN, and NaN > 0 is false: batch 0 takes the else branch.
        y = tf.cond(tf.reduce_mean(y) > 0.0, lambda: tf.identity(y), lambda: tf.negative(y))
        return {"y": y, "steps": steps}


def _too_long(x: tf.Tensor) -> tf.Tensor:
    # Squared norms, not norms: no sqrt, so halving (which quarters them exactly) is exact.
    return tf.reduce_sum(tf.square(x), axis=1) > 1.0


def _any_row_too_long(x: tf.Tensor, steps: tf.Tensor) -> tf.Tensor:
    return tf.reduce_any(_too_long(x))  # false for an empty batch


def _halve_long_rows(x: tf.Tensor, steps: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    long = _too_long(x)
    return tf.where(long[:, None], x * 0.5, x), steps + tf.cast(long, tf.int32)


def build() -> Branchy:
    return Branchy()  # no weights: the same model on every build
