"""A Keras model as its `model.export()` writes it for serving: a SavedModel directory with no
version directory inside. The script stands for the training job that exports it:

    python keras_archive.py    # writes keras_archive/ (your training script's model.export)
    graphserve serve graph --model-base-path keras_archive
    graphserve export keras_archive --name keras_archive
"""

import keras


def build():
    keras.utils.set_random_seed(0)
    features = keras.Input(shape=(6,), name="features")
    hidden = keras.layers.Dense(16, activation="relu")(features)
    return keras.Model(features, keras.layers.Dense(2, name="logits")(hidden))


if __name__ == "__main__":
    build().export("keras_archive", verbose=False)
