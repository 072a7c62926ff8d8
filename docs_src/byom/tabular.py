"""A Keras model over a dict of mixed inputs, its preprocessing layers adapted to the training
data as Keras' structured-data guide does it: StringLookup over a city's name, IntegerLookup over
a store's id, Discretization of an age into bins, Normalization of an income, Hashing of a user
id. In your module, adapt them to your data (or load the saved model) and load your trained
weights.

    graphserve export tabular:build --name tabular
"""

import keras
import numpy as np

# The rows the layers are adapted to: in your project, the training set.
CITIES = ["paris", "tokyo", "lima", "oslo", "cairo", "quito", "hanoi", "perth"]
STORES = [104, 117, 230, 318, 402, 561]


def _training_rows(count=256):
    rng = np.random.default_rng(0)
    return {
        "city": rng.choice(CITIES, size=(count, 1)),
        "store_id": rng.choice(STORES, size=(count, 1)),
        "age": rng.uniform(18, 90, size=(count, 1)).astype("float32"),
        "income": rng.lognormal(10.5, 0.6, size=(count, 1)).astype("float32"),
    }


def build():
    keras.utils.set_random_seed(0)
    rows = _training_rows()
    city = keras.Input(shape=(1,), dtype="string", name="city")
    age = keras.Input(shape=(1,), dtype="float32", name="age")
    income = keras.Input(shape=(1,), dtype="float32", name="income")
    user_id = keras.Input(shape=(1,), dtype="int64", name="user_id")
    store_id = keras.Input(shape=(1,), dtype="int64", name="store_id")

    lookup = keras.layers.StringLookup(output_mode="one_hot")
    lookup.adapt(rows["city"])
    stores = keras.layers.IntegerLookup(output_mode="one_hot")
    stores.adapt(rows["store_id"])
    bins = keras.layers.Discretization(num_bins=6, output_mode="one_hot")
    bins.adapt(rows["age"])
    scale = keras.layers.Normalization()
    scale.adapt(rows["income"])
    hashed = keras.layers.Hashing(num_bins=16, output_mode="one_hot")

    features = keras.layers.Concatenate()(
        [lookup(city), stores(store_id), bins(age), scale(income), hashed(user_id)]
    )
    hidden = keras.layers.Dense(16, activation="relu")(features)
    score = keras.layers.Dense(1, activation="sigmoid", name="score")(hidden)
    inputs = {"city": city, "store_id": store_id, "age": age, "income": income, "user_id": user_id}
    return keras.Model(inputs, score)
