"""Model factories the tests load as `tests.factories:NAME` sources."""

from __future__ import annotations

import tensorflow as tf


class Drifting(tf.Module):
    """The classic tracing trap: a Python counter is frozen into the graph at trace time, while
    the eager model keeps counting, so the exported graph is not the model."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        self.calls += 1
        return x * float(self.calls)


def drifting() -> Drifting:
    return Drifting()


class Affine(tf.Module):
    """A tf.Module with variables and two named outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable([[1.0, -2.0], [0.5, 3.0], [2.0, 0.0]], name="w")  # 3 -> 2
        self.b = tf.Variable([0.25, -1.0], name="b")

    def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        y = tf.matmul(x, self.w) + self.b
        return {"scores": y, "best": tf.argmax(y, axis=-1)}


def affine() -> Affine:
    return Affine()


def closure():  # a plain function closing over a variable
    scale = tf.Variable(3.0)
    return lambda x: x * scale


def not_callable() -> int:
    return 42
