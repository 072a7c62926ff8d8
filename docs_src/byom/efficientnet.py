"""EfficientNetB0 as keras.applications builds it, untrained, its BatchNormalization statistics
set from one batch of pixel images (a stand-in for trained weights): in your module, pass your
weights file instead (weights="path/to/weights.h5").

    graphserve export efficientnet:build --name efficientnet
"""

import keras
import numpy as np


def build():
    keras.utils.set_random_seed(0)
    model = keras.applications.EfficientNetB0(weights=None, input_shape=(64, 64, 3))
    # One training-mode call with momentum 0 sets every moving mean and variance to the batch's
    # own: the activations stay at the scale a trained network's do.
    norms = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    momenta = [layer.momentum for layer in norms]
    for layer in norms:
        layer.momentum = 0.0
    images = np.random.default_rng(0).uniform(0, 255, (16, 64, 64, 3)).astype("float32")
    model(images, training=True)
    for layer, momentum in zip(norms, momenta, strict=True):
        layer.momentum = momentum
    return model
