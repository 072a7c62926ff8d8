"""A Vision Transformer image classifier as Hugging Face transformers builds it for TensorFlow,
tiny and untrained: in your module, load your trained one instead
(TFViTForImageClassification.from_pretrained("path/to/checkpoint")). Its declared signature
takes `pixel_values` channels first, [batch, 3, 32, 32] here, normalised as its image processor
leaves them (about -1 to 1):

    graphserve export vit_transformers:build --name vit_transformers
"""

import tf_keras
from transformers import TFViTForImageClassification, ViTConfig


def build():
    tf_keras.utils.set_random_seed(0)
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
    )
    model = TFViTForImageClassification(config)
    model.build_in_name_scope()
    return model
