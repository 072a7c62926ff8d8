"""A Keras model with a custom layer, saved to a `.keras` file as a training script saves it.
The file names the layer's class (`byom>Scale`); Keras finds it only once this module, which
registers it, is imported, so the commands import it:

    python custom_layers.py    # writes custom_layers.keras (your training script's model.save)
    graphserve export custom_layers.keras --name custom_layers --import custom_layers
"""

import keras


@keras.saving.register_keras_serializable(package="byom")
class Scale(keras.layers.Layer):
    """Multiplies its input by a learned vector, one factor per feature."""

    def build(self, input_shape):
        self.factor = self.add_weight(
            shape=(input_shape[-1],), initializer="random_uniform", name="factor"
        )

    def call(self, inputs):
        return inputs * self.factor


def build():
    keras.utils.set_random_seed(0)
    features = keras.Input(shape=(8,), name="features")
    hidden = keras.layers.Dense(16, activation="relu")(Scale()(features))
    scores = keras.layers.Dense(3, activation="softmax", name="scores")(hidden)
    return keras.Model(features, scores)


if __name__ == "__main__":
    build().save("custom_layers.keras")
