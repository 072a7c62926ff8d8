"""Matrix power: 100 chained 10x10 int32 matmuls, the eager-versus-graph case of the TF guide.

Each matmul is tiny, so eagerly the cost is Python and op dispatch, paid 100 times per call; the
traced graph holds the 100 `BatchMatMulV2` ops and runs them without returning to Python. That
overhead is what this example makes visible when the graph and eager servers are load-tested
side by side. Integer overflow wraps (two's complement) identically in both.
"""

from __future__ import annotations

import tensorflow as tf

from graphserve.core.signature import TensorSpec

INPUT_SIGNATURE = [TensorSpec("x", "int32", (None, 10, 10))]

POWER = 100
SIZE = 10


class MatrixPower(tf.Module):
    """`x` to the power `exponent` for a batch of square matrices, by repeated multiplication."""

    def __init__(self, exponent: int = POWER) -> None:
        super().__init__(name="matrix_power")
        self.exponent = exponent

    def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        x = tf.convert_to_tensor(x)
        # The identity for every matrix of the batch; a Python loop, so the graph unrolls it.
        result = tf.broadcast_to(tf.eye(SIZE, dtype=x.dtype), tf.shape(x))
        for _ in range(self.exponent):
            result = tf.matmul(x, result)
        return {"power": result}


def build() -> MatrixPower:
    return MatrixPower()  # no weights: the same model on every build
