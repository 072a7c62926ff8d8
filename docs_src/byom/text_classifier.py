"""A Keras text classifier that takes raw strings: TextVectorization over an inline vocabulary,
an embedding, a softmax. In your module, build it with your vocabulary and load your trained
weights (model.load_weights("classifier.weights.h5")).

    graphserve export text_classifier:build --name text_classifier
"""

import keras

VOCABULARY = [
    "the", "a", "movie", "film", "was", "is", "good", "great", "bad", "awful",
    "plot", "acting", "not", "very", "boring", "fun", "loved", "hated", "and", "story",
]  # fmt: skip


def build():
    keras.utils.set_random_seed(0)
    text = keras.Input(shape=(1,), dtype="string", name="text")
    tokens = keras.layers.TextVectorization(vocabulary=VOCABULARY, output_sequence_length=8)(text)
    embedded = keras.layers.Embedding(len(VOCABULARY) + 2, 16)(tokens)
    pooled = keras.layers.GlobalAveragePooling1D()(embedded)
    scores = keras.layers.Dense(2, activation="softmax")(pooled)
    return keras.Model(text, scores)
