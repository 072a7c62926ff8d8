"""The model of batching's first goal (G4a): Keras Applications' MobileNetV2 in its smallest
published configuration, alpha 0.35 on 96×96×3 float32 `images`, 1000 class probabilities,
with seeded random weights (weights=None: nothing is downloaded; the same model on every build).

G4a needs a model whose own time dominates a served request (3.5 of 4.0 ms here), where
batching can pay: in process its Session runs a batch of 16 images in 0.65 ms per image, 16
concurrent calls of one image in 1.71 ms per image (tools/bench/README.md). Source:
`bench.mobilenet:mobilenet`. Its own module: a module's INPUT_SIGNATURE (bench.models declares
one) is every factory's in it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["INPUT_SHAPE", "mobilenet"]

INPUT_SHAPE = (96, 96, 3)


def mobilenet() -> Any:  # -> keras.Model; keras is imported late, as in the examples
    """MobileNetV2, alpha 0.35: images [-1, 96, 96, 3] float32 → probabilities [-1, 1000]."""
    import keras

    keras.utils.set_random_seed(7)
    images = keras.Input(INPUT_SHAPE, name="images")
    return keras.applications.MobileNetV2(
        input_tensor=images, alpha=0.35, weights=None, name="mobilenet"
    )
