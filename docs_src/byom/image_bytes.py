"""An image classifier that takes JPEG files as they are, decoding and resizing them itself:
EfficientNetB0 (efficientnet.py, next to this file) behind a function of encoded bytes. Clients
send the file's bytes (REST: {"b64": ...}); the server does the decoding.

    graphserve export image_bytes:build --name image_bytes
"""

import efficientnet
import tensorflow as tf

# One string per image. The function below is plain Python: the eager server runs it op by op
# (the baseline), and the export traces it into the graph with the decoding inside.
INPUT_SIGNATURE = [tf.TensorSpec([None], tf.string, name="image_bytes")]


class JpegClassifier(tf.Module):
    def __init__(self):
        super().__init__()
        self.model = efficientnet.build()  # 64x64 pixels in [0, 255]

    def __call__(self, image_bytes):
        def decode(one):
            image = tf.io.decode_jpeg(one, channels=3)
            return tf.image.resize(image, (64, 64))

        images = tf.map_fn(decode, image_bytes, fn_output_signature=tf.float32)
        return {"probabilities": self.model(images)}


def build():
    return JpegClassifier()
