"""A BERT sequence classifier as Hugging Face transformers builds it for TensorFlow, tiny and
untrained: in your module, load your trained one instead
(TFBertForSequenceClassification.from_pretrained("path/to/checkpoint")). It declares its serving
signature (`model.input_signature`: input_ids, attention_mask and token_type_ids), which the
export reads:

    graphserve export bert_transformers:build --name bert_transformers
"""

import tf_keras
from transformers import BertConfig, TFBertForSequenceClassification


def build():
    # transformers' TF classes are tf_keras models: their initializers draw from tf_keras' seed.
    tf_keras.utils.set_random_seed(0)
    config = BertConfig(
        vocab_size=1000,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=2,
    )
    model = TFBertForSequenceClassification(config)
    model.build_in_name_scope()  # its weights, as from_pretrained builds them
    return model
