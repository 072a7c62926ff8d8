"""A DistilBERT sequence classifier as Hugging Face transformers builds it for TensorFlow, tiny
and untrained: in your module, load your trained one instead
(TFDistilBertForSequenceClassification.from_pretrained("path/to/checkpoint")). Its declared
signature has two inputs (input_ids and attention_mask: DistilBERT has no segment ids):

    graphserve export distilbert_transformers:build --name distilbert_transformers
"""

import tf_keras
from transformers import DistilBertConfig, TFDistilBertForSequenceClassification


def build():
    tf_keras.utils.set_random_seed(0)
    config = DistilBertConfig(
        vocab_size=1000,
        dim=32,
        n_layers=2,
        n_heads=2,
        hidden_dim=64,
        max_position_embeddings=64,
        num_labels=2,
    )
    model = TFDistilBertForSequenceClassification(config)
    model.build_in_name_scope()
    return model
