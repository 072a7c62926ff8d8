"""A BERT text classifier as keras_hub builds it, tiny and untrained: in your module, load your
trained one instead (keras_hub.models.BertTextClassifier.from_preset or keras.saving.load_model).

    graphserve export bert_keras_hub:build --name bert_keras_hub
"""

import keras
import keras_hub


def build():
    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=1000,
        num_layers=2,
        num_heads=2,
        hidden_dim=32,
        intermediate_dim=64,
        max_sequence_length=64,
    )
    return keras_hub.models.BertTextClassifier(backbone=backbone, num_classes=2, preprocessor=None)
