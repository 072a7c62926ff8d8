"""Model factories the tests load as `tests.factories:NAME` sources."""

from __future__ import annotations

import random

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


class ShapeRetracing(tf.Module):
    """The retracing trap by shape: a tf.function without input_signature traces per batch."""

    @tf.function
    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return x * 2.0


def shape_retracing() -> ShapeRetracing:
    return ShapeRetracing()


@tf.function
def _scaled(x: tf.Tensor, n: int) -> tf.Tensor:
    return x * float(n)


def value_retracing():  # the trap by value: a Python int that changes with the batch
    return lambda x: _scaled(x, x.shape[0] or 1)


class Relaxed(tf.Module):
    """reduce_retracing=True: traced at most twice whatever the batch sizes, so it passes."""

    @tf.function(reduce_retracing=True)
    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return x + 1.0


def relaxed() -> Relaxed:
    return Relaxed()


class FileWriter(tf.Module):
    """A model whose graph writes a file: the op scan must refuse it."""

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        tf.io.write_file("/tmp/graphserve-should-not-exist", tf.strings.as_string(x[0, 0]))
        return x * 1.0


def file_writer() -> FileWriter:
    return FileWriter()


class TwoHeads(tf.Module):
    """`__call__` and a second method, `embed`, for --signature embed=embed."""

    def __init__(self) -> None:
        super().__init__()
        self.w = tf.Variable([[1.0, 2.0], [3.0, 4.0]])

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.matmul(x, self.w), axis=-1)

    def embed(self, x: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        e = tf.matmul(x, self.w)
        return e, tf.norm(e, axis=-1)


def two_heads() -> TwoHeads:
    return TwoHeads()


class LazyBuilt(tf.Module):
    """Builds on its first call, drawing its initial weight from Python's random, as tf-keras
    layers draw their initializers' seeds: once, while building, never per request."""

    def __init__(self) -> None:
        super().__init__()
        self.w: tf.Variable | None = None

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        if self.w is None:
            self.w = tf.Variable(random.random() + 1.0, name="w")
        return x * self.w


def lazy_built() -> LazyBuilt:
    return LazyBuilt()
