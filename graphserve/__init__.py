"""graphserve: trace TensorFlow models into SavedModels, serve them graph and eager over the
TensorFlow Serving APIs, and load-test both side by side."""

__version__ = "0.1.0"
