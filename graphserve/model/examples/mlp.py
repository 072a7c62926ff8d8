"""The reference MLP: 784 → Dense 128 relu → Dense 10, float32 (an MNIST-sized classifier)."""

from __future__ import annotations

import numpy as np

from graphserve.core.signature import TensorSpec

INPUT_SIGNATURE = [TensorSpec("images", "float32", (None, 784))]

_SEED = 20261120


def build():  # -> keras.Model; keras is imported late to keep the CLI fast
    import keras

    inputs = keras.Input(shape=(784,), name="images", dtype="float32")
    hidden = keras.layers.Dense(128, activation="relu", name="hidden")(inputs)
    logits = keras.layers.Dense(10, name="logits")(hidden)
    model = keras.Model(inputs, logits, name="mlp")
    # Seeded weights (Glorot-scaled) rather than Keras' initialisers: identical on every build.
    rng = np.random.default_rng(_SEED)
    weights = []
    for w in model.get_weights():
        if w.ndim == 2:
            limit = np.sqrt(6.0 / (w.shape[0] + w.shape[1]))
            weights.append(rng.uniform(-limit, limit, size=w.shape).astype(np.float32))
        else:
            weights.append(rng.normal(0.0, 0.1, size=w.shape).astype(np.float32))
    model.set_weights(weights)
    return model
