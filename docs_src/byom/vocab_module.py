"""A tf.Module with a vocabulary file: a lookup table over vocab.txt (next to this file) and a
score per word. In your module, your own vocabulary file and trained variables take their place.

    graphserve export vocab_module:build --name vocab_module --input words:string:-1
"""

from pathlib import Path

import tensorflow as tf

VOCAB_FILE = Path(__file__).with_name("vocab.txt")


class WordScores(tf.Module):
    def __init__(self):
        super().__init__()
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                str(VOCAB_FILE),
                tf.string,
                tf.lookup.TextFileIndex.WHOLE_LINE,
                tf.int64,
                tf.lookup.TextFileIndex.LINE_NUMBER,
            ),
            default_value=-1,
        )
        size = len(VOCAB_FILE.read_text().split())
        # One row per word, and a last row for the words the file does not hold.
        self.embedding = tf.Variable(tf.random.normal([size + 1, 8]), name="embedding")
        self.projection = tf.Variable(tf.random.normal([8]), name="projection")
        self.oov_row = tf.constant(size, tf.int64)

    @tf.function
    def __call__(self, words):
        ids = self.table.lookup(words)
        ids = tf.where(ids < 0, self.oov_row, ids)
        vectors = tf.gather(self.embedding, ids)
        return tf.tensordot(vectors, self.projection, axes=1)


def build():
    tf.random.set_seed(0)
    return WordScores()
