"""The benchmark's own model: an image classifier head on 224×224×3 float32 inputs.

The codec goal (G6) asks what the codec costs next to serving a request that carries one
224×224×3 image; none of the built-in examples takes an image that large, so this one does: a
strided 3×3 convolution, global average pooling and a dense layer, with fixed weights (no
download, the same model on every build). Source: `bench.models:image`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from graphserve.core.signature import TensorSpec

__all__ = ["INPUT_SIGNATURE", "ImageHead", "image"]

INPUT_SIGNATURE = [TensorSpec("images", "float32", (None, 224, 224, 3))]


class ImageHead(tf.Module):
    def __init__(self, seed: int = 7, filters: int = 16, classes: int = 10) -> None:
        super().__init__(name="image_head")
        rng = np.random.default_rng(seed)
        self.kernel = tf.constant(rng.normal(0, 0.1, (3, 3, 3, filters)).astype(np.float32))
        self.dense = tf.constant(rng.normal(0, 0.1, (filters, classes)).astype(np.float32))

    def __call__(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        features = tf.nn.relu(tf.nn.conv2d(images, self.kernel, strides=4, padding="SAME"))
        pooled = tf.reduce_mean(features, axis=[1, 2])
        return {"scores": tf.nn.softmax(tf.matmul(pooled, self.dense))}


def image() -> ImageHead:
    return ImageHead()
